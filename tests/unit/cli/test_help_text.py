"""Help in plain words and usage errors as sentences: what a user reads when they get it wrong."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer

from cachedoctor.cli import app, run
from cachedoctor.cli.environment import Environment
from cachedoctor.cli.help import plain

#: What Typer and click write into help on their own: type names, ranges, braces.
INTERNALS = re.compile(
    r"<list\[|<str>|<int|<float|<bool|<path|range>|\bx[<>]=?\d|<[a-z_]+\|[a-z_|]+>|\{[A-Z_]+\}|\.\.\.\]\.\.\."
)


def cli(*argv: str, columns: int = 80) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(
        stdout=out, stderr=err, stdout_isatty=False, stderr_isatty=False, stdin_isatty=False, cwd="/", environ={}
    )
    env.columns = columns
    return run(list(argv), env), out.getvalue(), err.getvalue()


def commands(command: object = None, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command path of the CLI, hidden ones too (``()`` is ``cachedoctor`` itself)."""
    command = command if command is not None else plain(typer.main.get_command(app))
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from commands(sub, (*path, name))


ALL = list(commands())


def test_the_tree_is_what_the_app_registers() -> None:
    assert {p[0] for p in ALL if p} == {
        "scan", "repair", "recover", "merge", "explain", "manifest", "quarantine", "settings", "config"
    }  # fmt: skip
    assert ("quarantine", "restore") in ALL and ("settings", "show") in ALL


@pytest.mark.parametrize("path", ALL, ids=lambda p: " ".join(p) or "cachedoctor")
def test_help_shows_plain_words(path: tuple[str, ...]) -> None:
    code, out, err = cli(*path, "--help")
    assert (code, err) == (0, "")
    assert out.startswith(f"Usage: {' '.join(('cachedoctor', *path))} ")
    assert INTERNALS.search(out) is None, INTERNALS.search(out)
    assert max(len(line) for line in out.splitlines()) <= 80


@pytest.mark.parametrize("path", [p for p in ALL if p in ((), ("quarantine",), ("settings",), ("manifest",))])
def test_command_summaries_are_whole_sentences(path: tuple[str, ...]) -> None:
    _, out, _ = cli(*path, "--help")
    listed = out.split("\nCommands:\n", 1)[1]
    rows: dict[str, str] = {}
    for line in listed.splitlines():
        if re.match(r"  \S", line):
            name, _, text = line.strip().partition(" ")
            rows[name] = text.strip()
        elif line.strip():
            rows[name] += " " + line.strip()
    assert rows
    for name, text in rows.items():
        assert text.endswith(".") and not text.endswith("..."), (name, text)
        command = plain(typer.main.get_command(app))
        for part in (*path, name):
            command = command.commands[part]
        assert text == " ".join(command.help.split("\n\n")[0].split()), name


def test_the_scan_help_names_values_as_a_user_writes_them() -> None:
    _, out, _ = cli("scan", "--help", columns=100)
    assert "Usage: cachedoctor scan [OPTIONS] [PATH]...\n" in out
    assert "\n  PATH...  Cache folders or files to scan" in out
    for row in (
        "--format [table|json|jsonl|junit|github|html]",
        "-o, --output FILE",
        "-j, --workers N",
        "--fail-on [error|warning|never]",
        "--color [auto|always|never]",
        "--file-timeout SECONDS",
    ):
        assert f"\n  {row} " in out or f"\n  {row}\n" in out, row
    assert "[1 or more]" in out  # --workers' bound, in words


def test_help_wraps_to_a_narrow_terminal() -> None:
    _, out, _ = cli("repair", "--help", columns=60)
    assert max(len(line) for line in out.splitlines()) <= 60
    assert "--encoder SPEC" in out and "<list[str]>" not in out


def test_a_required_argument_reads_as_click_writes_it() -> None:
    _, out, _ = cli("quarantine", "restore", "--help")
    assert "Usage: cachedoctor quarantine restore [OPTIONS] RUN [PATH]...\n" in out


# --- usage errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["scan", "--format", "xml", "."],
            "--format: 'xml' is not a format; choose table, json, jsonl, junit, github or html (see `cachedoctor scan --help`)",
        ),
        (
            ["scan", "--layout", "sdxl", "."],
            "--layout: 'sdxl' is not a layout; choose auto, simpletuner, kohya, onetrainer, musubi, ai-toolkit, diffusion-pipe, manifest or none "
            "(see `cachedoctor scan --help`)",
        ),
        (
            ["repair", "--posterior", "mean", "."],
            "--posterior: 'mean' is not a choice; choose trainer, mode or sample (see `cachedoctor repair --help`)",
        ),
        (["scan", "--workers", "0", "."], "--workers: must be 1 or more, got 0 (see `cachedoctor scan --help`)"),
        (["scan", "-j", "0", "."], "--workers: must be 1 or more, got 0 (see `cachedoctor scan --help`)"),
        (
            ["repair", "--batch-size", "-3", "."],
            "--batch-size: must be 1 or more, got -3 (see `cachedoctor repair --help`)",
        ),
        (["scan", "-j", "two", "."], "--workers: 'two' is not a whole number (see `cachedoctor scan --help`)"),
        (["scan", "-j", "1.5", "."], "--workers: '1.5' is not a whole number (see `cachedoctor scan --help`)"),
        (
            ["scan", "--file-timeout", "soon", "."],
            "--file-timeout: 'soon' is not a number (see `cachedoctor scan --help`)",
        ),
        (
            ["scan", "--formt", "json", "."],
            "--formt: no such option; did you mean --format? (see `cachedoctor scan --help`)",
        ),
        (["scan", "--zzz", "."], "--zzz: no such option (see `cachedoctor scan --help`)"),
        (
            ["scan", "--format"],
            "--format: needs a value; choose table, json, jsonl, junit, github or html (see `cachedoctor scan --help`)",
        ),
        (["scan", "-j"], "--workers: needs a value (N) (see `cachedoctor scan --help`)"),
        (["scan", "--deep=yes", "."], "--deep: takes no value; it is on when given (see `cachedoctor scan --help`)"),
        (["quarantine", "restore"], "missing RUN (see `cachedoctor quarantine restore --help`)"),
        (
            ["explain", "batch-leak", "device-tagged"],
            "unexpected argument 'device-tagged' (see `cachedoctor explain --help`)",
        ),
        (["scna", "."], "'scna' is not a command; did you mean 'scan'? (see `cachedoctor --help`)"),
        (["quarantine", "lst"], "'lst' is not a command; did you mean 'list'? (see `cachedoctor quarantine --help`)"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else "",
)
def test_usage_errors_are_sentences(argv: list[str], message: str, tmp_path: Path) -> None:
    code, out, err = cli(*argv)
    assert (code, out) == (2, "")
    assert err == f"cachedoctor: error: {message}\n"
    for internal in ("Value error", "Input should", "Invalid value for", "Possible options", "Got unexpected"):
        assert internal not in err
