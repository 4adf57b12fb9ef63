"""The per-file pipeline that runs inside scan workers: name rules, read, file checks.

Returns small picklable outcomes: the findings, a compact peer record for the folder-level
checks, or an error that makes the scan incomplete (exit 2).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from cachedoctor.checks import CHECKS, Inspected, PeerEntry, PeerTensor, is_temp_name
from cachedoctor.findings import Finding
from cachedoctor.formats import FileMeta, ReadError, UnreadableFile, claims_cache, read_file

_RESOLUTION = re.compile(r"\d+x\d+")


@dataclass(frozen=True, slots=True)
class Outcome:
    path: str
    size: int
    status: str  # "read", "skipped" (foreign file) or "error"
    findings: tuple[Finding, ...] = ()
    group: str | None = None  # peer group key within the folder
    peer: PeerEntry | None = None
    format: str | None = None
    error: str | None = None


def inspect_path(path: str, *, deep: bool) -> Outcome:
    """Everything a scan learns about one file on its own."""
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        return Outcome(path, 0, "error", error=f"cannot stat: {exc.strerror or exc}")
    if is_temp_name(path):
        return _judge(Inspected(path, size, temp=True), fmt=None)
    try:
        meta = read_file(path, deep=deep)
    except UnreadableFile as exc:
        return Outcome(path, size, "error", error=exc.message)
    except ReadError as exc:
        if exc.problem == "empty" and not claims_cache(path):
            return Outcome(path, size, "skipped")
        return _judge(Inspected(path, size, error=exc), fmt=None)
    except Exception as exc:  # a reader bug must not stop a scan of a million files
        return Outcome(path, size, "error",
                       error=f"internal error while reading ({type(exc).__name__}: {exc}); please report it")
    if meta is None:
        if not claims_cache(path):
            return Outcome(path, size, "skipped")
        error = ReadError("unknown-format", "not a torch.save, safetensors or npz file, though its name says so")
        return _judge(Inspected(path, size, error=error), fmt=None)
    return _judge(Inspected(path, size, meta=meta), fmt=meta.format)


def _judge(item: Inspected, fmt: str | None) -> Outcome:
    findings = tuple(f for check in CHECKS for f in check.check_file(item))
    group, peer = peer_record(item.meta) if item.meta is not None and not item.meta.foreign_globals else (None, None)
    return Outcome(item.path, item.size, "read", findings, group, peer, fmt)


def peer_record(meta: FileMeta) -> tuple[str | None, PeerEntry | None]:
    """The file's peer group key and its compact record for folder-level checks."""
    if not meta.tensors:
        return None, None
    tensors = tuple(PeerTensor(_RESOLUTION.sub("HxW", t.key), t.dtype, t.shape) for t in meta.tensors)
    family = "torch" if meta.format.startswith("torch") else meta.format
    group = f"{family}|{meta.container}|{','.join(sorted({t.key for t in tensors}))}"
    return group, PeerEntry(meta.path, tensors)


def inspect_chunk(paths: list[str], deep: bool) -> list[Outcome]:
    return [inspect_path(p, deep=deep) for p in paths]
