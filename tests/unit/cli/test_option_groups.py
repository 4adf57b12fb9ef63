"""Each run of options several commands share is declared once (``cli/option_groups.py``) and
taken whole, in its place, by every command that takes any of it; no option is declared twice."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import typer

from cachedoctor.cli import app
from cachedoctor.cli.help import plain
from cachedoctor.cli.option_groups import (
    GROUPS,
    DatasetOptions,
    DescriptionOptions,
    KohyaOptions,
    OptionGroup,
    ProgressOptions,
    RepairOutputOptions,
    S3Options,
    SelectionOptions,
    TerminalOptions,
    TrainerPathOptions,
    TrainingRunOptions,
    with_option_groups,
)

CLI = Path(__file__).resolve().parents[3] / "cachedoctor" / "cli"

QUARANTINE = {"quarantine list", "quarantine restore", "quarantine purge"}
SETTINGS = {"settings show", "config show"}
#: Which commands take each group (a command that takes part of a group is caught below).
TAKEN_BY: dict[type[OptionGroup], set[str]] = {
    DatasetOptions: {"scan", "repair", "recover", "manifest build", *SETTINGS},
    KohyaOptions: {"scan", "repair", "recover", *SETTINGS},
    DescriptionOptions: QUARANTINE,
    TrainerPathOptions: {"scan", "repair", "recover", "manifest build", *QUARANTINE},
    SelectionOptions: {"scan", "repair", "recover", *SETTINGS},
    TrainingRunOptions: {"scan", *SETTINGS},
    TerminalOptions: {"scan", "repair", "recover"},
    ProgressOptions: {"scan", "repair", "recover", *SETTINGS},
    S3Options: {"scan", "repair", "recover", "manifest build", *QUARANTINE, *SETTINGS},
    RepairOutputOptions: {"repair", "recover"},
}
#: Options a command takes on their own although a group holds them too (the rest of it does not apply).
ALONE = {
    "explain": {"--color"},  # explain says no more or less with -q or -v
    "scan": {"--manifest"},  # the quarantine commands' description group holds it with --config, --kohya-config
    "settings show": {"--manifest"},
    "config show": {"--manifest"},
}
#: Option strings that mean different things in different commands, each declared once per meaning.
DIFFERENT_MEANINGS = {
    "--output": 3,  # scan's report, manifest build's manifest, repair's JSON document
    "--format": 2,  # scan's report formats, repair's text or json
    "--workers": 2,  # scan's readers, repair's recompute workers
    "--batch-size": 2,  # the training run's, repair's encoder batch
    "--deep": 2,  # scan's opt-in, repair's default
    "--manifest": 2,  # scan's (which file types), repair's
    "--kohya-config": 2,  # the bucket checks', the quarantine search's
    "--encoder": 2,  # repair's, recover's (default: the interrupted repair's own)
    "--yes": 2,  # before changing anything, quarantine's "do not ask"
}


def _commands(command: Any = None, path: tuple[str, ...] = ()) -> dict[str, Any]:
    command = command if command is not None else plain(typer.main.get_command(app))
    found = {" ".join(path): command} if path and not getattr(command, "commands", None) else {}
    for name, sub in getattr(command, "commands", {}).items():
        found.update(_commands(sub, (*path, name)))
    return found


COMMANDS = _commands()


def _signature(param: Any) -> tuple[Any, ...]:
    """What a user sees of an option: its strings, help, default and metavar."""
    return (tuple(param.opts), tuple(param.secondary_opts), param.help, repr(param.default), param.metavar)


def _group_params(group: type[OptionGroup]) -> list[tuple[Any, ...]]:
    """The group's options as Typer builds them for a command that takes only the group."""

    def only(*, options: OptionGroup) -> None: ...

    only.__annotations__["options"] = group
    holder = typer.Typer(add_completion=False)
    holder.command()(with_option_groups(only))
    return [_signature(p) for p in typer.main.get_command(holder).params]


def test_every_group_is_listed() -> None:
    assert set(TAKEN_BY) == set(GROUPS)
    assert {c for taking in TAKEN_BY.values() for c in taking} <= set(COMMANDS)


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: g.__name__)
def test_a_command_takes_a_group_whole_in_one_place_or_not_at_all(group: type[OptionGroup]) -> None:
    expected = _group_params(group)
    elsewhere = {s for other in GROUPS if other is not group for s in _group_params(other)}
    taking = set()
    for name, command in COMMANDS.items():
        shown = [_signature(p) for p in command.params]
        start = shown.index(expected[0]) if expected[0] in shown else -1
        if start >= 0 and shown[start : start + len(expected)] == expected:
            taking.add(name)
            continue
        parts = {s[0][0] for s in expected if s in shown and s not in elsewhere}
        assert parts <= ALONE.get(name, set()), f"{name} takes part of {group.__name__}: {parts}"
    assert taking == TAKEN_BY[group]


def test_no_option_is_declared_twice() -> None:
    """Every ``typer.Option("--name", ...)`` in the CLI: one declaration per option string and help."""
    declared: dict[str, list[tuple[str, str | None]]] = defaultdict(list)
    for source in sorted(CLI.glob("*.py")):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "typer.Option" and node.args:
                first = node.args[0]
                assert isinstance(first, ast.Constant) and isinstance(first.value, str), ast.unparse(node)
                help_text = next((ast.unparse(k.value) for k in node.keywords if k.arg == "help"), None)
                declared[first.value].append((source.name, help_text))
    for option, places in declared.items():
        helps = [help_text for _, help_text in places]
        assert len(set(helps)) == len(helps), f"{option} is declared more than once: {places}"
    assert {o: len(p) for o, p in declared.items() if len(p) > 1} == DIFFERENT_MEANINGS


def test_a_group_reaches_the_command_as_parsed(tmp_path: Path) -> None:
    """The group object carries the values given, and the defaults for the rest."""
    seen: list[OptionGroup] = []

    @with_option_groups
    def probe(*, s3: S3Options, terminal: TerminalOptions) -> None:
        seen.extend((s3, terminal))

    holder = typer.Typer()
    holder.command()(probe)
    holder.command("other")(lambda: None)
    typer.main.get_command(holder).main(
        ["probe", "--s3-region", "eu-west-1", "-q"], standalone_mode=False, prog_name="probe"
    )
    assert seen == [
        S3Options(s3_region="eu-west-1"),
        TerminalOptions(quiet=True),
    ]


def test_a_group_cannot_shadow_a_parameter() -> None:
    def clash(*, color: str = "", terminal: TerminalOptions) -> None: ...

    with pytest.raises(TypeError, match="repeats a parameter name"):
        with_option_groups(clash)
