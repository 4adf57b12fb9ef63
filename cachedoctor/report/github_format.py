"""``--format github``: GitHub Actions workflow commands, so findings show up as annotations.

A step that runs ``cachedoctor scan --format github`` turns each finding into an ``::error``,
``::warning`` or ``::notice`` line that the runner shows on the run page (and on the file, when
the cache lives in the repository). The runner parses these lines itself, so values are escaped
as the Actions toolkit does (``escapeData`` / ``escapeProperty``): an unescaped newline would end
the command and a ``,`` or ``:`` in a path would end the property. When the runner names a
step-summary file (``GITHUB_STEP_SUMMARY``), a Markdown table by kind (and a small table of steps
per rank for each uneven multi-GPU split) is appended to it, cut to stay under GitHub's 1 MiB
per step; ``--format html -o FILE`` appends a note naming the file. The variable is read at
render time, so the same process can render for several steps.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable
from typing import TextIO

from cachedoctor.findings import Finding, Severity
from cachedoctor.report.interface import Renderer
from cachedoctor.report.outcome import ScanReport
from cachedoctor.report.text import displayable, human_size, relative

SUMMARY_ENV = "GITHUB_STEP_SUMMARY"
SUMMARY_LIMIT = 1024 * 1024 - 4096  # GitHub's 1 MiB per step, less a margin for the runner's own lines
TABLE_RANKS, TABLE_BUCKETS = 16, 20  # a per-rank table this small is embedded in the step summary
_COMMAND = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def escape_data(text: str) -> str:
    """A command's message: ``%``, CR and LF percent-encoded (the toolkit's ``escapeData``)."""
    return displayable(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A property value (``file=``, ``title=``): also ``:`` and ``,`` (``escapeProperty``)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(name: str, message: str, **properties: str) -> str:
    """One workflow command line, e.g. ``::error file=a.pt,title=batch-leak::message``."""
    props = ",".join(f"{key}={escape_property(value)}" for key, value in properties.items())
    return f"::{name}{' ' + props if props else ''}::{escape_data(message)}"


class GithubRenderer(Renderer):
    def __init__(self, cwd: str) -> None:
        self.cwd = cwd

    def render(self, report: ScanReport, out: TextIO, *, color: bool) -> None:
        for f in sorted(report.findings, key=Finding.sort_key):
            item = f"item: {relative(f.source, self.cwd)}; " if f.source else ""
            out.write(
                command(
                    _COMMAND[f.severity],
                    f"{f.message} ({item}fix: {f.fix.value})",
                    file=relative(f.path, self.cwd),
                    title=f.kind,
                )
                + "\n"
            )
        for problem in report.scan.errors:
            out.write(
                command(
                    "error",
                    f"could not be read: {problem.message}",
                    file=relative(problem.path, self.cwd),
                    title="unreadable file",
                )
                + "\n"
            )
        if os.environ.get(SUMMARY_ENV):
            unwritten = append_step_summary(self.step_summary(report))
            if unwritten:  # the annotations are still worth having; say why the table is not
                out.write(command("warning", unwritten, title="cachedoctor") + "\n")
        out.write(command("notice", verdict(report), title="cachedoctor") + "\n")

    def step_summary(self, report: ScanReport) -> str:
        """The Markdown appended to the step summary: the verdict, a table by kind, next step."""
        lines = ["### cachedoctor scan", "", f"{verdict(report)}.", ""]
        grouped: dict[str, list[Finding]] = defaultdict(list)
        for f in sorted(report.findings, key=Finding.sort_key):
            grouped[f.kind].append(f)
        if grouped:
            lines += ["| kind | severity | files | fix |", "| --- | --- | --- | --- |"]
            for kind, items in grouped.items():
                fixes = ", ".join(sorted({f.fix.value for f in items}))
                cells = (kind, items[0].severity.value, str(len({f.path for f in items})), fixes)
                lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
            lines.append("")
        for problem in report.scan.errors:
            lines.append(f"- could not read `{_cell(relative(problem.path, self.cwd))}`: {_cell(problem.message)}")
        if report.scan.errors:
            lines.append("")
        lines += rank_tables(report, lambda p: relative(p, self.cwd))
        next_step = report.next_step(lambda p: relative(p, self.cwd))
        if next_step:
            lines.append(displayable(next_step))
        return "\n".join(lines).rstrip("\n") + "\n\n"


def html_note(report: ScanReport, shown: str, size: int) -> str:
    """What ``--format html -o FILE`` adds to the step summary: the verdict, the file, the
    per-rank tables (the rest of the page does not fit Markdown; the file has it)."""
    lines = [
        "### cachedoctor HTML report",
        "",
        f"{verdict(report)}. The full report is `{_cell(shown)}` (one self-contained HTML file, "
        f"{human_size(size)}): upload it with actions/upload-artifact to open it from the run page.",
        "",
    ]
    lines += rank_tables(report, lambda p: p)
    return "\n".join(lines).rstrip("\n") + "\n\n"


def rank_tables(report: ScanReport, show: Callable[[str], str]) -> list[str]:
    """Markdown lines: each uneven ``rank-imbalance`` split as a small table of steps per rank
    and uneven bucket (a run of at most :data:`TABLE_RANKS` ranks and :data:`TABLE_BUCKETS`
    buckets; a larger one is only named: the HTML and JSON reports hold it)."""
    lines: list[str] = []
    for f in report.findings:
        d = f.details
        if f.kind != "rank-imbalance" or "by_bucket" not in d:
            continue
        steps, by_bucket = list(d.get("steps") or []), dict(d.get("by_bucket") or {})
        lines.append(f"Steps per rank, dataset `{_cell(str(d.get('dataset')))}` in `{_cell(show(f.path))}`:")
        lines.append("")
        if len(steps) > TABLE_RANKS or len(by_bucket) > TABLE_BUCKETS:
            lines += [f"{len(steps)} ranks, {len(by_bucket)} uneven buckets: see the HTML or JSON report.", ""]
            continue
        lines.append("| | " + " | ".join(f"rank {r}" for r in range(len(steps))) + " |")
        lines.append("| --- |" + " --- |" * len(steps))
        lines.append("| steps | " + " | ".join(map(str, steps)) + " |")
        for bucket, values in by_bucket.items():
            lines.append(f"| bucket {_cell(str(bucket))} | " + " | ".join(map(str, values)) + " |")
        lines.append("")
    return lines


def append_step_summary(text: str) -> str | None:
    """Append ``text`` to the step summary file, cut to what keeps the file under GitHub's limit
    (1 MiB per step: a larger summary is not shown at all); a problem to report, or ``None``."""
    path = os.environ.get(SUMMARY_ENV)
    if not path:
        return None
    try:
        used = os.path.getsize(path) if os.path.exists(path) else 0
        with open(path, "a", encoding="utf-8") as summary:
            summary.write(fit(text, SUMMARY_LIMIT - used))
    except OSError as exc:
        return f"cannot append to {SUMMARY_ENV} ({path}): {exc.strerror or exc}"
    return None


def fit(text: str, budget: int) -> str:
    """``text`` whole if its UTF-8 fits ``budget`` bytes, else its first lines and a line that
    says the rest was cut ("" when not even that fits)."""
    if len(text.encode("utf-8", "replace")) <= budget:
        return text
    tail = "\n(the step summary is limited to 1 MiB: the rest was cut; --format json or html has it all)\n\n"
    room = budget - len(tail.encode())
    kept: list[str] = []
    for line in text.splitlines():
        size = len(line.encode("utf-8", "replace")) + 1
        if size > room:
            break
        kept.append(line)
        room -= size
    return "\n".join(kept) + tail if room >= 0 and budget > len(tail.encode()) else ""


def verdict(report: ScanReport) -> str:
    """``N error(s), M warning(s) in K file(s)`` or ``no findings``, plus unread files if any."""
    sev = report.by_severity()
    text = "no findings"
    if report.scan.empty or report.scan.unchecked:  # accepted by --allow-empty: say so, not "all is well"
        where = ", ".join(report.scan.unchecked) if not report.scan.empty else "the targets"
        text += f"; nothing was checked in {where} (no cache file)"
    if report.findings:
        text = f"{sev['error']} error(s), {sev['warning']} warning(s)"
        if sev["info"]:
            text += f", {sev['info']} info"
        text += f" in {len({f.path for f in report.findings})} file(s)"
    if report.scan.errors:
        text += f"; {len(report.scan.errors)} file(s) could not be read, so the scan is incomplete"
    return text


def _cell(text: str) -> str:
    """A Markdown table cell: no pipe or newline may break the row."""
    return displayable(text).replace("|", "\\|").replace("\r", " ").replace("\n", " ")
