"""Terminal conventions on a faked terminal: colour (--color, NO_COLOR, FORCE_COLOR), -q and -v,
and every human output wrapped to the width at word boundaries."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from factories import latent, leaked_view, peers, save_pt, saved_on

from cachedoctor.cli import run
from cachedoctor.cli.environment import Environment

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "caches"
ESCAPE = "\x1b["


def term(
    *argv: str, tty: bool = True, environ: dict[str, str] | None = None, columns: int | None = None, cwd: str = "/"
) -> tuple[int, str, str]:
    """``(exit code, stdout, stderr)`` with stdout (and stderr) a terminal or not."""
    out, err = io.StringIO(), io.StringIO()
    env = Environment(
        stdout=out,
        stderr=err,
        stdout_isatty=tty,
        stderr_isatty=False,  # no progress line here: tests/e2e/test_progress.py draws it
        stdin_isatty=False,
        cwd=cwd,
        environ=environ or {},
        columns=columns,
    )
    return run(list(argv), env), out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four healthy peers and twelve device-tagged files (more than a kind's list and the worst
    files show); scanned with --no-state, so the tests share it."""
    tmp_path = tmp_path_factory.mktemp("cache")
    peers(tmp_path)
    with saved_on("cuda:0"):
        for i in range(12):
            save_pt(tmp_path / f"gpu{i:02d}.pt", latent(seed=10 + i))
    return tmp_path


# --- colour -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tty", "environ", "flags", "coloured"),
    [
        (True, {}, [], True),  # a terminal: colour
        (False, {}, [], False),  # a pipe: none
        (True, {"NO_COLOR": "1"}, [], False),  # https://no-color.org
        (True, {"NO_COLOR": ""}, [], True),  # set but empty: ignored, as the convention says
        (False, {"FORCE_COLOR": "1"}, [], True),
        (False, {"FORCE_COLOR": "1", "TERM": "dumb"}, [], True),  # forced is forced
        (True, {"TERM": "dumb"}, [], False),  # a terminal that cannot show styles
        (True, {"TERM": "dumb"}, ["--color", "always"], True),
        (True, {"NO_COLOR": "1"}, ["--color", "always"], True),  # the option beats the variables
        (False, {}, ["--color", "always"], True),
        (True, {"FORCE_COLOR": "1"}, ["--color", "never"], False),
        (True, {}, ["--color", "never"], False),
    ],
)
def test_colour_follows_the_option_then_the_variables_then_the_terminal(
    cache: Path, tty: bool, environ: dict[str, str], flags: list[str], coloured: bool
) -> None:
    code, out, err = term("scan", str(cache), "--no-state", "-j", "1", *flags, tty=tty, environ=environ)
    assert (code, err) == (0, "")
    assert "device-tagged (12)" in out
    assert (ESCAPE in out) is coloured


def test_machine_formats_are_never_coloured(cache: Path) -> None:
    code, out, _ = term("scan", str(cache), "--no-state", "--format", "json", "--color", "always")
    assert code == 0 and ESCAPE not in out and json.loads(out)["summary"]["findings"] == 12


# --- -q and -v ----------------------------------------------------------------------------


def test_default_lists_the_first_few_files_of_a_kind(cache: Path) -> None:
    _, out, _ = term("scan", str(cache), "--no-state", tty=False, cwd=str(cache))
    assert len(re.findall(r"^  gpu\d\d\.pt: ", out, re.M)) == 8
    assert "  ... and 4 more (-v or --format json lists all)" in out
    assert len(re.findall(r"^  gpu\d\d\.pt  \[device-tagged\]$", out, re.M)) == 10  # the worst files


def test_verbose_lists_every_file(cache: Path) -> None:
    _, out, _ = term("scan", str(cache), "--no-state", "-v", tty=False, cwd=str(cache))
    assert len(re.findall(r"^  gpu\d\d\.pt: ", out, re.M)) == 12
    assert "more (" not in out
    assert len(re.findall(r"^  gpu\d\d\.pt  \[device-tagged\]$", out, re.M)) == 12


def test_quiet_prints_the_findings_and_the_verdict_only(cache: Path) -> None:
    code, out, err = term("scan", str(cache), "--no-state", "-q", tty=False, cwd=str(cache))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == "Findings by kind"  # no header, layout line or notes before it
    assert "cachedoctor scan (" not in out and "layout:" not in out and "Worst files" not in out
    assert lines[-1] == "0 error(s), 12 warning(s) in 12 file(s)."  # no advice after the verdict


def test_quiet_on_a_clean_cache_says_no_findings_only(tmp_path: Path) -> None:
    peers(tmp_path)
    assert term("scan", str(tmp_path), "--no-state", "-q", tty=False) == (0, "No findings.\n", "")


def test_quiet_keeps_the_notes_out_but_errors_in(tmp_path: Path) -> None:
    peers(tmp_path)
    state = tmp_path / "state.sqlite"
    state.write_bytes(b"not a database")
    code, out, err = term("scan", str(tmp_path), "-q", "--state", str(state), tty=False)
    assert code == 2 and out == "" and err.count("\n") == 1 and str(state) in err


@pytest.mark.parametrize("fmt", ["json", "jsonl", "junit", "github"])
def test_machine_formats_are_the_same_with_q_and_v(cache: Path, fmt: str) -> None:
    def report(*flags: str) -> str:
        code, out, _ = term("scan", str(cache), "--no-state", "-j", "1", "--format", fmt, *flags, tty=False)
        varying = r'"elapsed(_s)?": [0-9.e-]+|time="[0-9.]+"|[0-9]+\.[0-9]+s\b|\d{4}-\d\d-\d\dT[0-9:.+-]+'
        return re.sub(varying, "T", out)  # timings and timestamps

    plain = report()
    assert plain and report("-q") == plain and report("-v") == plain


def test_q_and_v_together_is_a_usage_error(cache: Path) -> None:
    code, out, err = term("scan", str(cache), "-q", "-v", tty=False)
    assert (code, out) == (2, "") and err == "cachedoctor: error: pass -q/--quiet or -v/--verbose, not both\n"


# --- width --------------------------------------------------------------------------------


def assert_wrapped(text: str, width: int) -> None:
    """No line wider than ``width``, except one that holds a single word (a long path)."""
    for line in text.splitlines():
        assert len(line) <= width or len(line.split()) == 1 or _path_and_colon(line), (width, line)


def _path_and_colon(line: str) -> bool:
    """``  some/long/path.pt:`` on its own: the message follows on the next lines."""
    return len(line.split()) == 1 and line.rstrip().endswith(":")


def flat(text: str) -> str:
    """``text`` with its line breaks and indents undone (and the scan's time left out)."""
    return re.sub(r"\b[0-9]+\.[0-9]+s\b", "T", " ".join(text.split()))


@pytest.mark.parametrize("width", [60, 80])
def test_the_scan_table_wraps_at_word_boundaries(width: int) -> None:
    code, out, _ = term("scan", str(FIXTURES), "--no-state", "-j", "1", "-v", tty=False, columns=width, cwd="/")
    doc = json.loads(term("scan", str(FIXTURES), "--no-state", "-j", "1", "--format", "json", tty=False)[1])
    assert code == 1 and doc["findings"]
    assert_wrapped(out, width)
    for finding in doc["findings"]:  # every message whole: no word split across lines
        assert flat(f"{finding['path'].lstrip('/')}: {finding['message']}") in flat(out), finding["message"]
    assert any(len(line) > width for line in out.splitlines())  # the long paths stand whole
    wide = term("scan", str(FIXTURES), "--no-state", "-j", "1", "-v", tty=False, columns=1000, cwd="/")[1]
    whole = [line for line in wide.splitlines() if line.startswith("layout: ")]
    begun = [line for line in out.splitlines() if line.startswith("layout: ")]
    assert len(whole) == len(begun) == 3  # one layout line per part: each wrapped on its own
    assert all(w.startswith(b.split(" (auto:")[0]) for w, b in zip(whole, begun, strict=True))
    for line in wide.splitlines():  # the header, the layout line, the notes, the verdict: all there, whole
        if not set(line) & set("│┃━"):
            assert flat(line) in flat(out), line


@pytest.mark.parametrize("width", [60, 80])
def test_explain_wraps_to_the_width(width: int) -> None:
    from cachedoctor.explain import catalogue, explain

    for info in catalogue():
        code, out, _ = term("explain", info.kind, tty=False, columns=width)
        assert code == 0 and out == explain(info.kind, width) + "\n"
        assert max(len(line) for line in out.splitlines()) <= width, info.kind
        assert flat(info.why) in flat(out)  # no word split
    code, out, _ = term("explain", tty=False, columns=width)
    assert code == 0 and max(len(line) for line in out.splitlines()) <= width
    assert all(flat(info.summary) in flat(out) for info in catalogue())


def test_explain_follows_columns_from_the_environment() -> None:
    wide = term("explain", "batch-leak", tty=False, environ={"COLUMNS": "120"})[1]
    narrow = term("explain", "batch-leak", tty=False, environ={"COLUMNS": "60"})[1]
    assert max(map(len, wide.splitlines())) > 88 >= 60 >= max(map(len, narrow.splitlines()))
    assert flat(wide) == flat(narrow)


def test_a_batch_leak_row_wraps_its_message_under_the_path(tmp_path: Path) -> None:
    import torch

    peers(tmp_path)
    save_pt(tmp_path / "leak.pt", leaked_view(torch.randn(7, 4, 8, 8).to(torch.bfloat16), 1))
    _, out, _ = term("scan", str(tmp_path), "--no-state", tty=False, columns=60, cwd=str(tmp_path))
    row = out[out.index("  leak.pt: ") :].split("\n\n")[0].splitlines()
    assert len(row) > 1 and all(line.startswith("    ") for line in row[1:])  # continuation indented
    assert_wrapped(out, 60)


def test_too_narrow_for_the_kinds_table_gives_one_line_per_kind(tmp_path: Path) -> None:
    """At 40 columns the table cropped its fix column to 'clo', 'rec': values that look real."""
    from cli_run import cli

    peers(tmp_path, 4)
    save_pt(tmp_path / "leak.pt", leaked_view(latent(seed=3).repeat(7, 1, 1, 1), 2))
    code, out, _ = cli("scan", str(tmp_path), "--no-state", columns=40)
    lines = out.splitlines()
    start = lines.index("Findings by kind")
    assert lines[start + 1 : start + 3] == ["  batch-leak: error, 1 file(s), fix:", "    clone-storage"]
    wide = cli("scan", str(tmp_path), "--no-state", columns=100)[1].splitlines()
    assert wide[wide.index("Findings by kind") + 3].split("│")[-1].strip() == "clone-storage"
