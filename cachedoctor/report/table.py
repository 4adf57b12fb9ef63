"""``--format table``: findings grouped by kind, the worst files first, and what to do next."""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from functools import cached_property
from typing import Any, TextIO

from cachedoctor.findings import Finding
from cachedoctor.report.interface import Renderer
from cachedoctor.report.outcome import ScanReport
from cachedoctor.report.plain_table import plain_table
from cachedoctor.report.text import human_size, shown_path, terminal_safe, wrap_line

_PER_KIND = 8  # files listed per kind, and the worst files, unless --verbose (then all)
_WORST = 10
_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


class TableRenderer(Renderer):
    """The human report. ``width``: the columns every line is wrapped to, at word boundaries (a
    path longer than that stands alone on its line, never cut); ``quiet`` (``-q``): only the
    findings, the errors and the verdict; ``verbose`` (``-v``): every file, not the first few."""

    def __init__(
        self, cwd: str | None = None, *, width: int | None = None, quiet: bool = False, verbose: bool = False
    ) -> None:
        self.cwd = cwd or os.getcwd()
        self.width = width or 80
        self.quiet = quiet
        self.verbose = verbose

    def render(self, report: ScanReport, out: TextIO, *, color: bool) -> None:
        console = _Console(out, color, self.width)
        per_kind = None if self.verbose else _PER_KIND
        worst = None if self.verbose else _WORST

        def line(text: str, style: str = "", indent: str | None = None) -> None:
            console.line(wrap_line(text, self.width, indent), style)

        stats = report.scan.counts
        files = f"{_n(stats.files_read, 'file')} read in {_n(stats.folders, 'folder')}"
        unchanged = stats.files_reused - stats.reused_skipped  # cache files: skipped ones are counted apart
        if unchanged > 0:  # the state database vouched for these: their stat is as recorded
            files = (
                f"{_n(stats.files_read, 'file')} in {_n(stats.folders, 'folder')} ({unchanged} unchanged "
                f"since the last scan, {stats.files_read - unchanged} read)"
            )
        # the dataset's own files beside the cache (kohya's images and captions) are not "skipped"
        dataset = f"{_n(stats.files_dataset, 'dataset file')} (images, captions), " if stats.files_dataset else ""
        if not self.quiet:
            line(
                f"cachedoctor scan ({report.scan.mode}): {files}, {human_size(stats.bytes_read)}, "
                f"{stats.files_skipped} skipped, {dataset}{report.scan.elapsed:.2f}s",
                "bold",
            )
            if report.layout_line:
                line(report.layout_line)
            for note in report.notes:
                line(f"  note: {terminal_safe(note)}", "dim", "      ")
            for spot in report.blind_spots:
                line(f"  note: {spot.line()}", "dim", "      ")

        if report.findings:
            widest = max(len(f.fix.value) for f in report.findings) + 1  # and its comma
            grouped: dict[str, list[Finding]] = defaultdict(list)
            for f in report.findings:
                grouped[f.kind].append(f)
            rows = [
                (
                    kind,
                    items[0].severity.value,
                    str(len({f.path for f in items})),
                    ", ".join(sorted({f.fix.value for f in items})),
                )
                for kind, items in grouped.items()
            ]
            if not self.quiet:
                console.blank()
            line("Findings by kind", "italic")
            longest = max(len(k) for k in grouped)
            if longest + len("severity") + len("files") + widest + 9 > self.width:  # too narrow for the columns:
                for kind, sev, count, fixes in rows:  # one line per kind, nothing cropped
                    line(f"  {kind}: {sev}, {count} file(s), fix: {fixes}")
            else:
                out.write(_kinds_table(console, rows, widest))
            for kind, items in grouped.items():
                console.blank()
                line(f"{kind} ({len(items)})", _STYLE[items[0].severity.value])
                for f in items[:per_kind]:
                    source = f" (item: {self._rel(f.source)})" if f.source else ""
                    line(f"  {self._rel(f.path)}: {terminal_safe(f.message)}{source}")
                if per_kind is not None and len(items) > per_kind:
                    line(f"  ... and {len(items) - per_kind} more (-v or --format json lists all)")
            if not self.quiet:
                console.blank()
                line("Worst files", "bold")
                ranked = self._worst(report.findings)
                for path, items in ranked[:worst]:
                    kinds_here = ", ".join(sorted({f.kind for f in items}))
                    line(f"  {self._rel(path)}  [{kinds_here}]")
                if worst is not None and len(ranked) > worst:
                    line(f"  ... and {len(ranked) - worst} more file(s) (-v or --format json lists all)")

        for error in report.scan.errors:
            line(f"could not check {self._rel(error.path)}: {terminal_safe(error.message)}", "bold red")
        counts = report.by_severity()
        if not self.quiet or report.findings or report.scan.errors:
            console.blank()
        info = f", {counts['info']} info" if counts["info"] else ""  # kinds set to info still count
        verdict = (
            f"{counts['error']} error(s), {counts['warning']} warning(s){info} in "
            f"{len({f.path for f in report.findings})} file(s)."
            if report.findings
            else report.clean_verdict()
        )
        hint = "" if self.quiet else report.next_step(self._rel)
        line(f"{verdict} {hint}".strip(), "bold")

    def _rel(self, path: str) -> str:
        return shown_path(path, self.cwd)

    @staticmethod
    def _worst(findings: list[Finding]) -> list[tuple[str, list[Finding]]]:
        by_file: dict[str, list[Finding]] = defaultdict(list)
        for f in findings:
            by_file[f.path].append(f)
        return sorted(by_file.items(), key=lambda kv: (-max(f.severity.rank for f in kv[1]), -len(kv[1]), kv[0]))


class _Console:
    """rich's console for the report, made on first need. A line of plain ASCII text in a report
    without colour is written as rich writes it (the line, a newline, a flush), without rich:
    a clean ``-q`` scan's one line does not import it (some 30 ms), nor does the findings table
    where its cells are plain and the stream is UTF-8 (``boxes``: see :func:`_kinds_table`).
    Anything else, colour, a character rich might treat otherwise (a tab, a control or wide
    character, a name that stdout's encoding may refuse), goes to rich itself."""

    def __init__(self, out: TextIO, color: bool, width: int) -> None:
        self.out, self.color, self.width = out, color, width
        self.plain = not color and sys.modules.get("IPython") is None  # (rich shows a notebook's output itself)
        # rich draws a table's box in ASCII where the stream's encoding is not UTF-8 (and in other
        # characters on a legacy Windows console): the plain table is drawn only where it is
        encoding = (getattr(out, "encoding", "utf-8") or "utf-8").lower()
        self.boxes = self.plain and encoding.startswith("utf") and sys.platform != "win32"

    @cached_property
    def rich(self) -> Any:
        from rich.console import Console

        return Console(
            file=self.out,
            force_terminal=self.color,
            no_color=not self.color,
            color_system="standard" if self.color else None,
            highlight=False,
            markup=False,
            emoji=False,
            width=self.width,
        )

    def line(self, text: str, style: str = "") -> None:
        if self.plain and text.isascii() and all(part.isprintable() for part in text.split("\n")):
            self._write(text + "\n")
        else:
            from rich.text import Text

            self.rich.print(Text(text, style=style), soft_wrap=True)

    def blank(self) -> None:
        if self.plain:
            self._write("\n")
        else:
            self.rich.print()

    def _write(self, text: str) -> None:
        try:
            self.out.write(text)
            self.out.flush()
        except BrokenPipeError:  # what rich does then: stdout onto /dev/null, SystemExit(1)
            self.rich.on_broken_pipe()


def _kinds_table(console: _Console, rows: list[tuple[str, str, str, str]], widest: int) -> str:
    """The findings-by-kind table's lines: written here as rich writes them where the report has
    no colour and the cells are plain (``report/plain_table.py``), by rich otherwise."""
    headers = ("kind", "severity", "files", "fix")
    if console.boxes:
        lines = plain_table(headers, rows, (None, None, None, widest), console.width)
        if lines is not None:
            return "".join(row + "\n" for row in lines)
    from rich.table import Table
    from rich.text import Text

    kinds = Table(show_edge=False, pad_edge=False)
    for column in headers[:3]:
        kinds.add_column(column, no_wrap=True)
    kinds.add_column(headers[3], min_width=widest)  # wraps after a comma, never inside a name
    for kind, sev, count, fixes in rows:
        kinds.add_row(kind, Text(sev, style=_STYLE[sev]), count, fixes)
    with console.rich.capture() as table:
        console.rich.print(kinds)
    return "".join(row.rstrip() + "\n" for row in table.get().splitlines())  # no trailing blanks


def _n(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"
