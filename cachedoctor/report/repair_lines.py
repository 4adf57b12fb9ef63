"""How ``repair`` and ``recover`` put a line on the terminal: wrapped to its width, paths shown
as ``scan``'s table shows them, long file lists cut at a few unless ``-v``.

Every line goes through :meth:`Lines.say`, which wraps at word boundaries (``Environment.wrap``)
and never inside a path: :func:`whole` marks a path (or any text) that must stay on one line,
even when it holds spaces. A shell command is printed whole on a line of its own
(:meth:`Lines.command`), so it can be copied and pasted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cachedoctor.report.text import shown_path

if TYPE_CHECKING:  # type-only: printing must not import the CLI's machinery
    from cachedoctor.cli.environment import Environment

#: Files named per group of a plan or of what is left, unless ``-v``.
LIMIT = 5
#: Stands for a space that must not become a line break while a line is wrapped.
_KEEP = "\x00"


def whole(text: str) -> str:
    """``text`` (a path, a quoted phrase) as one unbreakable word of a wrapped line."""
    return text.replace(" ", _KEEP)


@dataclass
class Lines:
    """The terminal side of one ``repair`` or ``recover``: ``env`` gives the stream (stdout),
    the width, the verbosity (``-q``: counts only; ``-v``: every file) and the cwd."""

    env: Environment

    def say(self, text: str = "", indent: str | None = None) -> None:
        """``text`` wrapped; each of its own lines (a layout line per subtree) on its own."""
        for line in text.split("\n"):
            wrapped = self.env.wrap(line, indent) if line else line
            print(wrapped.replace(_KEEP, " "), file=self.env.stdout)

    def command(self, label: str, command: str) -> None:
        """``label command`` on one line if it fits, else ``label`` and the command below it,
        whole (a shell command broken over lines would run as two)."""
        if len(label) + 1 + len(command) <= self.env.width:
            print(f"{label} {command}", file=self.env.stdout)
        else:
            print(label, file=self.env.stdout)
            print(f"  {command}", file=self.env.stdout)

    @property
    def quiet(self) -> bool:
        from cachedoctor.cli.environment import QUIET

        return self.env.verbosity <= QUIET

    @property
    def verbose(self) -> bool:
        from cachedoctor.cli.environment import VERBOSE

        return self.env.verbosity >= VERBOSE

    def files(self, entries: Sequence[str], indent: str, *, findings: bool = False) -> None:
        """One line per entry (already worded, paths made :func:`whole`), at most :data:`LIMIT`
        unless ``-v``; none with ``-q`` unless they are ``findings`` (what is wrong, what is left:
        ``-q`` keeps "the findings and errors", as its help says)."""
        if self.quiet and not findings:
            return
        shown = entries if self.verbose else entries[:LIMIT]
        for entry in shown:
            self.say(f"{indent}{entry}")
        if len(entries) > len(shown):
            self.say(f"{indent}... and {len(entries) - len(shown)} more (-v lists all)")

    def rel(self, path: str) -> str:
        """``path`` relative to the cwd, unless that climbs out of it (then absolute), kept whole."""
        return whole(shown_path(path, self.env.cwd))


__all__ = ["LIMIT", "Lines", "whole"]
