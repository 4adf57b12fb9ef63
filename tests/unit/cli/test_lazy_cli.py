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
