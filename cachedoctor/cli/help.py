"""``--help`` in plain words: metavars a user would write, full command summaries, the width.

Typer writes its own type names into help (``PATH... <list[str]>``, ``--format
<table|json|...>``, ``[x>=1]``, a required ``{RUN}``) and click cuts each command's summary in
``cachedoctor --help`` after a few words ("Find broken, leaked, device-tagged,..."). Rather
than patch Typer, :func:`plain_help` gives every command of the tree a context whose help
formatter writes the same rows in plain words, and a ``short_help`` that is its whole first
sentence; the help's width is the terminal's (:attr:`Environment.width`, at most 80 columns).
Only the help text changes: what the options accept and how they parse stays Typer's.
"""

from __future__ import annotations

import re
from typing import Any

import typer

from cachedoctor.cli import environment

_HelpFormatter: Any = typer.Context.formatter_class  # the click (or Typer's vendored click) formatter

_TYPE = re.compile(r" <([^<>]*)>")  # Typer's " <list[str]>", " <int range>", " <a|b|c>"
_RANGE = (
    (re.compile(r"\b(-?[\d.]+)<=x<=(-?[\d.]+)\b"), r"\1 to \2"),
    (re.compile(r"\bx>=(-?[\d.]+)\b"), r"\1 or more"),
    (re.compile(r"\bx<=(-?[\d.]+)\b"), r"at most \1"),
    (re.compile(r"\bx>(-?[\d.]+)\b"), r"more than \1"),
    (re.compile(r"\bx<(-?[\d.]+)\b"), r"less than \1"),
)
#: The widest help: click's own cap, so that a wide terminal still gets readable lines.
MAX_WIDTH = 80


def plain_term(term: str) -> str:
    """A help row's left column in plain words: ``PATH... <list[str]>`` -> ``PATH...``,
    ``--format <table|json>`` -> ``--format [table|json]``, ``--device <str>`` -> ``--device DEVICE``."""

    def plain(match: re.Match[str]) -> str:
        label = match.group(1)
        if "|" in label:  # a choice: click's own way of writing one
            return f" [{label.removeprefix('list[').removesuffix(']')}]"
        name = term[: match.start()].split()[-1]
        if name.startswith("-"):  # an option without a metavar: its own name, as click writes one
            return " " + name.lstrip("-").replace("-", "_").upper()
        return ""  # an argument: its metavar says it already

    return _TYPE.sub(plain, term)


def plain_help(text: str) -> str:
    """A help row's right column in plain words: ``[x>=1]`` -> ``[1 or more]``."""
    for pattern, words in _RANGE:
        text = pattern.sub(words, text)
    return text


def plain_usage(args: str) -> str:
    """The usage line's arguments as click writes them: ``[PATH...]...`` -> ``[PATH]...``, ``{RUN}`` -> ``RUN``."""
    args = re.sub(r"\[([\w-]+)\.\.\.\]\.\.\.", r"[\1]...", args)
    args = re.sub(r"\{([\w-]+)\.\.\.\}\.\.\.", r"\1...", args)
    return re.sub(r"\{([\w-]+)\}", r"\1", args)


class PlainFormatter(_HelpFormatter):
    """The help formatter of every cachedoctor command (see the module's docstring)."""

    def write_usage(self, prog: str, args: str = "", prefix: str | None = None) -> None:
        super().write_usage(prog, plain_usage(args), prefix)

    def write_dl(self, rows: Any, *args: Any, **kwargs: Any) -> None:
        super().write_dl([(plain_term(term), plain_help(text)) for term, text in rows], *args, **kwargs)


class PlainContext(typer.Context):
    """A context whose help is written by :class:`PlainFormatter` at the environment's width."""

    formatter_class = PlainFormatter

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("terminal_width") is None and kwargs.get("parent") is None:  # a sub-command's inherits it
            try:
                width = min(environment.current().width, MAX_WIDTH)
            except LookupError:  # the app used without run() (a test, a docs tool)
                width = MAX_WIDTH
            kwargs["terminal_width"] = kwargs["max_content_width"] = width
        super().__init__(*args, **kwargs)


def summary(help_text: str | None) -> str:
    """A command's line in its group's list: the first paragraph of its help, whole."""
    return " ".join((help_text or "").strip().split("\n\n")[0].split())


def plain(command: Any) -> Any:
    """``command`` and every command below it with plain help (see the module's docstring); the
    commands of a lazy group (``cli/lazy.py``) not built yet get it when they are built."""
    command.context_class = PlainContext
    if not getattr(command, "short_help", None):
        command.short_help = summary(getattr(command, "help", None))
    commands = getattr(command, "commands", {})
    for sub in getattr(commands, "built", commands).values():  # a lazy group's others: when built
        plain(sub)
    return command


__all__ = ["MAX_WIDTH", "PlainContext", "PlainFormatter", "plain", "plain_help", "plain_term", "plain_usage", "summary"]
