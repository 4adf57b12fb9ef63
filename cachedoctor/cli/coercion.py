"""Option values turned into Python values without pydantic, where that is trivially Typer's answer.

Typer 0.2x coerces every parameter through a pydantic ``TypeAdapter`` that it builds the first time
the parameter is processed (``_TyperParameter.get_runtime_param``), so every command used to import
pydantic (some 100 ms) and build a dozen adapters for values that were already what they had to be:
a ``str`` for a ``str`` option, ``"4"`` for ``--workers``, the default ``OutputFormat.TABLE``.
:func:`fast_coercion` gives each parameter of a built command a runtime parameter
(:class:`FastRuntimeParam`) that answers those cases itself, with what Typer's would return, and
hands EVERY other value (a bad one, ``" 7"``, ``"1_000"``, bytes, a number out of range) to Typer's
own runtime parameter, built on first need, so that values and error messages (and the pydantic
error a usage sentence reads, ``cli/usage.py``) stay Typer's, byte for byte. A test holds the two
equal on every parameter of every command (``tests/unit/cli/test_fast_coercion.py``).

Older Typers coerce through click's types and never import pydantic: there, nothing is installed.
"""

from __future__ import annotations

import re
from enum import Enum
from functools import cached_property
from typing import Any, get_args, get_origin

try:  # Typer >= 0.2x: coercion through pydantic, behind a runtime parameter per parameter
    from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
    from typer.core import _TyperParameter
except ImportError:  # pragma: no cover - depends on the installed typer
    RuntimeParam = None  # type: ignore[assignment,misc]

#: What no fast path answers: the value goes to Typer's own runtime parameter.
_MISS: Any = object()
#: The plain numbers any parser reads alike: ASCII digits (``str.isdigit`` also takes "٣", which
#: pydantic refuses), no sign, space, underscore or exponent, and short enough to stay exact.
_DIGITS = re.compile(r"[0-9]{1,18}")
_DECIMAL = re.compile(r"[0-9]{1,17}(?:\.[0-9]{1,17})?")


def _str(value: Any, descriptor: Any, ctx: Any) -> Any:
    return value if type(value) is str else _MISS


def _bool(value: Any, descriptor: Any, ctx: Any) -> Any:
    return value if type(value) is bool else _MISS


def _in_range(number: Any, descriptor: Any) -> Any:
    """``number`` when it is within the parameter's bounds (pydantic's ``ge``/``le``); a clamped
    parameter, or a number out of bounds, is Typer's to answer."""
    info = descriptor.parameter_info
    if info.clamp and (info.min is not None or info.max is not None):
        return _MISS
    if (info.min is not None and not number >= info.min) or (info.max is not None and not number <= info.max):
        return _MISS
    return number


def _int(value: Any, descriptor: Any, ctx: Any) -> Any:
    if type(value) is int:
        return _in_range(value, descriptor)
    if type(value) is str and _DIGITS.fullmatch(value):
        return _in_range(int(value), descriptor)
    return _MISS


def _float(value: Any, descriptor: Any, ctx: Any) -> Any:
    if type(value) is float:
        return _in_range(value, descriptor)
    if type(value) is str and _DECIMAL.fullmatch(value):
        return _in_range(float(value), descriptor)
    return _MISS


def _choice(value: Any, descriptor: Any, ctx: Any) -> Any:
    """Typer's ``coerce_cli_choice`` for a member, or for a string that names one (compared as it
    compares them: the value's text, casefolded unless case-sensitive; the first match wins)."""
    choices = tuple(descriptor.annotation)
    if any(value is choice for choice in choices):
        return value
    if type(value) is not str or getattr(ctx, "token_normalize_func", None) is not None:
        return _MISS
    sensitive = descriptor.parameter_info.case_sensitive
    wanted = value if sensitive else value.casefold()
    for choice in choices:
        text = str(choice.value)
        if (text if sensitive else text.casefold()) == wanted:
            return choice
    return _MISS


def _str_list(value: Any, descriptor: Any, ctx: Any) -> Any:
    if type(value) in (list, tuple) and all(type(item) is str for item in value):
        return list(value)
    return _MISS


def _fast_path(descriptor: Any) -> Any:
    """The fast path of a parameter of this type, or None (Typer's runtime parameter does it all)."""
    info = descriptor.parameter_info
    if info.parser is not None or descriptor.file_annotation is not None:
        return None
    annotation = descriptor.annotation
    if annotation in (str, bool, int, float):
        return {str: _str, bool: _bool, int: _int, float: _float}[annotation]
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return _choice
    if get_origin(annotation) is list and get_args(annotation) == (str,):
        return _str_list
    return None


if RuntimeParam is not None:

    class FastRuntimeParam(RuntimeParam):
        """Typer's runtime parameter (its ``coerce``: None, a missing list), with the fast path
        in front of its ``_coerce_value`` and Typer's own ``_coerce_value`` behind it."""

        def __init__(self, descriptor: TypeDescriptor, fast: Any) -> None:
            super().__init__(parameter_info=descriptor.parameter_info, annotation=descriptor.annotation)
            self.__dict__["descriptor"] = descriptor  # (a frozen dataclass: no plain assignment)
            self.__dict__["fast"] = fast

        @cached_property
        def typer_param(self) -> Any:
            """Typer's own runtime parameter (pydantic's adapter), built on first need."""
            return build_runtime_param(self.__dict__["descriptor"])

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            done = self.__dict__["fast"](value, self.__dict__["descriptor"], ctx)
            if done is _MISS:
                return self.typer_param._coerce_value(value, param=param, ctx=ctx)
            return done


def fast_coercion(command: Any) -> Any:
    """``command`` (and every command below it) with a :class:`FastRuntimeParam` on each parameter
    whose type has a fast path and whose Typer runtime parameter is not built yet, its ``--help``
    option included (click makes that one when it first parses the command); returns it."""
    if RuntimeParam is None:  # pragma: no cover - an older typer: click's types, no pydantic
        return command
    for param in getattr(command, "params", ()):
        _install(param)
    if callable(getattr(command, "get_help_option", None)) and "get_help_option" not in vars(command):
        command.get_help_option = _HelpOption(command.get_help_option)
    commands = getattr(command, "commands", {})
    for sub in getattr(commands, "built", commands).values():  # a lazy group's others: when built
        fast_coercion(sub)
    return command


def _install(param: Any) -> None:
    if isinstance(param, _TyperParameter) and getattr(param, "_runtime_param", _MISS) is None:
        fast = _fast_path(param.type_descriptor)
        if fast is not None:
            param._runtime_param = FastRuntimeParam(param.type_descriptor, fast)


class _HelpOption:
    """A command's ``get_help_option``, whose option gets a fast runtime parameter too."""

    def __init__(self, make: Any) -> None:
        self.make = make

    def __call__(self, ctx: Any) -> Any:
        option = self.make(ctx)
        if option is not None:
            _install(option)
        return option


__all__ = ["FastRuntimeParam", "fast_coercion"]
