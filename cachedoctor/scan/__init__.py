"""The scan engine: :func:`scan` walks targets, reads every file safely, and runs the checks."""

from cachedoctor.scan.engine import scan
from cachedoctor.scan.folders import ScanError, ScanStats
from cachedoctor.scan.options import ScanOptions
from cachedoctor.scan.outcome import Outcome
from cachedoctor.scan.result import ScanResult
from cachedoctor.scan.walk import TargetError


def inspect_file(path: str, *, deep: bool = True, unsaved: bool = False) -> Outcome:
    """One file judged on its own, as a scan would (see :func:`cachedoctor.scan.worker.inspect_file`);
    imported on first use, so that importing the scan loads no reader."""
    from cachedoctor.scan.worker import inspect_file as inspect

    return inspect(path, deep=deep, unsaved=unsaved)


def inspect_bytes(path: str, data: bytes) -> Outcome:
    """``inspect_file(path, deep=True, unsaved=True)`` of bytes in memory (see
    :func:`cachedoctor.scan.worker.inspect_bytes`)."""
    from cachedoctor.scan.worker import inspect_bytes as inspect

    return inspect(path, data)


__all__ = [
    "Outcome",
    "ScanError",
    "ScanOptions",
    "ScanResult",
    "ScanStats",
    "TargetError",
    "inspect_bytes",
    "inspect_file",
    "scan",
]
