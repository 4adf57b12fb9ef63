"""``--format html``: one self-contained page a lead can open, with the scan's numbers drawn.

The other formats are tables of numbers; this one shows the summary and verdict, the findings by
kind and by folder, each ``rank-imbalance`` finding's steps per rank and bucket as a chart, and
each ``distribution-outlier`` finding's channels against its peers as a chart
(``html_sections.py``). It must open from a file on a machine without network (an artifact
downloaded from CI, a cluster's login node), so nothing is fetched: the CSS is inline, the
charts are inline SVG drawn in Python (``html_charts.py``), there is no script, font or image.
Every number shown is one the JSON report (``--format json``) holds, or a sum of them, so the
page can be checked against it. File names and messages are untrusted (a cache file may be named
``<img src=x onerror=...>.pt``): every text goes through :func:`html.escape`.

Written with ``-o FILE`` inside a GitHub Actions step (``GITHUB_STEP_SUMMARY`` set), the step
summary gets the verdict, the file's name and the small per-rank tables (``github_format.py``).
"""

from __future__ import annotations

import os
from collections import defaultdict
from html import escape
from typing import TextIO

from cachedoctor import __version__
from cachedoctor.findings import Finding
from cachedoctor.report.github_format import append_step_summary, html_note, verdict
from cachedoctor.report.html_charts import stacked_bars
from cachedoctor.report.html_sections import channel_section, rank_section
from cachedoctor.report.interface import Renderer
from cachedoctor.report.outcome import SCHEMA, ScanReport
from cachedoctor.report.text import displayable, human_size, relative

PER_KIND = 1000  # findings listed per kind; the JSON report lists all
FOLDER_BARS = 30  # folders drawn in the chart (the table lists every one)
#: kinds whose path is the dataset's cache folder, not a file in it (docs/json.md)
FOLDER_KINDS = frozenset({"rank-imbalance", "dropped-bucket"})
SEVERITY_COLOURS = (("error", "#D55E00"), ("warning", "#E69F00"), ("info", "#56B4E9"))
_EXIT = {0: "clean", 1: "findings at or above --fail-on", 2: "incomplete: not everything could be checked"}

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1b1f24;background:#f6f7f9}
main{max-width:1100px;margin:0 auto;padding:24px}
header{padding:20px 24px;border-radius:8px;color:#fff;background:#2f6f3e}
header.v1{background:#a33a12}header.v2{background:#6b2a7a}
header h1{margin:0 0 4px;font-size:22px}header p{margin:2px 0}
section{background:#fff;border:1px solid #dde1e6;border-radius:8px;padding:16px 20px;margin:18px 0}
h2{font-size:18px;margin:0 0 10px}h3{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{border-bottom:1px solid #e6e8eb;padding:4px 10px;text-align:left;vertical-align:top}
th{background:#f0f2f4;font-weight:600}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
td.path{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;word-break:break-all}
.error{color:#b3420b;font-weight:600}.warning{color:#946200;font-weight:600}.info{color:#1f6f99}
.muted{color:#5b636b}.msg{max-width:560px}
details>summary{cursor:pointer;font-weight:600;margin:8px 0}
svg{display:block;margin:8px 0;max-width:100%;height:auto;font:12px system-ui,sans-serif}
svg .t{font-weight:600;font-size:13px}svg .s{fill:#5b636b;font-size:11px}
svg .ax{stroke:#8a939c}svg .zero{stroke:#c5cbd1;stroke-dasharray:3 3}
svg .band{fill:#cfe3f3}svg .mid{stroke:#0072B2;stroke-width:2}
svg .on{fill:#009E73}svg .off{fill:#D55E00}
.charts{display:flex;flex-wrap:wrap;gap:24px}
#summary-table th{width:230px;white-space:nowrap}#summary-table td{white-space:pre-line}
table.findings{width:100%}table.findings td.path{width:45%}
"""


class HtmlRenderer(Renderer):
    """``output``: the file the page is written to (``-o``), named in the step summary."""

    def __init__(self, cwd: str, output: str | None = None) -> None:
        self.cwd = cwd
        self.output = output

    def render(self, report: ScanReport, out: TextIO, *, color: bool) -> None:
        page = self.page(report)
        out.write(page)
        if self.output is not None and os.environ.get("GITHUB_STEP_SUMMARY"):
            shown = relative(os.path.abspath(self.output), self.cwd)
            append_step_summary(html_note(report, shown, len(page.encode("utf-8", "replace"))))

    def page(self, report: ScanReport) -> str:
        code = int(report.exit_code)
        head = (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>cachedoctor scan: {_e(verdict(report))}</title><style>{CSS}</style></head><body><main>"
            f'<header class="v{code}"><h1>cachedoctor scan</h1><p id="verdict">{_e(verdict(report))}.</p>'
            f'<p>exit code <span id="exit-code">{code}</span>: {_e(_EXIT.get(code, "error"))}</p></header>'
        )
        parts = [head, self.summary(report), self.by_kind(report), self.by_folder(report)]
        parts += [rank_section(report, self.rel), channel_section(report, self.rel), self.errors(report)]
        parts.append(
            f'<p class="muted">cachedoctor {_e(__version__)}, report schema {_e(SCHEMA)}; '
            "the same scan with --format json holds every number on this page.</p></main></body></html>\n"
        )
        return "".join(parts)

    def rel(self, path: str) -> str:
        return relative(path, self.cwd)

    def summary(self, report: ScanReport) -> str:
        c, sev = report.scan.counts, report.by_severity()
        rows: list[tuple[str, str, str]] = [
            ("targets", "targets", ", ".join(self.rel(t) for t in report.scan.targets)),
            ("mode", "mode", report.scan.mode),
            ("files-read", "files read", str(c.files_read)),
            ("folders", "folders", str(c.folders)),
            ("bytes-read", "bytes read", f"{c.bytes_read} ({human_size(c.bytes_read)})"),
            ("files-skipped", "files skipped", str(c.files_skipped)),
            ("files-reused", "files unchanged since the last scan", str(c.files_reused)),
            ("layout", "layout", report.layout_line or "none: cache files compared with each other"),
            ("findings", "findings", str(len(report.findings))),
            ("files-with-findings", "files with findings", str(len({f.path for f in report.findings}))),
            ("errors", "errors", str(sev["error"])),
            ("warnings", "warnings", str(sev["warning"])),
            ("info", "info", str(sev["info"])),
            ("unreadable", "files that could not be read", str(len(report.scan.errors))),
            ("fail-on", "--fail-on", report.fail_on.value),
            ("exit", "exit code", str(int(report.exit_code))),
            ("elapsed", "seconds", f"{report.scan.elapsed:.3f}"),
        ]
        body = "".join(f'<tr id="s-{key}"><th>{_e(name)}</th><td>{_e(value)}</td></tr>' for key, name, value in rows)
        notes = [*report.notes, *(spot.line() for spot in report.blind_spots)]
        listed = "".join(f"<li>{_e(n)}</li>" for n in notes)
        step = report.next_step(self.rel)
        return (
            f'<section id="summary"><h2>Summary</h2><table id="summary-table">{body}</table>'
            + (f'<ul class="muted">{listed}</ul>' if listed else "")
            + (f'<p id="next-step"><strong>Next:</strong> {_e(step)}</p>' if step else "")
            + "</section>"
        )

    def by_kind(self, report: ScanReport) -> str:
        if not report.findings:
            return '<section id="by-kind"><h2>Findings by kind</h2><p>No findings.</p></section>'
        grouped: dict[str, list[Finding]] = defaultdict(list)
        for f in sorted(report.findings, key=Finding.sort_key):
            grouped[f.kind].append(f)
        rows, bars, lists = [], [], []
        for kind, items in grouped.items():
            sev = items[0].severity.value
            fixes = ", ".join(sorted({f.fix.value for f in items}))
            rows.append(
                f'<tr data-kind="{_e(kind)}"><td>{_e(kind)}</td><td class="{sev}">{sev}</td>'
                f'<td class="n">{len(items)}</td><td class="n">{len({f.path for f in items})}</td><td>{_e(fixes)}</td></tr>'
            )
            bars.append((kind, [sum(1 for f in items if f.severity.value == s) for s, _ in SEVERITY_COLOURS]))
            lists.append(self.kind_list(kind, items))
        chart = stacked_bars(bars, SEVERITY_COLOURS, title="Findings per kind", unit="findings")
        head = '<tr><th>kind</th><th>severity</th><th class="n">findings</th><th class="n">files</th><th>fix</th></tr>'
        return (
            f'<section id="by-kind"><h2>Findings by kind</h2>{chart}<table id="kinds">{head}{"".join(rows)}</table>'
            + "".join(lists)
            + "</section>"
        )

    def kind_list(self, kind: str, items: list[Finding]) -> str:
        rows = []
        for f in items[:PER_KIND]:
            item = f'<br><span class="muted">item: {_e(self.rel(f.source))}</span>' if f.source else ""
            rows.append(
                f'<tr><td class="path">{_e(self.rel(f.path))}</td><td class="msg">{_e(f.message)}{item}</td>'
                f"<td>{_e(f.fix.value)}</td></tr>"
            )
        more = len(items) - PER_KIND
        tail = f'<p class="muted">... and {more} more (--format json lists all)</p>' if more > 0 else ""
        return (
            f'<details open><summary>{_e(kind)} ({len(items)})</summary><table class="findings" data-kind="{_e(kind)}">'
            f"<tr><th>path</th><th>message</th><th>fix</th></tr>{''.join(rows)}</table>{tail}</details>"
        )

    def by_folder(self, report: ScanReport) -> str:
        if not report.findings:
            return ""
        folders: dict[str, list[Finding]] = defaultdict(list)
        for f in report.findings:
            folders[folder_of(f)].append(f)
        ranked = sorted(folders.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        rows, bars = [], []
        for folder, items in ranked:
            counts = [sum(1 for f in items if f.severity.value == s) for s, _ in SEVERITY_COLOURS]
            kinds = ", ".join(sorted({f.kind for f in items}))
            cells = "".join(f'<td class="n">{n}</td>' for n in counts)
            rows.append(
                f'<tr data-folder="{_e(folder)}"><td class="path">{_e(self.rel(folder))}</td>'
                f'<td class="n">{len(items)}</td>{cells}<td>{_e(kinds)}</td></tr>'
            )
            bars.append((self.rel(folder), counts))
        shown = bars[:FOLDER_BARS]
        title = "Findings per folder" + (f" (the {FOLDER_BARS} with most)" if len(bars) > FOLDER_BARS else "")
        chart = stacked_bars(shown, SEVERITY_COLOURS, title=title, unit="findings")
        head = (
            '<tr><th>folder</th><th class="n">findings</th><th class="n">errors</th>'
            '<th class="n">warnings</th><th class="n">info</th><th>kinds</th></tr>'
        )
        return f'<section id="by-folder"><h2>Findings by folder</h2>{chart}<table id="folders">{head}{"".join(rows)}</table></section>'

    def errors(self, report: ScanReport) -> str:
        if not report.scan.errors:
            return ""
        rows = "".join(
            f'<tr><td class="path">{_e(self.rel(p.path))}</td><td>{_e(p.message)}</td></tr>' for p in report.scan.errors
        )
        return (
            '<section id="unreadable"><h2>Files that could not be read</h2><p>The scan is incomplete: '
            f'these were not checked.</p><table id="errors"><tr><th>path</th><th>problem</th></tr>{rows}</table></section>'
        )


def folder_of(finding: Finding) -> str:
    """The folder a finding belongs to: its file's folder, or the folder a run-level finding names."""
    return finding.path if finding.kind in FOLDER_KINDS else os.path.dirname(finding.path)


def _e(text: str) -> str:
    return escape(displayable(text), quote=True)


__all__ = ["FOLDER_KINDS", "HtmlRenderer", "folder_of"]
