"""Renderers for scan reports. The verdicts (exit codes) are owned by :class:`ScanReport` and
:class:`RepairReport`, in :class:`~cachedoctor.exit_status.ExitStatus` terms."""

from __future__ import annotations

import os

from cachedoctor.report.interface import OutputFormat, Renderer
from cachedoctor.report.outcome import SCHEMA, FailOn, ScanReport
from cachedoctor.report.summary import ScanSummary


def renderer_for(
    fmt: OutputFormat,
    cwd: str | None = None,
    *,
    width: int | None = None,
    quiet: bool = False,
    verbose: bool = False,
    output: str | None = None,
) -> Renderer:
    """The renderer of ``fmt``; ``width``, ``quiet`` and ``verbose`` shape the human table only
    (the machine formats are the same whatever the terminal); ``output``: the file the report
    goes to (``-o``), which the HTML report names in a GitHub step summary."""
    if fmt is OutputFormat.JSON:
        from cachedoctor.report.json_format import JsonRenderer

        return JsonRenderer()
    if fmt is OutputFormat.JSONL:
        from cachedoctor.report.jsonl_format import JsonlRenderer

        return JsonlRenderer()
    cwd = cwd or os.getcwd()
    if fmt is OutputFormat.JUNIT:
        from cachedoctor.report.junit_format import JunitRenderer

        return JunitRenderer(cwd)
    if fmt is OutputFormat.GITHUB:
        from cachedoctor.report.github_format import GithubRenderer

        return GithubRenderer(cwd)
    if fmt is OutputFormat.HTML:
        from cachedoctor.report.html_format import HtmlRenderer

        return HtmlRenderer(cwd, output)
    from cachedoctor.report.table import TableRenderer

    return TableRenderer(cwd, width=width, quiet=quiet, verbose=verbose)


__all__ = ["SCHEMA", "FailOn", "OutputFormat", "Renderer", "ScanReport", "ScanSummary", "renderer_for"]
