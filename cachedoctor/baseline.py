"""Baselines: accept today's findings so that a scan fails only on new ones.

A finding's id is the sha256 of its kind, its path relative to the baseline file's folder and
the details that say *where* in the file it is (a tensor key, a zip member), never its message,
so ids survive a moved checkout and rewording. The file is
``{"schema": "cachedoctor.baseline/1", "ids": [...]}``, written atomically.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable

from cachedoctor.errors import PathError
from cachedoctor.findings import Finding
from cachedoctor.stores.interface import is_remote

SCHEMA = "cachedoctor.baseline/1"
#: The details that locate a finding inside its file (measurements are left out: they drift).
_LOCATING = ("key", "keys", "member", "role")


class BaselineError(PathError):
    """A baseline that cannot be read or written (exit 2, one line)."""


def finding_id(finding: Finding, folder: str) -> str:
    # an object's URL names it wherever the baseline lies
    relative = finding.path if is_remote(finding.path) else os.path.relpath(finding.path, folder).replace(os.sep, "/")
    where = {k: finding.details[k] for k in _LOCATING if k in finding.details}
    text = json.dumps([finding.kind, relative, where], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _folder(path: str) -> str:
    return os.path.dirname(os.path.abspath(path))


def write(path: str, findings: Iterable[Finding]) -> int:
    """Write the ids of ``findings`` to ``path``; how many distinct ids were written."""
    from cachedoctor.atomic import atomic_text

    folder = _folder(path)
    ids = sorted({finding_id(f, folder) for f in findings})
    try:
        with atomic_text(path, prefix=".cachedoctor-baseline-") as out:
            json.dump({"schema": SCHEMA, "ids": ids}, out, indent=1)
            out.write("\n")
    except OSError as exc:
        raise BaselineError(os.path.abspath(path), f"cannot write the baseline ({exc.strerror or exc})") from None
    return len(ids)


def load(path: str) -> frozenset[str]:
    where = os.path.abspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as exc:
        raise BaselineError(
            where, f"cannot read the baseline ({exc.strerror or exc}); write one with --write-baseline"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise BaselineError(where, f"not a baseline (bad JSON: {exc}); write it again with --write-baseline") from None
    if (
        not isinstance(doc, dict)
        or doc.get("schema") != SCHEMA
        or not isinstance(doc.get("ids"), list)
        or not all(isinstance(i, str) for i in doc["ids"])
    ):
        raise BaselineError(where, f"not a {SCHEMA} file; write it again with --write-baseline")
    return frozenset(doc["ids"])


def suppress(path: str, findings: list[Finding]) -> tuple[list[Finding], int]:
    """The findings not in the baseline at ``path``, and how many were dropped."""
    ids = load(path)
    folder = _folder(path)
    kept = [f for f in findings if finding_id(f, folder) not in ids]
    return kept, len(findings) - len(kept)
