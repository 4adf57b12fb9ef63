"""Commands built when they are first named, so ``cachedoctor --version`` imports none of them.

Typer builds a click command from its function's signature, so building one means importing its
module, and with it the option groups, the settings and the report enums it names. Building all
of them up front made ``--version`` import 35 cachedoctor modules. Here the root group knows
each command only by name and module (:class:`LazyCommand`) and builds it on first use, exactly
as ``app.command()`` / ``app.add_typer()`` would have (same Typer calls, same help settings), so
``--help``, usage errors and shell completion see the same tree: they name every command, so
they build every command.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, ClassVar

import typer
from typer.core import TyperGroup

from cachedoctor.cli.coercion import fast_coercion
from cachedoctor.cli.help import plain


@dataclass(frozen=True)
class LazyCommand:
    """A command of the root group: its name, and where its function or Typer sub-app lives."""

    name: str
    module: str
    attribute: str
    hidden: bool = False
    #: the command's one-line help, as its docstring (or Typer app's help) starts: what
    #: ``cachedoctor --help`` lists without building the command (a test holds the two equal)
    summary: str = ""

    def build(self) -> Any:
        """The click command, as Typer builds it for a command registered on the root app."""
        target = getattr(importlib.import_module(self.module), self.attribute)
        holder = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False)
        if isinstance(target, typer.Typer):
            holder.add_typer(target, name=self.name, hidden=self.hidden)
        else:
            holder.command(self.name, hidden=self.hidden)(target)
        return typer.main.get_group(holder).commands[self.name]


class LazyCommands(MutableMapping[str, Any]):
    """A group's ``commands``: every name is listed, a command is built (with plain help, and
    its values coerced without pydantic where Typer's answer is trivial: ``cli/coercion.py``) when read.

    :attr:`built` holds the ones built so far; :func:`cachedoctor.cli.help.plain` walks only those.
    """

    def __init__(self, lazy: tuple[LazyCommand, ...], built: Mapping[str, Any]) -> None:
        self._lazy = {command.name: command for command in lazy}
        self.built = dict(built)

    def __getitem__(self, name: str) -> Any:
        if name not in self.built:
            self.built[name] = fast_coercion(plain(self._lazy[name].build()))  # KeyError: no such command
        return self.built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self.built[name] = command

    def __delitem__(self, name: str) -> None:
        if self._lazy.pop(name, None) is None and name not in self.built:
            raise KeyError(name)
        self.built.pop(name, None)

    def __contains__(self, name: object) -> bool:  # without building it
        return name in self._lazy or name in self.built

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*self._lazy, *self.built]))

    def __len__(self) -> int:
        return len(dict.fromkeys([*self._lazy, *self.built]))


class LazyGroup(TyperGroup):
    """A Typer group whose :attr:`lazy` commands are built on first use (subclass it to name them)."""

    lazy: ClassVar[tuple[LazyCommand, ...]] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands: MutableMapping[str, Any] = LazyCommands(self.lazy, self.commands)

    def list_commands(self, ctx: Any) -> list[str]:
        """The names in registration order, as Typer lists them, without building a command."""
        return list(self.commands)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The group's command list as click writes it, from each unbuilt command's
        :attr:`LazyCommand.summary` (whole, as ``help.plain`` makes every command's short help):
        ``cachedoctor --help`` builds no command (building one imports its module, its options
        and what they name)."""
        lazy = {c.name: c for c in self.lazy}
        built = self.commands.built if isinstance(self.commands, LazyCommands) else {}
        rows: list[tuple[str, Any]] = []  # (name, its summary, or the built command)
        for name in self.list_commands(ctx):
            known = lazy.get(name)
            if known is not None and (known.summary or known.hidden) and name not in built:
                if not known.hidden:
                    rows.append((name, known.summary))
                continue
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command))
        if not rows:
            return
        limit = formatter.width - 6 - max(len(name) for name, _ in rows)
        lines = [
            (name, it if isinstance(it, str) else it.get_short_help_str(limit)) for name, it in rows
        ]  # whole, as plain()
        with formatter.section("Commands"):
            formatter.write_dl(lines)


__all__ = ["LazyCommand", "LazyCommands", "LazyGroup"]
