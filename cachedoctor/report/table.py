"""``--format table``: findings grouped by kind, the worst files first, and what to do next."""

from __future__ import annotations

import os
from collections import defaultdict
from typing import TextIO

from cachedoctor.findings import Finding
from cachedoctor.report.interface import Renderer
from cachedoctor.report.outcome import ScanReport
from cachedoctor.report.text import human_size

_PER_KIND = 8
_WORST = 10
_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


class TableRenderer(Renderer):
    def __init__(self, cwd: str | None = None) -> None:
        self.cwd = cwd or os.getcwd()

    def render(self, report: ScanReport, out: TextIO, *, color: bool) -> None:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        console = Console(
            file=out,
            force_terminal=color,
            no_color=not color,
            highlight=False,
            width=None if color else 120,
            soft_wrap=not color,
        )
        stats = report.scan.counts
        files = f"{_n(stats.files_read, 'file')} read in {_n(stats.folders, 'folder')}"
        unchanged = stats.files_reused - stats.reused_skipped  # cache files: skipped ones are counted apart
        if unchanged > 0:  # the state database vouched for these: their stat is as recorded
            files = (
                f"{_n(stats.files_read, 'file')} in {_n(stats.folders, 'folder')} ({unchanged} unchanged "
                f"since the last scan, {stats.files_read - unchanged} read)"
            )
        console.print(
            Text(
                f"cachedoctor scan ({report.scan.mode}): {files}, {human_size(stats.bytes_read)}, "
                f"{stats.files_skipped} skipped, {report.scan.elapsed:.2f}s",
                style="bold",
            )
        )
        if report.layout_line:
            console.print(Text(report.layout_line))
        for note in report.notes:
            console.print(Text(f"  note: {note}", style="dim"))

        if report.findings:
            kinds = Table(title="Findings by kind", title_justify="left", show_edge=False, pad_edge=False)
            for column in ("kind", "severity", "files", "fix"):
                kinds.add_column(column)
            grouped: dict[str, list[Finding]] = defaultdict(list)
            for f in report.findings:
                grouped[f.kind].append(f)
            for kind, items in grouped.items():
                sev = items[0].severity.value
                fixes = ", ".join(sorted({f.fix.value for f in items}))
                kinds.add_row(kind, Text(sev, style=_STYLE[sev]), str(len({f.path for f in items})), fixes)
            console.print()
            console.print(kinds)
            for kind, items in grouped.items():
                console.print()
                console.print(Text(f"{kind} ({len(items)})", style=_STYLE[items[0].severity.value]))
                for f in items[:_PER_KIND]:
                    source = f" (item: {self._rel(f.source)})" if f.source else ""
                    console.print(Text(f"  {self._rel(f.path)}: {f.message}{source}"))
                if len(items) > _PER_KIND:
                    console.print(Text(f"  ... and {len(items) - _PER_KIND} more (--format json lists all)"))
            console.print()
            console.print(Text("Worst files", style="bold"))
            worst = self._worst(report.findings)
            for path, items in worst[:_WORST]:
                kinds_here = ", ".join(sorted({f.kind for f in items}))
                console.print(Text(f"  {self._rel(path)}  [{kinds_here}]"))
            if len(worst) > _WORST:
                console.print(Text(f"  ... and {len(worst) - _WORST} more file(s) (--format json lists all)"))

        for error in report.scan.errors:
            console.print(Text(f"could not check {self._rel(error.path)}: {error.message}", style="bold red"))
        counts = report.by_severity()
        console.print()
        info = f", {counts['info']} info" if counts["info"] else ""  # kinds set to info still count
        verdict = (
            f"{counts['error']} error(s), {counts['warning']} warning(s){info} in "
            f"{len({f.path for f in report.findings})} file(s)."
            if report.findings
            else "No findings."
        )
        console.print(Text(f"{verdict} {report.next_step(self._rel)}".strip(), style="bold"))

    def _rel(self, path: str) -> str:
        rel = os.path.relpath(path, self.cwd)
        return path if rel.startswith("..") else rel

    @staticmethod
    def _worst(findings: list[Finding]) -> list[tuple[str, list[Finding]]]:
        by_file: dict[str, list[Finding]] = defaultdict(list)
        for f in findings:
            by_file[f.path].append(f)
        return sorted(by_file.items(), key=lambda kv: (-max(f.severity.rank for f in kv[1]), -len(kv[1]), kv[0]))


def _n(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"
