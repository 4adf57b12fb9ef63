"""``cli/coercion.py`` gives every parameter the value, or the error, Typer's own coercion gives.

Every parameter of every command (the root's, each sub-group's, each ``--help`` option) is fed
the same inputs through the fast runtime parameter a built command carries and through Typer's
own (``typer._coercion.build_runtime_param``, pydantic's adapter): valid values, defaults, None,
bad values, odd spellings (" 7", "007", "1_000", "1e3", "-0", "٣"), bytes, case variants of
every choice. The two must give the same value (type, ``==`` and ``repr``) or the same
exception (type, message, and the pydantic errors ``cli/usage.py`` reads off its cause).
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
import typer

HEALTHY = Path(__file__).resolve().parents[3] / "fixtures" / "caches" / "healthy" / "kohya"
typer_coercion = pytest.importorskip("typer._coercion", reason="an older typer coerces through click's types")

from cachedoctor.cli.app import app  # noqa: E402
from cachedoctor.cli.coercion import FastRuntimeParam, fast_coercion  # noqa: E402

_GENERIC: list[Any] = [
    None, "", "a", " a ", "7", " 7", "7 ", "\t7\n", "007", "0", "1", "-0", "-7", "+7", "1_000", "1e3", "7.0",
    "0x10", "٣", "1048576", "1048577", "131072", "131073", "0.5", "1.5", ".5", "5.", "-1.5", "1.5e3", "inf",
    "-inf", "nan", "NaN", "0.30000000000000004", "9" * 18, "9" * 19, "1" * 40, "x\udcff", "ß", "SS", "table\n",
    b"7", b"abc", b"\xff", bytearray(b"7"), 7, 0, -1, 2**70, True, False, 1.5, 7.0, -0.0, float("nan"),
    float("inf"), (), [], ("a", "b"), ["a"], ("a", 1), ("a", b"b"), ("7",), object(),
]  # fmt: skip


class _Other(Enum):
    TABLE = "table"


def _choice_inputs(annotation: Any) -> list[Any]:
    if not (isinstance(annotation, type) and issubclass(annotation, Enum)):
        return []
    out: list[Any] = [*annotation, _Other.TABLE, annotation]
    for member in annotation:
        text = str(member.value)
        out += [text, text.upper(), text.title(), text.swapcase(), f" {text}", text.encode(), member.name]
    return out


def _commands(command: Any, ctx: Any) -> list[tuple[Any, Any]]:
    """Every command of the tree, each with a context of its own (built as a run builds them)."""
    out = [(command, ctx)]
    for name in getattr(command, "commands", {}) or {}:
        sub = command.commands[name]  # a lazy group builds it here, fast coercion installed
        out += _commands(sub, sub.context_class(sub, info_name=name, parent=ctx))
    return out


def _outcome(runtime: Any, value: Any, param: Any, ctx: Any) -> tuple[Any, ...]:
    try:
        got = runtime.coerce(value, param=param, ctx=ctx)
    except Exception as exc:  # what a user sees: the exception, its message, pydantic's facts
        errors = getattr(exc.__cause__, "errors", None)
        facts = [(e["type"], repr(e["input"]), e["msg"]) for e in errors()] if callable(errors) else None
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        return ("raised", type(exc), message, type(exc.__cause__), facts)
    return ("value", type(got), repr(got), [type(v) for v in got] if isinstance(got, (list, tuple)) else None)


def _tree() -> list[tuple[Any, Any, Any]]:
    """(command, context, parameter) for every parameter of every command, ``--help`` options included."""
    root = fast_coercion(typer.main.get_command(app))
    out = []
    for command, ctx in _commands(root, root.context_class(root, info_name="cachedoctor")):
        params = list(command.params)
        help_option = command.get_help_option(ctx)
        if help_option is not None:
            params.append(help_option)
        out += [(command, ctx, p) for p in params]
    return out


def test_every_parameter_of_every_command_has_the_fast_runtime_parameter() -> None:
    kinds: dict[str, int] = {}
    tree = _tree()
    for _command, _ctx, param in tree:
        assert isinstance(param._runtime_param, FastRuntimeParam), (param.name, param.type_descriptor.annotation)
        kind = repr(param.type_descriptor.annotation)
        kinds[kind] = kinds.get(kind, 0) + 1
    # str, bool, int, float, list[str] and the choices: every kind the commands have
    assert {"<class 'str'>", "<class 'bool'>", "<class 'int'>", "<class 'float'>", "list[str]"} <= set(kinds)
    assert sum(n for k, n in kinds.items() if k.startswith("<enum")) >= 6
    assert len(tree) > 200


def test_the_fast_runtime_parameter_gives_what_typer_gives_for_every_input() -> None:
    compared = fast_answers = 0
    for _command, ctx, param in _tree():
        fast = param._runtime_param
        own = typer_coercion.build_runtime_param(param.type_descriptor)
        for value in [*_GENERIC, *_choice_inputs(param.type_descriptor.annotation), param.default]:
            expected = _outcome(own, value, param, ctx)
            assert _outcome(fast, value, param, ctx) == expected, (param.name, value)
            compared += 1
            fast_answers += "typer_param" not in vars(fast)  # answered without Typer's adapter so far
    assert compared > 15_000 and fast_answers > 1_000


@pytest.mark.parametrize("annotation", [int, float])
def test_plain_numbers_give_what_pydantic_gives(annotation: type) -> None:
    """Random ASCII digit strings of every length the fast path takes, and just past it."""
    param = next(
        p
        for _, _, p in _tree()
        if p.type_descriptor.annotation is annotation and p.type_descriptor.parameter_info.min is None
    )
    ctx = typer.Context(typer.main.get_command(app))
    own = typer_coercion.build_runtime_param(param.type_descriptor)
    rng = random.Random(31)
    for _ in range(2000):
        whole = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 19)))
        fraction = "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 18)))
        for value in (whole, f"{whole}.{fraction}" if fraction else whole):
            assert _outcome(param._runtime_param, value, param, ctx) == _outcome(own, value, param, ctx), value


def test_a_runtime_parameter_typer_built_already_is_left_as_it_is() -> None:
    command: Any = typer.main.get_command(app).commands["scan"]
    param = next(p for p in command.params if p.name == "workers")
    param._runtime_param = None
    built = param.get_runtime_param()  # Typer's own
    fast_coercion(command)
    assert param._runtime_param is built and not isinstance(built, FastRuntimeParam)


_MODULES = """
import io, json, sys
import cachedoctor.cli
from cachedoctor.cli.environment import Environment
env = Environment(stdout=io.StringIO(), stderr=io.StringIO(), cwd={cwd!r}, environ={{}})
code = cachedoctor.cli.run({argv!r}, env)
print(json.dumps([code, env.stdout.getvalue(), env.stderr.getvalue(), sorted(m for m in sys.modules if m.split(".")[0] == "pydantic")]))
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["--version"],
        ["scan", "{dir}", "--no-state", "-q", "-j1"],
        ["scan", "{dir}", "--no-state", "--format", "JSON", "--fail-on", "warning", "-j", "2", "--file-timeout", "30"],
        ["quarantine", "list", "{dir}"],
    ],
    ids=" ".join,
)
def test_commands_import_no_pydantic(argv: list[str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    shutil.copytree(HEALTHY, tmp_path / "cache")
    argv = [a.replace("{dir}", str(tmp_path / "cache")) for a in argv]
    out = subprocess.run(
        [sys.executable, "-c", _MODULES.format(cwd=str(tmp_path), argv=argv)],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    code, stdout, stderr, modules = json.loads(out.stdout)
    assert (code, modules) == (0, []), (stdout, stderr)


def test_a_bad_value_still_gets_the_sentence_of_typer_s_own_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The values the fast path does not answer go to Typer, pydantic and ``cli/usage.py`` as before."""
    from cli_run import cli

    for argv, line in [
        (["-j", "0"], "--workers: must be 1 or more, got 0"),
        (["-j", "1e3"], "--workers: '1e3' is not a whole number"),
        (["--format", "xml"], "--format: 'xml' is not a format; choose table, json, jsonl, junit, github or html"),
    ]:
        assert cli("scan", str(tmp_path), *argv) == (
            2,
            "",
            f"cachedoctor: error: {line} (see `cachedoctor scan --help`)\n",
        )
