"""The findings-by-kind table is written without rich exactly as rich writes it (``report/plain_table.py``).

A report without colour on a UTF-8 stream lays the table's plain ASCII cells out itself; rich
keeps everything else (colour, a tab, a wide or non-ASCII character, a table too wide for its
width, a stream that cannot carry the box characters). Each table here is written both ways, the
report's way and rich's, and must come out the same, byte for byte: random kinds (the real ones,
long ones, ones with spaces, punctuation, non-ASCII), counts, severities and fix lists, at widths
from far too narrow (the report's one line per kind) to wide, the table alone and whole reports.
"""

from __future__ import annotations

import io
import random
import subprocess
import sys
from typing import TextIO

import pytest

from cachedoctor.checks import CHECKS
from cachedoctor.findings import Finding, Fix, Severity
from cachedoctor.report import table as table_module
from cachedoctor.report.outcome import ScanReport
from cachedoctor.report.plain_table import plain_table
from cachedoctor.report.summary import ScanSummary
from cachedoctor.report.table import TableRenderer, _Console, _kinds_table

KINDS = [c.kind for c in CHECKS]
_CHARS = "abcdefghij-_.:/[]()0123456789 "


def _kind(rng: random.Random) -> str:
    pick = rng.random()
    if pick < 0.5:
        return rng.choice(KINDS)
    if pick < 0.9:
        return "".join(rng.choice(_CHARS) for _ in range(rng.randint(1, rng.choice([20, 60]))))
    return rng.choice(["ü-kind", "中文", "tab\tkind", "e\u0301", "\x1b[1m", "a\u200bb", "  ", "[bold]x[/bold]"])


def _rows(rng: random.Random) -> tuple[list[tuple[str, str, str, str]], int]:
    fixes = [f.value for f in Fix]
    rows = []
    for _ in range(rng.randint(1, 12)):
        chosen = sorted(rng.sample(fixes, rng.choice([1, 1, 2, rng.randint(1, len(fixes))])))
        count = str(rng.choice([1, rng.randint(1, 99), rng.randint(1, 10 ** rng.randint(1, 9))]))
        rows.append((_kind(rng), rng.choice(list(Severity)).value, count, ", ".join(chosen)))
    widest = max(len(fix) for row in rows for fix in row[3].split(", ")) + 1
    return rows, widest


def _as_rich(out: TextIO, color: bool, width: int) -> _Console:
    console = _Console(out, color, width)
    console.plain = console.boxes = False  # every line and the table through rich
    return console


@pytest.mark.parametrize("seed", range(2))
def test_the_table_is_written_as_rich_writes_it(seed: int) -> None:
    rng = random.Random(seed)
    plain = 0
    for _ in range(250):
        rows, widest = _rows(rng)
        width = rng.choice([20, 40, 60, 80, 80, 100, 120, 200, rng.randint(1, 250)])
        console = _Console(io.StringIO(), False, width)
        assert console.boxes
        ours = _kinds_table(console, rows, widest)
        assert ours == _kinds_table(_as_rich(io.StringIO(), False, width), rows, widest), (rows, width)
        plain += plain_table(("kind", "severity", "files", "fix"), rows, (None, None, None, widest), width) is not None
    assert 50 < plain < 200  # both ways were taken, many times each


def test_a_table_too_wide_or_not_plain_is_left_to_rich() -> None:
    headers, least = ("kind", "severity", "files", "fix"), (None, None, None, 12)
    fits = [("device-tagged", "warning", "50", "rewrite-cpu")]
    assert plain_table(headers, fits, least, 47) == [
        "kind          ┃ severity ┃ files ┃ fix",
        "━━━━━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━╇━━━━━━━━━━━━━",
        "device-tagged │ warning  │ 50    │ rewrite-cpu",
    ]
    assert plain_table(headers, fits, least, 46) is None  # one column short: rich would wrap "fix"
    assert plain_table(headers, [("dévice", "warning", "50", "none")], least, 80) is None
    assert plain_table(headers, [("a\tb", "warning", "50", "none")], least, 80) is None


def test_a_stream_that_is_not_utf8_gets_rich_s_ascii_box() -> None:
    out = io.TextIOWrapper(io.BytesIO(), encoding="latin-1")
    console = _Console(out, False, 80)
    assert console.plain and not console.boxes
    text = _kinds_table(console, [("device-tagged", "warning", "50", "rewrite-cpu")], 12)
    assert text.splitlines()[1] == "--------------+----------+-------+-------------"


def _finding(rng: random.Random, kind: str, severity: Severity, index: int) -> Finding:
    fix = rng.choice(list(Fix))
    return Finding(kind, severity, f"/cache/part_{index % 7}/{index:07d}.pt", "a message about it", fix)


def _report(rng: random.Random) -> ScanReport:
    findings = []
    for _ in range(rng.randint(1, 8)):
        kind, severity = _kind(rng), rng.choice(list(Severity))
        findings += [_finding(rng, kind, severity, rng.randint(0, 10**6)) for _ in range(rng.randint(1, 30))]
    findings.sort(key=Finding.sort_key)
    return ScanReport(ScanSummary(targets=["/cache"], findings=findings))


@pytest.mark.parametrize("quiet", [False, True])
def test_a_whole_report_is_written_as_rich_writes_it(quiet: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(31 + quiet)
    for _ in range(100):
        report = _report(rng)
        width = rng.choice([30, 50, 80, 120, rng.randint(10, 200)])
        renderer = TableRenderer("/", width=width, quiet=quiet, verbose=rng.random() < 0.2)
        ours = io.StringIO()
        renderer.render(report, ours, color=False)
        with monkeypatch.context() as patch:
            patch.setattr(table_module, "_Console", _as_rich)  # the same report, all of it through rich
            theirs = io.StringIO()
            renderer.render(report, theirs, color=False)
        assert ours.getvalue() == theirs.getvalue(), width


def test_a_plain_report_with_findings_imports_no_rich() -> None:
    """In a fresh interpreter: a report whose table is plain is written without rich."""
    code = (
        "import io, sys\n"
        "from cachedoctor.findings import Finding, Fix, Severity\n"
        "from cachedoctor.report.outcome import ScanReport\n"
        "from cachedoctor.report.summary import ScanSummary\n"
        "from cachedoctor.report.table import TableRenderer\n"
        "f = Finding('device-tagged', Severity.WARNING, '/c/a.pt', 'tagged', Fix.REWRITE_CPU)\n"
        "out = io.StringIO(); TableRenderer('/', width=80).render(ScanReport(ScanSummary(['/c'], [f])), out, color=False)\n"
        "print('kind          ┃ severity' in out.getvalue(), [m for m in sys.modules if m.split('.')[0] == 'rich'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "True []\n"
