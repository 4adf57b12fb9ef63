"""``cachedoctor merge``: the parts that ``scan --shard K/N`` wrote, joined into one report.

The report and its exit code are those a single ``scan`` of the whole cache would have given,
judged by the settings the parts were scanned with (they record them); parts from different
runs or arguments, or a missing or doubled shard, are refused in one line (exit 2).
"""

from __future__ import annotations

from typing import Annotated

import typer

from cachedoctor.cli.environment import QUIET, current
from cachedoctor.cli.options import FormatOption, ReportOutputOption, WriteBaselineOption
from cachedoctor.cli.scan_output import merge_and_render
from cachedoctor.report.interface import OutputFormat


def merge(
    parts: Annotated[
        list[str],
        typer.Argument(
            metavar="PART...", help="The parts (files written by scan --shard K/N -o FILE, or their folder)."
        ),
    ],
    fmt: FormatOption = OutputFormat.TABLE,
    output: ReportOutputOption = None,
    write_baseline: WriteBaselineOption = None,
) -> int:
    """Join the parts of a scan split with --shard K/N into the one report a whole scan gives."""
    env = current()
    if fmt is not OutputFormat.TABLE and output is None:
        env.verbosity = min(env.verbosity, QUIET)
    return merge_and_render(parts, fmt, output, write_baseline)


__all__ = ["merge"]
