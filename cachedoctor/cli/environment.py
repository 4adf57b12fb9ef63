"""The process environment the CLI talks to, injected so tests can fake a TTY (as httpie does).

:func:`current` is the environment of the command now running (``run()`` sets it), so command
functions, which Typer calls with parsed options only, can reach it without a global.
"""

from __future__ import annotations

import contextvars
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TextIO


@dataclass
class Environment:
    stdout: TextIO = field(default_factory=lambda: sys.stdout)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)
    #: Where answers to questions come from (repair's "Go ahead?", quarantine purge's).
    stdin: TextIO = field(default_factory=lambda: sys.stdin)
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
            self.stdin_isatty = _isatty(self.stdin)

    def error(self, message: str) -> None:
        """One line on stderr, the way every could-not-run problem is reported."""
        print(f"cachedoctor: error: {message}", file=self.stderr)

    def ask(self, question: str) -> bool:
        """``question`` on stdout, a yes from stdin (anything else, or end of input, is no)."""
        print(question, end="", file=self.stdout, flush=True)
        return self.stdin.readline().strip().lower() in ("y", "yes")


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


_CURRENT: contextvars.ContextVar[Environment] = contextvars.ContextVar("cachedoctor_env")


def current() -> Environment:
    """The environment of the running command."""
    return _CURRENT.get()


def use(env: Environment) -> contextvars.Token[Environment]:
    return _CURRENT.set(env)


def release(token: contextvars.Token[Environment]) -> None:
    _CURRENT.reset(token)


__all__ = ["Environment", "current", "release", "use"]
