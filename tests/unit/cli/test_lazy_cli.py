"""The light commands import no reader, layout, check, scan module, SQLite, numpy or torch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

_CODE = """
import io, json, sys
import cachedoctor.cli
from cachedoctor.cli.environment import Environment
env = Environment(stdout=io.StringIO(), stderr=io.StringIO(), cwd={cwd!r}, environ={{}})
code = cachedoctor.cli.run({argv!r}, env)
mods = sorted(m for m in sys.modules if m.startswith("cachedoctor") or m in ("sqlite3", "numpy", "torch"))
print(json.dumps([code, mods]))
"""


def _heavy(module: str, checks_allowed: bool = False) -> bool:
    """``explain`` (and severity names in the settings) need the checks' own texts: the checks may be
    imported there, never what they judge (readers, layouts)."""
    checks = () if checks_allowed else ("cachedoctor.checks",)
    return module.startswith(
        ("cachedoctor.formats", "cachedoctor.scan", "cachedoctor.layouts.", *checks)
    ) or module in ("cachedoctor.layouts", "sqlite3", "numpy", "torch")


@pytest.mark.parametrize(
    "argv",
    [
        ["--version"],
        ["explain"],
        ["explain", "batch-leak"],
        ["quarantine", "list", "."],
        ["settings", "show"],
        ["config", "show"],
    ],
    ids=" ".join,
)
def test_light_commands_import_nothing_heavy(argv: list[str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = subprocess.run(
        [sys.executable, "-c", _CODE.format(cwd=str(tmp_path), argv=argv)],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    code, modules = json.loads(out.stdout)
    assert code == 0
    assert [m for m in modules if _heavy(m, argv[0] == "explain")] == []


def test_settings_show_with_layout_and_severity_in_the_file_stays_light(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "cachedoctor.toml").write_text('layout = "kohya"\n[severity]\nbatch-leak = "warning"\n')
    out = subprocess.run(
        [sys.executable, "-c", _CODE.format(cwd=str(tmp_path), argv=["settings", "show"])],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    code, modules = json.loads(out.stdout)
    assert code == 0 and [m for m in modules if _heavy(m, checks_allowed=True)] == []


def test_layout_choices_are_the_layout_names() -> None:
    from cachedoctor.cli.options import LayoutChoice
    from cachedoctor.layouts import LayoutName

    assert [c.value for c in LayoutChoice] == [n.value for n in LayoutName]


def test_explain_catalogue_is_what_the_checks_say() -> None:
    from cachedoctor.checks import CHECKS
    from cachedoctor.explain import catalogue

    assert [(k.kind, k.summary) for k in catalogue()] == [(c.kind, c.summary) for c in CHECKS]


_VERSION = """
import contextlib, io, json, runpy, sys
sys.argv = ["cachedoctor", "--version"]
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        runpy.run_module("cachedoctor", run_name="__main__")
    except SystemExit as exc:
        code = exc.code
print(json.dumps([code, out.getvalue(), sorted(m for m in sys.modules if m.startswith("cachedoctor"))]))
"""


def test_version_imports_at_most_twelve_cachedoctor_modules(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``cachedoctor --version`` as the console script runs it, in a fresh interpreter: no command's
    module is imported (``cli/lazy.py``)."""
    from cachedoctor import __version__

    out = subprocess.run([sys.executable, "-c", _VERSION], capture_output=True, text=True, check=True, cwd=tmp_path)
    code, printed, modules = json.loads(out.stdout)
    assert (code, printed) == (0, f"cachedoctor {__version__}\n")
    assert len(modules) <= 12, modules
    assert not any(
        m.startswith(("cachedoctor.cli.scan", "cachedoctor.cli.repair", "cachedoctor.cli.options")) for m in modules
    )


def test_the_lazy_tree_is_the_tree_typer_builds_eagerly() -> None:
    """Every command built on first use has the help it had when ``app.command()`` and
    ``app.add_typer()`` registered it at import."""
    import importlib

    import typer

    from cachedoctor.cli.app import _Commands, _root, app
    from cachedoctor.cli.help import plain

    eager = typer.Typer(name="cachedoctor", add_completion=True, rich_markup_mode=None, pretty_exceptions_enable=False)
    eager.callback()(_root)
    for lazy in _Commands.lazy:
        target = getattr(importlib.import_module(lazy.module), lazy.attribute)
        if isinstance(target, typer.Typer):
            eager.add_typer(target, name=lazy.name, hidden=lazy.hidden)
        else:
            eager.command(hidden=lazy.hidden)(target)

    def helps(command, path=()):  # type: ignore[no-untyped-def]
        ctx = command.context_class(command, info_name=" ".join(("cachedoctor", *path)), terminal_width=80)
        yield path, command.hidden, command.get_help(ctx)
        for name in command.list_commands(ctx) if hasattr(command, "list_commands") else ():
            yield from helps(command.get_command(ctx, name), (*path, name))

    built = list(helps(plain(typer.main.get_command(app))))
    assert built == list(helps(plain(typer.main.get_command(eager))))
    assert len(built) == 16  # cachedoctor, its 9 commands and the 6 below manifest, quarantine, settings, config


_HELP = _VERSION.replace('"--version"', '"--help"')


def test_help_lists_every_command_and_imports_at_most_twelve_cachedoctor_modules(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``cachedoctor --help`` in a fresh interpreter lists each command from its summary in
    ``app.py`` (held equal to its docstring by the eager-tree test above), building none."""
    from cachedoctor.cli.app import _Commands

    out = subprocess.run([sys.executable, "-c", _HELP], capture_output=True, text=True, check=True, cwd=tmp_path)
    code, printed, modules = json.loads(out.stdout)
    assert code == 0 and len(modules) <= 12, modules
    listed = printed.split("Commands:\n", 1)[1]
    assert [line.split()[0] for line in listed.splitlines() if line[:3].strip()] == [
        c.name for c in _Commands.lazy if not c.hidden
    ]
    assert not any(
        m.startswith(("cachedoctor.cli.scan", "cachedoctor.cli.options", "cachedoctor.settings")) for m in modules
    )
