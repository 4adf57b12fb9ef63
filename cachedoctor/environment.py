"""The process environment the CLI talks to, injected so tests can fake a TTY (as httpie does)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Mapping, TextIO


@dataclass
class Environment:
    stdout: TextIO = field(default_factory=lambda: sys.stdout)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)
    stdout_isatty: bool | None = None
    stderr_isatty: bool | None = None
    stdin_isatty: bool | None = None  # repair asks before changing anything only on a terminal
    cwd: str = field(default_factory=os.getcwd)
    argv: list[str] = field(default_factory=lambda: list(sys.argv))
    #: The variables ``CACHEDOCTOR_*`` settings are read from (tests pass their own).
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    #: What Ctrl-C means for the running command (repair: resumable, not "nothing changed").
    interrupted: str = "interrupted; nothing was changed"

    def __post_init__(self) -> None:
        if self.stdout_isatty is None:
            self.stdout_isatty = _isatty(self.stdout)
        if self.stderr_isatty is None:
            self.stderr_isatty = _isatty(self.stderr)
        if self.stdin_isatty is None:
            self.stdin_isatty = _isatty(sys.stdin)

    def error(self, message: str) -> None:
        """One line on stderr, the way every could-not-run problem is reported."""
        print(f"cachedoctor: error: {message}", file=self.stderr)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
