"""Outcomes and findings to JSON and back, for the state database.

The state database lives inside the cache folder, so it is as untrusted as the cache files:
it holds JSON of plain values, never pickles, and a row that does not decode is treated as
absent (the file is read again) rather than trusted.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

from cachedoctor.checks import PeerEntry, PeerTensor
from cachedoctor.findings import Finding, Fix, Severity
from cachedoctor.scan.outcome import Outcome
from cachedoctor.stores.interface import is_remote


def finding_to_json(f: Finding, folder: str) -> list[Any]:
    """Paths inside ``folder`` are kept by name, so a cache moved with ``mv`` (same inodes and
    times, so its rows still match) reports its files where they are now."""
    prefix = inside(folder)
    path = f.path[len(prefix) :] if f.path.startswith(prefix) else f.path
    return [f.kind, f.severity.value, path, f.message, f.fix.value, f.source, dict(f.details)]


def finding_from_json(row: list[Any], folder: str) -> Finding:
    kind, severity, path, message, fix, source, details = row
    return Finding(
        kind=kind,
        severity=Severity(severity),
        path=_joined(folder, path),
        message=message,
        fix=Fix(fix),
        source=source,
        details=details,
    )


def inside(folder: str) -> str:
    """What the path of a file in ``folder`` starts with. A URL's folder is taken as written, and
    its names joined back as written (:func:`_joined`): a key is no path, and the folder of
    ``a//b.pt`` is ``a/``; stripped, the name was ``/b.pt``, which ``os.path.join`` took for an
    absolute path, and a rescan named the finding ``/b.pt``. (``plan.py`` cuts names with it too.)"""
    return folder + "/" if is_remote(folder) else folder.rstrip(os.sep) + os.sep


def _joined(folder: str, name: str) -> str:
    if is_remote(folder):
        return name if is_remote(name) else f"{folder}/{name}"  # (a URL outside it: kept whole)
    return os.path.join(folder, name)


def outcome_to_text(o: Outcome) -> str:
    """Everything of an outcome but its path, size and mtime (the row holds those)."""
    peer = None
    if o.peer is not None:  # the key as the file holds it only where it is not its family's name
        peer = [[t.key, t.dtype, list(t.shape), *([t.name] if t.name else [])] for t in o.peer.tensors]
    row: dict[str, Any] = {
        "s": o.status,
        "f": [finding_to_json(f, os.path.dirname(o.path)) for f in o.findings],
        "g": o.group,
        "p": peer,
        "fmt": o.format,
        "sh": [[k, list(s)] for k, s in o.shapes],
        "v": [[k, list(v)] for k, v in o.values],
    }
    if o.peer is not None and o.peer.stats:  # deep reads of latents: their channel statistics
        row["st"] = [[k, base64.b64encode(b).decode()] for k, b in o.peer.stats]
    return json.dumps(row, separators=(",", ":"))


def outcome_from_text(path: str, size: int, mtime_ns: int, text: str) -> Outcome | None:
    """The outcome a row recorded, or ``None`` when the row does not decode (read the file again)."""
    try:
        d = json.loads(text)
        peer = None
        if d["p"] is not None:
            stats = tuple((k, base64.b64decode(b, validate=True)) for k, b in d.get("st", ()))
            if any(len(b) % 8 for _, b in stats):  # float32 means and stds, two per channel
                return None
            peer = PeerEntry(path, tuple(PeerTensor(k, dt, tuple(s), *name) for k, dt, s, *name in d["p"]), stats)
        return Outcome(
            path,
            size,
            d["s"],
            tuple(finding_from_json(f, os.path.dirname(path)) for f in d["f"]),
            d["g"],
            peer,
            d["fmt"],
            mtime_ns=mtime_ns,
            shapes=tuple((k, tuple(s)) for k, s in d["sh"]),
            values=tuple((k, tuple(v)) for k, v in d["v"]),
        )
    except (ValueError, KeyError, TypeError):  # binascii.Error is a ValueError
        return None


__all__ = ["finding_from_json", "finding_to_json", "outcome_from_text", "outcome_to_text"]
