"""The process environment the CLI talks to, injected so tests can fake a TTY (as httpie does).

:func:`current` is the environment of the command now running (``run()`` sets it), so command
functions, which Typer calls with parsed options only, can reach it without a global.
"""

from __future__ import annotations

import contextvars
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.console import Console

#: Verbosity levels (``-q`` / default / ``-v``).
QUIET, NORMAL, VERBOSE = -1, 0, 1


@dataclass
class Environment:
    stdout: TextIO = field(default_factory=lambda: sys.stdout)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)
    #: Where answers to questions come from (repair's "Go ahead?", quarantine purge's).
    stdin: TextIO = field(default_factory=lambda: sys.stdin)
    stdout_isatty: bool | None = None
    stderr_isatty: bool | None = None
    stdin_isatty: bool | None = None  # repair asks before changing anything only on a terminal
    #: Whether stderr, when it is not a terminal, is a log that ``--progress auto`` writes plain
    #: lines to: a real file or pipe (a SLURM or nohup job's log, ``2>file``), not an in-memory
    #: stream that a program calling ``run()`` hands in (it gets none unless it asks).
    stderr_is_log: bool | None = None
    cwd: str = field(default_factory=os.getcwd)
    argv: list[str] = field(default_factory=lambda: list(sys.argv))
    #: The variables ``CACHEDOCTOR_*`` settings are read from (tests pass their own).
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    #: What Ctrl-C means for the running command (repair: resumable, not "nothing changed").
    interrupted: str = "interrupted; nothing was changed"
    #: ``--color``: ``auto`` (a terminal, unless ``NO_COLOR``; ``FORCE_COLOR`` forces it), ``always``, ``never``.
    color_mode: str = "auto"
    #: ``-q`` (:data:`QUIET`: findings and errors only, no progress), :data:`NORMAL`, ``-v`` (:data:`VERBOSE`: every file).
    verbosity: int = NORMAL
    #: ``-q`` was given: no progress at all, whatever ``--progress`` says.
    quiet_asked: bool = False
    #: The terminal's width in columns (``None``: ask the terminal, or ``$COLUMNS``, when needed).
    columns: int | None = None

    def __post_init__(self) -> None:
        if self.stdout_isatty is None:
            self.stdout_isatty = _isatty(self.stdout)
        if self.stderr_isatty is None:
            self.stderr_isatty = _isatty(self.stderr)
        if self.stdin_isatty is None:
            self.stdin_isatty = _isatty(self.stdin)
        if self.stderr_is_log is None:
            self.stderr_is_log = not self.stderr_isatty and _has_descriptor(self.stderr)

    def configure(self, *, color: str | None = None, quiet: bool = False, verbose: bool = False) -> None:
        """Apply the terminal options every command shares (``--color``, ``-q``, ``-v``)."""
        if color is not None:
            self.color_mode = str(getattr(color, "value", color))
        if quiet and verbose:
            from cachedoctor.errors import UsageError

            raise UsageError("pass -q/--quiet or -v/--verbose, not both")
        self.verbosity = QUIET if quiet else VERBOSE if verbose else NORMAL
        self.quiet_asked = quiet

    def color(self, stream_isatty: bool | None) -> bool:
        """Whether output to a stream that is (or is not) a terminal gets colour and styles.

        ``--color always|never`` decides; ``auto`` follows https://no-color.org (``NO_COLOR``
        set and not empty: never) and ``FORCE_COLOR`` (set and not empty: always), else the terminal
        (unless ``TERM=dumb``).
        """
        if self.color_mode == "always":
            return True
        if self.color_mode == "never":
            return False
        if self.environ.get("NO_COLOR"):
            return False
        if self.environ.get("FORCE_COLOR"):
            return True
        if self.environ.get("TERM") == "dumb":  # a terminal that cannot show styles (Emacs' shell, some CI)
            return False
        return bool(stream_isatty)

    @property
    def width(self) -> int:
        """Columns to wrap human output at: ``$COLUMNS``, else the terminal's width, else 80."""
        if self.columns is not None:
            return self.columns
        value = self.environ.get("COLUMNS", "")
        if value.isdigit() and int(value) >= 20:
            return int(value)
        if self.stdout_isatty or self.stderr_isatty:
            return max(20, shutil.get_terminal_size((80, 24)).columns)
        return 80

    def wrap(self, line: str, indent: str | None = None) -> str:
        """``line`` wrapped at word boundaries to :attr:`width`; continuation lines keep its own
        indentation (plus ``indent``, default two spaces), and no word is ever broken."""
        from cachedoctor.report.text import wrap_line

        return wrap_line(line, self.width, indent)

    def console(self, stream: TextIO | None = None, *, isatty: bool | None = None, live: bool = False) -> Console:
        """A rich console on ``stream`` (stdout by default) that honours ``--color``,
        ``NO_COLOR``/``FORCE_COLOR`` and the width.

        Everything is settled here, from this environment, never by rich from ``os.environ``
        (``TERM=dumb`` would otherwise silence ``FORCE_COLOR``). ``live``: the stream is a
        terminal that gets cursor movement (a progress display) even when colour is off.
        """
        from rich.console import Console

        stream = self.stdout if stream is None else stream
        if isatty is None:
            isatty = (
                self.stdout_isatty if stream is self.stdout else self.stderr_isatty if stream is self.stderr else False
            )
        color = self.color(isatty)
        return Console(
            file=stream,
            force_terminal=color or (live and bool(isatty)),
            no_color=not color,
            color_system="standard" if color else None,
            highlight=False,
            width=self.width,
            emoji=False,
            markup=False,
        )

    @property
    def show_progress(self) -> bool:
        """Progress bars go to stderr, only when it is a terminal and ``-q`` was not given."""
        return bool(self.stderr_isatty) and self.verbosity > QUIET

    def error(self, message: str) -> None:
        """One line on stderr, the way every could-not-run problem is reported."""
        print(f"cachedoctor: error: {message}", file=self.stderr)

    def ask(self, question: str) -> bool:
        """``question`` on stdout, a yes from stdin (anything else, or end of input, is no)."""
        print(question, end="", file=self.stdout, flush=True)
        return self.stdin.readline().strip().lower() in ("y", "yes")


def _has_descriptor(stream: TextIO) -> bool:
    try:
        stream.fileno()
    except (AttributeError, ValueError, OSError):  # io.StringIO: io.UnsupportedOperation (an OSError)
        return False
    return True


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


__all__ = ["NORMAL", "QUIET", "VERBOSE", "Environment", "current", "release", "use"]
