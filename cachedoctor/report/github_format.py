"""``--format github``: GitHub Actions workflow commands, so findings show up as annotations.

A step that runs ``cachedoctor scan --format github`` turns each finding into an ``::error``,
``::warning`` or ``::notice`` line that the runner shows on the run page (and on the file, when
the cache lives in the repository). The runner parses these lines itself, so values are escaped
as the Actions toolkit does (``escapeData`` / ``escapeProperty``): an unescaped newline would end
the command and a ``,`` or ``:`` in a path would end the property. When the runner names a
step-summary file (``GITHUB_STEP_SUMMARY``), a Markdown table by kind is appended to it; the
variable is read at render time, so the same process can render for several steps.
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import TextIO

from cachedoctor.findings import Finding, Severity
from cachedoctor.report.interface import Renderer
from cachedoctor.report.outcome import ScanReport
from cachedoctor.report.text import displayable, relative

SUMMARY_ENV = "GITHUB_STEP_SUMMARY"
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
        summary_file = os.environ.get(SUMMARY_ENV)
        if summary_file:
            try:
                with open(summary_file, "a", encoding="utf-8") as summary:
                    summary.write(self.step_summary(report))
            except OSError as exc:  # the annotations are still worth having; say why the table is not
                out.write(
                    command(
                        "warning",
                        f"cannot append to {SUMMARY_ENV} ({summary_file}): {exc.strerror or exc}",
                        title="cachedoctor",
                    )
                    + "\n"
                )
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
        next_step = report.next_step(lambda p: relative(p, self.cwd))
        if next_step:
            lines.append(displayable(next_step))
        return "\n".join(lines).rstrip("\n") + "\n\n"


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
