"""The scan engine: :func:`scan` walks targets, reads every file safely, and runs the checks."""

from cachedoctor.scan.engine import ScanError, ScanOptions, ScanResult, ScanStats, scan
from cachedoctor.scan.walk import TargetError
from cachedoctor.scan.worker import Outcome, inspect_file

__all__ = ["Outcome", "ScanError", "ScanOptions", "ScanResult", "ScanStats", "TargetError", "inspect_file", "scan"]
