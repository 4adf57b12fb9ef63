"""One settings path: repair and recover scan what scan scans (exclude, state, workers)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch
from factories import peers, save_pt

from cachedoctor.cli import run
from cachedoctor.cli.environment import Environment
from cachedoctor.exit_status import ExitStatus


def cli(*argv: str, cwd: Path, environ: dict[str, str] | None = None, stdin: str | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(
        stdout=out,
        stderr=err,
        stdout_isatty=False,
        stderr_isatty=False,
        stdin_isatty=stdin is not None,
        stdin=io.StringIO(stdin or ""),
        cwd=str(cwd),
        environ=environ or {},
    )
    return run(list(argv), env), out.getvalue(), err.getvalue()


def _leak(path: Path) -> Path:
    """A latent saved as a view of a bigger batch (batch-leak, fixed by clone-storage)."""
    batch = torch.randn(7, 4, 8, 8).to(torch.bfloat16)
    return save_pt(path, batch[5])


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # relative PATHs are taken from the process's folder, as in a shell


@pytest.fixture
def excluded(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text('[tool.cachedoctor]\nexclude = ["scratch/*", "scratch"]\n')
    peers(tmp_path / "cache")
    _leak(tmp_path / "cache" / "scratch" / "leak.pt")
    return tmp_path


def test_scan_leaves_an_excluded_leak_out(excluded: Path) -> None:
    code, out, err = cli("scan", "cache", cwd=excluded)
    assert (code, err) == (0, "") and "batch-leak" not in out


def test_repair_does_not_plan_on_what_scan_excludes(excluded: Path) -> None:
    code, out, err = cli("repair", "--dry-run", "cache", cwd=excluded)
    assert (code, err) == (0, ""), out
    assert "clone-storage" not in out and "nothing to repair" in out
    (excluded / "pyproject.toml").unlink()  # without the exclude, the same leak is planned on
    code, out, _ = cli("repair", "--dry-run", "cache", cwd=excluded)
    assert code == ExitStatus.FINDINGS and "clone-storage  1 file(s)" in out


def test_recover_does_not_survey_what_scan_excludes(excluded: Path) -> None:
    (excluded / "cache" / "scratch" / "tmpabcd1234").write_bytes(b"half a file")
    code, out, err = cli("recover", "cache", cwd=excluded)
    assert (code, err) == (0, ""), out
    (excluded / "pyproject.toml").unlink()
    assert cli("recover", "cache", cwd=excluded)[0] == ExitStatus.FINDINGS


def test_repair_and_recover_take_scans_selection_options_on_the_command_line(excluded: Path) -> None:
    """What the scan's hint says: repair on the same paths and options (--exclude, --state,
    --no-state) acts on what that scan reported."""
    (excluded / "pyproject.toml").unlink()
    code, out, _ = cli("repair", "--dry-run", "--no-state", "--exclude", "scratch", "cache", cwd=excluded)
    assert code == 0 and "nothing to repair" in out
    (excluded / "cache" / "scratch" / "tmpabcd1234").write_bytes(b"half a file")
    assert cli("recover", "--exclude", "scratch", "--no-state", "cache", cwd=excluded)[0] == 0
    state = excluded / "mystate.sqlite"
    code, _, err = cli("repair", "--dry-run", "--state", str(state), "cache", cwd=excluded)
    assert code == ExitStatus.FINDINGS and err == "" and not state.exists()  # a dry run creates no database
    assert cli("scan", "--state", str(state), "cache", cwd=excluded)[0] == ExitStatus.FINDINGS
    recorded = state.read_bytes()
    code, _, err = cli("repair", "--dry-run", "--state", str(state), "cache", cwd=excluded)
    assert code == ExitStatus.FINDINGS and err == "" and state.read_bytes() == recorded  # read, never written


def _captured(monkeypatch: pytest.MonkeyPatch) -> list:  # type: ignore[type-arg]
    import cachedoctor.repair.run as core

    seen: list = []  # type: ignore[type-arg]

    def fake(targets, layout, layout_options, options, argv, confirm, show_plan, progress=None):  # type: ignore[no-untyped-def]
        seen.append(options)
        raise core.Declined()

    monkeypatch.setattr(core, "repair", fake)
    return seen


def test_repair_workers_are_recompute_processes_and_the_setting_is_the_readers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    peers(tmp_path / "cache")
    seen = _captured(monkeypatch)
    code, out, _ = cli("repair", "cache", "--workers", "2", "--yes", cwd=tmp_path, environ={"CACHEDOCTOR_WORKERS": "3"})
    assert code == ExitStatus.FINDINGS and "nothing was changed" in out
    (options,) = seen
    assert (options.workers, options.scan.workers) == (2, 3)


def test_repair_scans_with_the_scan_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cachedoctor.options import scan_options
    from cachedoctor.settings import load

    (tmp_path / "cachedoctor.toml").write_text(
        'exclude = ["x*"]\nstate = "st.sqlite"\nfile-timeout = 4\nsample = "5%"\n'
    )
    peers(tmp_path / "cache")
    seen = _captured(monkeypatch)
    cli("repair", "cache", "--deep", "--yes", cwd=tmp_path)
    (options,) = seen
    expected = scan_options(load(str(tmp_path), {}), deep=True, sample=False, default_state=False)
    assert options.scan == expected
    assert (options.scan.exclude, options.scan.state, options.scan.file_timeout, options.scan.sample) == (
        ("x*",),
        str(tmp_path / "st.sqlite"),
        4.0,
        None,
    )


def test_repair_asks_on_a_terminal_and_reads_the_answer_from_stdin(tmp_path: Path) -> None:
    peers(tmp_path)
    _leak(tmp_path / "leak.pt")
    code, out, _ = cli("repair", str(tmp_path), cwd=tmp_path, stdin="n\n")
    assert code == ExitStatus.FINDINGS and "Go ahead? [y/N] nothing was changed" in out
    code, out, _ = cli("repair", str(tmp_path), cwd=tmp_path, stdin="y\n")
    assert code == ExitStatus.CLEAN and "repaired:" in out


def test_settings_show_and_its_old_name_print_the_same(tmp_path: Path) -> None:
    (tmp_path / "cachedoctor.toml").write_text("workers = 2\n")
    shown = cli("settings", "show", cwd=tmp_path)
    assert shown[0] == 0 and "workers" in shown[1]
    assert cli("config", "show", cwd=tmp_path) == shown
    assert "config" not in cli("--help", cwd=tmp_path)[1].split("Commands:")[-1].split()


def test_one_line_exit_2_for_a_missing_target_in_every_command(tmp_path: Path) -> None:
    for command in (["scan"], ["repair"], ["recover"]):
        code, out, err = cli(*command, "nowhere", cwd=tmp_path)
        assert (code, out) == (ExitStatus.ERROR, "")
        assert (
            err
            == f"cachedoctor: error: {tmp_path / 'nowhere'}: no such file or folder; check the path (and that its disk is mounted)\n"
        )
