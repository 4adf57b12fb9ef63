"""Option-parsing errors as sentences for people, not the parsing library's own words.

click and Typer (through pydantic) say "Invalid value for '--workers' / '-j': Input should be
greater than or equal to 1" or "Value error, 'xml' is not one of ...". :func:`sentence` says
the same thing as ``--workers: must be 1 or more, got 0`` and ``--format: 'xml' is not a
format; choose table, json, jsonl, junit, github or html``, and names the help to read. It reads the
facts off the exception (its parameter, its choices and bounds, the value given) rather than
rewording messages, so a new Typer wording does not undo it; messages are parsed only as the
fallback for what an older click keeps nowhere else.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import Any

#: What a value of each choice option is called (``'xml' is not a format``).
NOUNS = {"--format": "a format", "--layout": "a layout", "--color": "a colour setting"}


def sentence(exc: Any, argv: Sequence[str], root: Any) -> str:
    """One line for a click usage error ``exc`` raised while parsing ``argv`` for ``root``."""
    ctx = getattr(exc, "ctx", None)
    command = ctx.command if ctx is not None else _command_of(root, argv)
    where = ctx.command_path if ctx is not None else _path_of(root, argv)
    kind = type(exc).__name__
    message = exc.format_message()
    if kind == "NoSuchOption":
        text = f"{exc.option_name}: no such option"
        close = list(getattr(exc, "possibilities", None) or ()) or _close(exc.option_name, _options(command))
        if close:
            text += f"; did you mean {_or(sorted(close))}?"
    elif kind == "BadOptionUsage" and "does not take a value" in message:
        text = f"{exc.option_name}: takes no value; it is on when given"
    elif kind == "BadOptionUsage" and "requires" in message:
        param = _param(command, exc.option_name)
        choices = _choices(param)
        name = _name(param) if param is not None else exc.option_name
        if choices:
            text = f"{name}: needs a value; choose {_or(choices)}"
        else:
            text = f"{name}: needs a value" + (f" ({param.metavar})" if param is not None and param.metavar else "")
    elif kind == "MissingParameter":
        param = getattr(exc, "param", None)
        name = _name(param) if param is not None else "an argument"
        text = f"{name} is missing" if name.startswith("-") else f"missing {name}"
    elif kind == "BadParameter":
        text = _bad_value(exc, message)
    elif match := re.match(r"No such command '(.+?)'", message):
        text = f"'{match.group(1)}' is not a command"
        names = list(getattr(command, "commands", {}) or {})
        close = _close(match.group(1), [n for n in names if not command.commands[n].hidden])
        if close:
            text += f"; did you mean {_or([repr(c) for c in close])}?"
    elif match := re.match(r"Got unexpected extra argument(?:s|\(s\))? \((.*)\)", message):
        extra = match.group(1).split()
        text = f"unexpected {'argument' if len(extra) == 1 else 'arguments'} {', '.join(repr(a) for a in extra)}"
    else:
        text = message.replace("Value error, ", "").rstrip(".")
    return f"{text} (see `{where} --help`)"


def _bad_value(exc: Any, message: str) -> str:
    """A value the option does not accept: not a choice, out of range, not a number."""
    param = exc.param
    name = _name(param)
    value, problem = _given(exc, message)
    shown = f"'{value}'" if value is not None else "the value"
    choices = _choices(param)
    low, high = _bounds(param)
    if choices:
        noun = NOUNS.get(name, "a choice")
        return f"{name}: {shown} is not {noun}; choose {_or(choices)}"
    if problem in ("int_parsing", "int_from_float", "int_type") or "valid integer" in message:
        return f"{name}: {shown} is not a whole number"
    if problem in ("float_parsing", "float_type") or "valid float" in message or "valid number" in message:
        return f"{name}: {shown} is not a number"
    if low is not None or high is not None:
        if low is not None and high is not None:
            rule = f"must be between {low} and {high}"
        elif low is not None:
            rule = f"must be {low} or more"
        else:
            rule = f"must be {high} or less"
        return f"{name}: {rule}, got {value}"
    detail = re.sub(r"^Invalid value for [^:]*: ", "", message).replace("Value error, ", "").rstrip(".")
    return f"{name}: {detail}"


def _given(exc: Any, message: str) -> tuple[str | None, str | None]:
    """The value as typed and pydantic's error type (Typer keeps both on the cause); the
    value out of click's own message otherwise."""
    cause = exc.__cause__
    errors = getattr(cause, "errors", None)
    if callable(errors):
        first = (errors() or [{}])[0]
        value = first.get("input")
        return (None if value is None else str(value)), first.get("type")
    match = re.search(r": '?(.*?)'? is not (?:one of|a valid|in the range)", message)
    return (match.group(1) if match else None), None


def _choices(param: Any) -> list[str]:
    descriptor = getattr(param, "type_descriptor", None)  # Typer >= 0.2x
    choices = getattr(descriptor, "choices", None) if descriptor is not None else None
    if choices is None:
        choices = getattr(getattr(param, "type", None), "choices", None)  # click's Choice
    if descriptor is not None and not getattr(descriptor, "is_choice", True):
        choices = None
    return [str(getattr(c, "value", c)) for c in choices or ()]


def _bounds(param: Any) -> tuple[Any, Any]:
    low, high = getattr(param, "min", None), getattr(param, "max", None)
    if low is None and high is None:  # click's IntRange / FloatRange
        kind = getattr(param, "type", None)
        low, high = getattr(kind, "min", None), getattr(kind, "max", None)
    return low, high


def _name(param: Any) -> str:
    """``--workers`` for an option (its long name), ``RUN`` for an argument."""
    opts = [o for o in getattr(param, "opts", ()) if o.startswith("-")]
    if opts:
        return max(opts, key=len)
    return str(param.metavar or param.name.upper())


def _param(command: Any, option: str) -> Any:
    for param in getattr(command, "params", ()):
        if option in getattr(param, "opts", ()) or option in getattr(param, "secondary_opts", ()):
            return param
    return None


def _options(command: Any) -> list[str]:
    return [o for p in getattr(command, "params", ()) for o in (*p.opts, *getattr(p, "secondary_opts", ()))]


def _close(word: str, known: list[str]) -> list[str]:
    return difflib.get_close_matches(word, known, n=2, cutoff=0.6)


def _or(words: Sequence[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    words = list(words)
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def _walk(root: Any, argv: Sequence[str]) -> list[tuple[str, Any]]:
    """The commands ``argv`` names, from the root down (for errors raised without a context)."""
    chain = [("cachedoctor", root)]
    for arg in argv:
        commands = getattr(chain[-1][1], "commands", None)
        if arg.startswith("-") or not commands or arg not in commands:
            if not arg.startswith("-"):
                break
            continue
        chain.append((arg, commands[arg]))
    return chain


def _command_of(root: Any, argv: Sequence[str]) -> Any:
    return _walk(root, argv)[-1][1]


def _path_of(root: Any, argv: Sequence[str]) -> str:
    return " ".join(name for name, _ in _walk(root, argv))


__all__ = ["NOUNS", "sentence"]
