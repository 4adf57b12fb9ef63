"""Shell completion is on: ``--show-completion`` and ``--install-completion`` (Typer's), and the
completions themselves come from the CLI's own commands and choices."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cachedoctor.cli import run
from cachedoctor.cli.environment import Environment


def complete(words: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[str]]:
    """What bash would offer after ``words`` (the shell sets these variables, then runs us)."""
    monkeypatch.setenv("_CACHEDOCTOR_COMPLETE", "complete_bash")
    monkeypatch.setenv("COMP_WORDS", words)
    monkeypatch.setenv("COMP_CWORD", str(len(words.split()) - (0 if words.endswith(" ") else 1)))
    out = io.StringIO()
    code = run([], Environment(stdout=out, stderr=io.StringIO(), stdout_isatty=False, stderr_isatty=False))
    return code, out.getvalue().split()


def test_commands_options_and_choices_complete(monkeypatch: pytest.MonkeyPatch) -> None:
    assert complete("cachedoctor sc", monkeypatch) == (0, ["scan"])
    assert complete("cachedoctor quarantine ", monkeypatch) == (0, ["list", "restore", "purge"])
    assert complete("cachedoctor scan --form", monkeypatch) == (0, ["--format"])
    assert complete("cachedoctor scan --format j", monkeypatch) == (0, ["json", "jsonl", "junit"])
    assert complete("cachedoctor scan --layout ko", monkeypatch) == (0, ["kohya"])


def test_finding_kinds_complete(monkeypatch: pytest.MonkeyPatch) -> None:
    assert complete("cachedoctor explain device", monkeypatch) == (0, ["device-tagged"])
    assert complete("cachedoctor repair --only non", monkeypatch) == (0, ["non-finite"])
    # --only takes a comma-separated list: the last name completes, the ones before stay
    assert complete("cachedoctor repair --only batch-leak,st", monkeypatch) == (0, ["batch-leak,stale-entry"])
    assert complete("cachedoctor scan --fail-on w", monkeypatch) == (0, ["warning"])  # a severity, not a kind


def test_the_kind_completer_offers_every_kind_with_its_summary() -> None:
    from cachedoctor.cli.completion import complete_kind
    from cachedoctor.explain import kinds

    offered = complete_kind("")
    assert [name for name, _ in offered] == sorted(kinds())
    assert all(help_text for _, help_text in offered)
    assert complete_kind("zzz") == []


@pytest.mark.slow
def test_kinds_complete_through_the_installed_command() -> None:
    """The real console script, as bash runs it: the variables set, the words on COMP_WORDS."""
    env = {
        **os.environ,
        "_CACHEDOCTOR_COMPLETE": "complete_bash",
        "COMP_WORDS": "cachedoctor explain unsafe",
        "COMP_CWORD": "2",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    done = subprocess.run([sys.executable, "-m", "cachedoctor"], capture_output=True, text=True, env=env, timeout=60)
    assert (done.returncode, done.stdout.split(), done.stderr) == (0, ["unsafe-pickle"], "")


@pytest.mark.slow
def test_show_and_install_completion_for_bash(tmp_path: Path) -> None:
    """Through a real bash (Typer finds the shell from the parent process), HOME in ``tmp_path``."""
    env = {**os.environ, "HOME": str(tmp_path)}
    # "; exit $?" keeps bash alive as the parent (a lone command would be exec'd in its place,
    # and the parent would be whatever ran the tests: a shell or not).
    command = f"{sys.executable} -m cachedoctor"
    shown = subprocess.run(
        ["bash", "-c", f"{command} --show-completion; exit $?"], capture_output=True, text=True, env=env
    )
    assert shown.returncode == 0 and shown.stderr == ""
    assert "_CACHEDOCTOR_COMPLETE=complete_bash" in shown.stdout and "complete -o default" in shown.stdout
    done = subprocess.run(
        ["bash", "-c", f"{command} --install-completion; exit $?"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    script = tmp_path / ".bash_completions" / "cachedoctor.sh"
    assert "_CACHEDOCTOR_COMPLETE=complete_bash" in script.read_text()
    assert f"source '{script}'" in (tmp_path / ".bashrc").read_text()
