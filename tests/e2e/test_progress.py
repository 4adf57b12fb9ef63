"""Progress: the core's ``progress(stage, done, total)`` calls for a scan and each stage of a
repair, and what the CLI shows of them on stderr, never on stdout: the rich line on a terminal,
plain lines in a log (a file or pipe: SLURM, nohup), as ``--progress auto|bar|lines|none`` says."""

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


def cli(
    *argv: str, tty: bool, stdout_tty: bool = False, environ: dict[str, str] | None = None, cwd: str = "/"
) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(
        stdout=out,
        stderr=err,
        stdout_isatty=stdout_tty,
        stderr_isatty=tty,
        stdin_isatty=False,
        cwd=cwd,
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
    [([], False), (["-q"], True), (["--quiet"], True), (["-q", "--progress", "lines"], True)],
    ids=["stderr-in-memory", "-q", "--quiet", "-q-beats-lines"],
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


# --- plain lines for logs (issue 28: a SLURM job saw nothing between the plan and ``done:``) ---

REPO = Path(__file__).resolve().parents[2]
LINE = re.compile(
    r"cachedoctor: (?P<command>scan|repair|recover): (?P<stage>[a-z]+) (?P<done>\d+)"
    r"(?:/(?P<total>\d+) (?P<unit>files|findings) \((?P<pct>\d+)%\)| (?:files|findings) so far)"
    r"(?:, (?P<rate>\d+(?:\.\d+)?) (?:files|findings)/s(?:, (?:ETA|took) (?:\d+s|\d+m\d\ds|\d+h\d\dm))?)?"
)


def job(*argv: str, merged: bool = False) -> tuple[int, str, str]:
    """``cachedoctor *argv`` as a batch job runs it: stdin from /dev/null, stdout and stderr to
    files (``merged``: one file, as ``nohup`` or SLURM's default ``--output``), no CACHEDOCTOR_*."""
    import subprocess
    import sys
    import tempfile

    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("CACHEDOCTOR_")}
    env["PYTHONPATH"] = str(REPO)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        code = subprocess.run(
            [sys.executable, "-m", "cachedoctor", *argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out if merged else err,
            env=env,
            timeout=120,
        ).returncode
        out.seek(0)
        err.seek(0)
        return code, out.read(), err.read()


def parsed(err: str) -> list[re.Match[str]]:
    """Every line of ``err`` as a progress line (each must be one), with no control character."""
    assert "\x1b" not in err and "\r" not in err, repr(err)
    matches = [LINE.fullmatch(line) for line in err.splitlines()]
    assert all(matches), [line for line, m in zip(err.splitlines(), matches, strict=True) if not m]
    return [m for m in matches if m]


def counts_go_up_to_the_total(lines: list[re.Match[str]]) -> None:
    """Within each stage: done never goes back, and a stage with a total ends at it."""
    runs: list[list[re.Match[str]]] = []
    for m in lines:
        if not runs or runs[-1][0]["stage"] != m["stage"]:
            runs.append([])
        runs[-1].append(m)
    for stage_lines in runs:
        dones = [int(m["done"]) for m in stage_lines]
        assert dones == sorted(dones), [m.group(0) for m in stage_lines]
        last = stage_lines[-1]
        assert last["total"] is None or last["done"] == last["total"], last.group(0)


def test_a_scan_in_a_job_writes_plain_lines_with_counts_rate_and_eta(tmp_path: Path) -> None:
    cache(tmp_path)
    code, out, err = job("scan", str(tmp_path), "--no-state", "-j", "1", "--progress-interval", "0")
    assert code == 1 and "device-tagged" in out and "cachedoctor: scan:" not in out
    lines = parsed(err)
    assert {m["command"] for m in lines} == {"scan"}
    assert next(m.group(0) for m in lines if m["stage"] == "scan") == "cachedoctor: scan: scan 0/8 files (0%)"
    assert lines[-1]["stage"] == "scan" and lines[-1]["done"] == "8" and ", took " in lines[-1].group(0)
    assert len([m for m in lines if m["stage"] == "scan"]) == 2  # every update: the start, one chunk of 8
    counts_go_up_to_the_total(lines)


def test_a_repair_in_a_job_shows_each_stage_between_its_plan_and_done(tmp_path: Path) -> None:
    cache(tmp_path)
    code, log, _ = job("repair", str(tmp_path), "--yes", "-j", "1", merged=True)  # the default 30 s
    assert code == 0
    said = log.splitlines()
    progress = [line for line in said if line.startswith("cachedoctor: repair: ")]
    lines = parsed("\n".join(progress) + "\n")
    assert [m.group(0).split(",")[0] for m in lines if m["stage"] != "list"] == [
        "cachedoctor: repair: scan 0/8 files (0%)",
        "cachedoctor: repair: scan 8/8 files (100%)",
        "cachedoctor: repair: plan 0/2 findings (0%)",
        "cachedoctor: repair: plan 2/2 findings (100%)",
        "cachedoctor: repair: lossless 0/2 files (0%)",
        "cachedoctor: repair: lossless 2/2 files (100%)",
        "cachedoctor: repair: rescan 0/8 files (0%)",
        "cachedoctor: repair: rescan 8/8 files (100%)",
    ]  # each stage's start and end (no line in between: they took less than 30 s)
    plan, done = said.index("plan:"), next(i for i, line in enumerate(said) if line.startswith("done: "))
    lossless = [i for i, line in enumerate(said) if " lossless " in line]
    assert plan < lossless[0] and lossless[-1] < done  # the plan first, though stdout is no terminal


def test_progress_none_writes_nothing_and_lines_beside_json_go_to_stderr(tmp_path: Path) -> None:
    cache(tmp_path)
    assert job("scan", str(tmp_path), "--no-state", "--progress", "none")[2] == ""
    assert job("scan", str(tmp_path), "--no-state", "--format", "json")[2] == ""  # auto: the document alone
    code, out, err = job("scan", str(tmp_path), "--no-state", "--format", "json", "--progress", "lines")
    assert code == 1 and out.startswith("{") and "cachedoctor: scan: scan 8/8 files (100%)" in err


def test_progress_lines_on_a_terminal_and_auto_in_a_log_in_process(tmp_path: Path) -> None:
    cache(tmp_path)
    code, out, err = cli("scan", str(tmp_path), "--no-state", "-j", "1", "--progress", "lines", tty=True)
    assert code == 1 and "cachedoctor: scan: scan 8/8 files (100%)" in err
    parsed(err)
    log = io.StringIO()
    env = Environment(stdout=io.StringIO(), stderr=log, stderr_isatty=False, stderr_is_log=True, environ={})
    assert run(["scan", str(tmp_path), "--no-state", "-j", "1"], env) == 1
    assert "cachedoctor: scan: scan 8/8 files (100%)" in log.getvalue()


def test_progress_bar_without_a_terminal_is_drawn_as_asked(tmp_path: Path) -> None:
    """``--progress bar`` is a request: drawn, cursor codes and all, for a wrapper that renders
    them; ``auto`` is what picks by the stream."""
    cache(tmp_path)
    code, out, err = cli("scan", str(tmp_path), "--no-state", "-j", "1", "--progress", "bar", tty=False)
    assert code == 1 and "\x1b" not in out
    assert "\x1b[?25l" in err and re.search(r"scanning .* 8/8 files", shown(err)), err


def test_lines_come_every_interval_with_rate_and_eta() -> None:
    from cachedoctor.cli.progress_lines import ProgressLines

    now = [0.0]
    err = io.StringIO()
    env = Environment(stdout=io.StringIO(), stderr=err, stderr_isatty=False, environ={})
    with ProgressLines(env, "repair", 30, clock=lambda: now[0]) as line:
        for at, done in [(0, 0), (10, 40), (29.9, 100), (30, 120), (45, 180), (60, 240), (60, 239), (120, 480)]:
            now[0] = at
            line("recompute", done, 480)
        line("recompute", 480, 480)  # the stage's finish(): said already
        now[0] = 4000
        line("rescan", 0, 9000)
        now[0] = 4000 + 3 * 3600
        line("rescan", 10, 9000)
    assert err.getvalue().splitlines() == [
        "cachedoctor: repair: recompute 0/480 files (0%)",
        "cachedoctor: repair: recompute 120/480 files (25%), 4.0 files/s, ETA 1m30s",
        "cachedoctor: repair: recompute 240/480 files (50%), 4.0 files/s, ETA 1m00s",
        "cachedoctor: repair: recompute 480/480 files (100%), 4.0 files/s, took 2m00s",
        "cachedoctor: repair: rescan 0/9000 files (0%)",
        "cachedoctor: repair: rescan 10/9000 files (0%), 0.00093 files/s, ETA 2697h00m",
    ]


def test_the_progress_settings_resolve_as_every_setting(tmp_path: Path) -> None:
    """``--progress`` and ``--progress-interval``: command line > CACHEDOCTOR_* > config file > default."""
    from cachedoctor.settings import load

    default = load(str(tmp_path), {})
    assert (default.progress.value, default.progress_interval.value) == ("auto", 30.0)
    (tmp_path / "cachedoctor.toml").write_text('progress = "lines"\nprogress-interval = 5\n')
    filed = load(str(tmp_path), {})
    assert (filed.progress.value, filed.progress_interval.value) == ("lines", 5.0)
    assert filed.progress.source == str(tmp_path / "cachedoctor.toml")
    env = {"CACHEDOCTOR_PROGRESS": "none", "CACHEDOCTOR_PROGRESS_INTERVAL": "0.5"}
    varied = load(str(tmp_path), env)
    assert (varied.progress.value, varied.progress_interval.value) == ("none", 0.5)
    typed = load(str(tmp_path), env, progress="bar", progress_interval=60)
    assert (typed.progress.value, typed.progress_interval.value) == ("bar", 60.0)

    code, out, _ = cli("settings", "show", "--progress-interval", "2", tty=False, cwd=str(tmp_path))
    assert code == 0
    rows = {line.split()[0]: line.split(None, 1)[1] for line in out.splitlines()[1:]}
    assert rows["progress"].split() == ["lines", f"({tmp_path / 'cachedoctor.toml'})"]
    assert rows["progress-interval"].split() == ["2.0", "(command", "line)"]


@pytest.mark.parametrize(
    ("argv", "environ", "line"),
    [
        (
            ["--progress-interval", "-1"],
            {},
            "cachedoctor: error: --progress-interval: expected a number of seconds from 0 up to 86400\n",
        ),
        (
            [],
            {"CACHEDOCTOR_PROGRESS": "loud"},
            "cachedoctor: error: environment CACHEDOCTOR_PROGRESS: 'loud': expected one of auto, bar, lines, none\n",
        ),
    ],
)
def test_a_bad_progress_setting_is_one_line_exit_2(
    tmp_path: Path, argv: list[str], environ: dict[str, str], line: str
) -> None:
    cache(tmp_path)
    assert cli("scan", str(tmp_path), "--no-state", *argv, tty=False, environ=environ) == (2, "", line)
