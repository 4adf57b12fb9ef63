"""The exit codes of every command, in one enum, so no module writes a bare 0, 1, 2 or 130.

A CI job branches on these: 0 the cache is clean (or the repair left it clean), 1 there are
findings at or above ``--fail-on`` (repair: not clean yet), 2 the command could not run or could
not read everything (an incomplete scan certifies nothing), 130 Ctrl-C (the shell's 128 + SIGINT).
"""

from __future__ import annotations

import enum


class ExitStatus(enum.IntEnum):
    CLEAN = 0
    FINDINGS = 1  # repair and recover: not clean yet
    ERROR = 2  # could not run, or could not read everything
    INTERRUPTED = 130


__all__ = ["ExitStatus"]
