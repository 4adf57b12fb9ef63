"""The scan engine: :func:`scan` walks targets, reads every file safely, and runs the checks."""

from cachedoctor.scan.engine import ScanError, ScanOptions, ScanResult, ScanStats, scan
from cachedoctor.scan.walk import TargetError

__all__ = ["ScanError", "ScanOptions", "ScanResult", "ScanStats", "TargetError", "scan"]
