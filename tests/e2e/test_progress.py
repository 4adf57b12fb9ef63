"""Progress: the core's ``progress(stage, done, total)`` calls for a scan and each stage of a
repair, and the rich line the CLI draws from them on stderr, only on a terminal, never on stdout."""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from factories import latent, leaked_view, peers, save_pt, saved_on
from repair_factories import POOL, simpletuner

from cachedoctor.cli import run
from cachedoctor.cli.environment import Environment
from cachedoctor.scan import ScanOptions, scan

Call = tuple[str, int, "int | None"]
CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def recorder() -> tuple[list[Call], Callable[[str, int, int | None], None]]:
    calls: list[Call] = []
    return calls, lambda stage, done, total: calls.append((stage, done, total))


def stages(calls: list[Call]) -> list[str]:
    """The stages in the order they ran (consecutive calls of one stage as one)."""
    return [s for i, (s, _, _) in enumerate(calls) if i == 0 or calls[i - 1][0] != s]


def each_stage_ends_done(calls: list[Call]) -> None:
    """Within each run of a stage: done never goes back, never passes a known total, and the
    last call has done == total."""
    runs: list[list[Call]] = []
    for call in calls:
        if not runs or runs[-1][0][0] != call[0]:
            runs.append([])
        runs[-1].append(call)
    for run_ in runs:
        dones = [d for _, d, _ in run_]
        assert dones == sorted(dones), run_
        assert all(t is None or d <= t for _, d, t in run_), run_
        stage, done, total = run_[-1]
        assert stage == "list" or done == total, run_


def cache(folder: Path, n: int = 6) -> Path:
    """``n`` healthy peers, one device-tagged file and one batch leak (both fixed losslessly)."""
    peers(folder, n)
    with saved_on("cuda:0"):
        save_pt(folder / "gpu.pt", latent(seed=9))
    save_pt(folder / "leak.pt", leaked_view(torch.randn(7, 4, 8, 8).to(torch.bfloat16), 2))
    return folder


# --- the core ------------------------------------------------------------------------------


def test_a_first_scan_lists_the_names_then_counts_up_to_the_total(tmp_path: Path) -> None:
    cache(tmp_path)
    (tmp_path / "sub").mkdir()
    peers(tmp_path / "sub", 3)
    calls, progress = recorder()
    result = scan([str(tmp_path)], ScanOptions(workers=1), progress)
    assert result.stats.files_seen == 11
    assert stages(calls) == ["list", "scan"]
    assert [c for c in calls if c[0] == "list"][-1] == ("list", 11, None)  # the listing, before any read
    assert all(t == 11 for s, _, t in calls if s == "scan")  # the total from the start
    assert calls[-1] == ("scan", 11, 11)
    each_stage_ends_done(calls)


def test_a_rescan_takes_its_total_from_the_state_database(tmp_path: Path) -> None:
    cache(tmp_path)
    scan([str(tmp_path)], ScanOptions(workers=1, state="auto"))
    (tmp_path / "gpu.pt").touch()  # one file to read again
    calls, progress = recorder()
    scan([str(tmp_path)], ScanOptions(workers=1, state="auto"), progress)
    assert stages(calls) == ["scan"]  # no listing: the record of the last scan says 8
    assert calls[0] == ("scan", 0, 8) and calls[-1] == ("scan", 8, 8)


def test_a_cache_that_grew_since_the_record_never_shows_more_done_than_total(tmp_path: Path) -> None:
    cache(tmp_path)
    scan([str(tmp_path)], ScanOptions(workers=1, state="auto"))
    peers(tmp_path / "new", 4)
    calls, progress = recorder()
    # one file a chunk: the reads outrun the record before the walk has listed every folder
    # (with chunks of 64, the worker process is sent the whole walk before its first answer)
    scan([str(tmp_path)], ScanOptions(workers=1, state="auto", chunk_size=1), progress)
    assert calls[0] == ("scan", 0, 8)  # the record: 8 files
    assert any(t is None for _, _, t in calls)  # past the record, unknown until the walk ends
    assert calls[-1] == ("scan", 12, 12)
    each_stage_ends_done(calls)


def test_no_progress_no_listing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a progress callable a scan lists nothing twice (the cost is the caller's choice)."""
    import cachedoctor.scan.engine as engine

    cache(tmp_path)
    walks = []
    real = engine.walk
    monkeypatch.setattr(engine, "walk", lambda *a, **k: (walks.append(a[0]), real(*a, **k))[1])  # counts, then walks
    scan([str(tmp_path)], ScanOptions(workers=1))
    assert len(walks) == 1
    scan([str(tmp_path)], ScanOptions(workers=1), recorder()[1])
    assert len(walks) == 3  # the listing for the total, then the walk that feeds the readers


def test_repair_reports_each_stage_in_order(tmp_path: Path) -> None:
    from cachedoctor.layouts import LayoutName, LayoutOptions
    from cachedoctor.repair.run import RepairOptions, repair

    cache(tmp_path)
    calls, progress = recorder()
    outcome = repair(
        [str(tmp_path)],
        LayoutName.NONE,
        LayoutOptions(),
        RepairOptions(scan=ScanOptions(deep=True, workers=1)),
        [],
        lambda _: True,
        lambda _: None,
        progress,
    )
    assert outcome.after is not None and outcome.after.findings == []
    assert stages(calls) == ["list", "scan", "plan", "lossless", "list", "rescan"]
    assert [c for c in calls if c[0] == "plan"] == [("plan", 0, 2), ("plan", 2, 2)]
    assert [c for c in calls if c[0] == "lossless"] == [("lossless", 0, 2), ("lossless", 1, 2), ("lossless", 2, 2)]
    assert calls[-1] == ("rescan", 8, 8)
    each_stage_ends_done(calls)


def test_recompute_is_counted_item_by_item(tmp_path: Path) -> None:
    from cachedoctor.options import layout_name, layout_options, scan_options
    from cachedoctor.repair.run import RepairOptions, repair
    from cachedoctor.settings import load

    ds = simpletuner(tmp_path, 4)
    for image in ds.images[:3]:
        ds.latent_path(image).unlink()
    settings = load(cwd=str(tmp_path), environ={}, config=str(ds.config))
    calls, progress = recorder()
    repair(
        [],
        layout_name(settings),
        layout_options(settings),
        RepairOptions(scan=scan_options(settings, deep=True), encoders=(POOL,), batch_size=2),
        [],
        lambda _: True,
        lambda _: None,
        progress,
    )
    assert [s for s in stages(calls) if s != "list"] == ["scan", "plan", "recompute", "rescan"]  # no lossless work
    assert [c for c in calls if c[0] == "recompute"] == [("recompute", i, 3) for i in range(4)]
    each_stage_ends_done(calls)


# --- the CLI -------------------------------------------------------------------------------


def cli(*argv: str, tty: bool, stdout_tty: bool = False, environ: dict[str, str] | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(
        stdout=out,
        stderr=err,
        stdout_isatty=stdout_tty,
        stderr_isatty=tty,
        stdin_isatty=False,
        cwd="/",
        environ=environ or {},
        columns=100,
    )
    return run(list(argv), env), out.getvalue(), err.getvalue()


def shown(err: str) -> str:
    """What the terminal showed at one time or another (control sequences out)."""
    return CONTROL.sub("", err).replace("\r", "\n")


def test_scan_draws_the_line_on_stderr_and_leaves_stdout_alone(tmp_path: Path) -> None:
    cache(tmp_path)
    code, out, err = cli("scan", str(tmp_path), "--no-state", "-j", "1", tty=True)
    assert code == 1 and "device-tagged" in out and "\x1b" not in out
    lines = shown(err)
    assert re.search(r"scanning .* 8/8 files", lines), lines
    assert "\x1b[?25l" in err and err.endswith("\x1b[2K")  # hidden cursor; the line erased at the end


@pytest.mark.parametrize("fmt", ["json", "jsonl", "junit", "github"])
def test_no_line_beside_a_machine_format(tmp_path: Path, fmt: str) -> None:
    """The document is the run's whole output: a terminal on stderr gets no progress beside it."""
    cache(tmp_path)
    code, out, err = cli("scan", str(tmp_path), "--no-state", "--format", fmt, "-j", "1", tty=True)
    assert code == 1 and err == "" and "device-tagged" in out


def test_the_line_follows_no_color(tmp_path: Path) -> None:
    cache(tmp_path)
    err = cli("scan", str(tmp_path), "--no-state", "-j", "1", tty=True, environ={"NO_COLOR": "1"})[2]
    assert "8/8 files" in shown(err) and not re.search(r"\x1b\[[0-9;]*m", err)  # cursor moves, no colours


@pytest.mark.parametrize(
    ("flags", "tty"),
    [([], False), (["-q"], True), (["--quiet"], True)],
    ids=["stderr-not-a-terminal", "-q", "--quiet"],
)
def test_no_line_without_a_terminal_or_with_quiet(tmp_path: Path, flags: list[str], tty: bool) -> None:
    cache(tmp_path)
    code, out, err = cli("scan", str(tmp_path), "--no-state", "-j", "1", *flags, tty=tty)
    assert code == 1 and err == "" and "device-tagged" in out


def test_repair_draws_each_stage_and_prints_its_report_untouched(tmp_path: Path) -> None:
    cache(tmp_path)
    code, out, err = cli("repair", str(tmp_path), "--layout", "none", "--yes", "-j", "1", tty=True)
    assert code == 0 and "\x1b" not in out
    assert out.startswith("cachedoctor repair: 8 files scanned (deep)")
    lines = shown(err)
    for label in ("scanning", "planning", "checking again"):
        assert label in lines, label
    quiet = cli("repair", str(tmp_path), "--layout", "none", "--yes", "-q", tty=True)
    assert quiet[0] == 0 and quiet[2] == ""


def test_a_total_that_becomes_unknown_is_shown_as_unknown() -> None:
    """The core passes ``total=None`` when the cache grew past its recorded count; the line must
    drop the old total (rich's update() would keep it: ``7,125/5,700``)."""
    from cachedoctor.cli.progress import ProgressLine

    err = io.StringIO()
    env = Environment(stdout=io.StringIO(), stderr=err, stderr_isatty=True, environ={}, columns=100)
    with ProgressLine(env) as line:
        assert line is not None
        line("scan", 5, 10)
        line("scan", 12, None)
        assert line.bar is not None
        assert [task.total for task in line.bar.tasks] == [None]


def test_recover_draws_its_survey_scan_and_erases_the_line_before_printing(tmp_path: Path) -> None:
    cache(tmp_path)
    (tmp_path / "x.pt.tmp").write_bytes(b"PK\x03\x04 cut short")
    code, out, err = cli("recover", str(tmp_path), "--layout", "none", tty=True)
    assert code == 1 and "\x1b" not in out and "temp files of interrupted writes: 1" in out
    assert re.search(r"scanning .* \d+/9 files", shown(err)), shown(err)  # the survey scan, with its total
    assert err.endswith("\x1b[2K")  # erased before the survey was printed
