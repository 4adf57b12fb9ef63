"""What ``scan`` (and ``merge``) hand the terminal: the report, a shard's part, or nothing.

Split from ``scan.py`` so that ``cachedoctor merge`` renders a merged report exactly as ``scan``
renders a whole one, and so that the three ways a scan can run stay readable there: whole, as
one rank of a ``torchrun`` job (rank 0 prints), or as one shard of a job array (``--shard``:
the part is the output, and ``merge`` gives the verdict).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cachedoctor.cli.environment import NORMAL, current
from cachedoctor.cli.report_file import write_report
from cachedoctor.errors import PathError, UsageError
from cachedoctor.exit_status import ExitStatus
from cachedoctor.report.interface import OutputFormat

if TYPE_CHECKING:
    from cachedoctor.report import ScanReport
    from cachedoctor.settings import Settings
    from cachedoctor.sharding.ranks import RankGroup


def render(report: ScanReport, fmt: OutputFormat, output: str | None) -> int:
    """Print (or write to ``output``) the report; the exit code it decides."""
    from cachedoctor.report import renderer_for
    from cachedoctor.report.text import terminal_safe

    env = current()
    if report.nothing_to_check:  # one line, exit 2, no report: there was nothing to report on
        raise PathError(*report.empty_problem())
    quiet, verbose = env.verbosity < NORMAL, env.verbosity > NORMAL
    renderer = renderer_for(fmt, env.cwd, width=env.width, quiet=quiet, verbose=verbose, output=output)
    if output is None:
        if report.suppressed is not None and fmt is OutputFormat.TABLE and env.verbosity >= NORMAL:
            done = (
                f"recorded in {report.baseline}; later scans with --baseline {report.baseline} hide them"
                if report.baseline_written
                else f"left out by {report.baseline}"
            )
            print(env.wrap(f"baseline: {report.suppressed} finding(s) {done}"), file=env.stdout)
        renderer.render(report, env.stdout, color=env.color(env.stdout_isatty))
    else:
        error = write_report(output, lambda out: renderer.render(report, out, color=False))
        if error:
            env.error(error)
            return ExitStatus.ERROR
        if fmt is not OutputFormat.TABLE and env.stdout_isatty:
            table = renderer_for(OutputFormat.TABLE, env.cwd, width=env.width, quiet=quiet, verbose=verbose)
            table.render(report, env.stdout, color=env.color(env.stdout_isatty))
    for problem in report.scan.errors:
        hint = (
            "scan again (the store did not serve it)"
            if "://" in problem.path
            else "fix its permissions or move it out of the cache, then scan again"
        )
        env.error(f"{terminal_safe(problem.path)}: {terminal_safe(problem.message)}; {hint}")
    return report.exit_code


def merge_and_render(parts: Sequence[str], fmt: OutputFormat, output: str | None, write_baseline: str | None) -> int:
    """``cachedoctor merge`` / ``scan --merge``: the parts' report, as the whole scan's."""
    from cachedoctor.api_parts import load_parts, merge_parts

    if output is not None:
        from cachedoctor.cli.report_file import check_writable

        if unwritable := check_writable(output):
            raise UsageError(unwritable)
    return render(merge_parts(load_parts(parts), write_baseline=write_baseline), fmt, output)


def write_part(
    settings: Settings,
    shard: str,
    output: str | None,
    trainer: Mapping[str, Any],
    baseline: str | None,
    write_baseline: str | None,
) -> int:
    """``scan --shard K/N``: scan the shard and write its part (to ``output``, else stdout).
    Exit 0 once it is written: the verdict is the merge's, over every part."""
    from cachedoctor.api_parts import scan_shard
    from cachedoctor.sharding.interface import parse_shard

    env = current()
    part = scan_shard(settings, parse_shard(shard), baseline=baseline, write_baseline=write_baseline, **trainer)
    doc = part.to_json()
    if output is None:
        json.dump(doc, env.stdout, separators=(",", ":"))
        env.stdout.write("\n")
        return ExitStatus.CLEAN
    error = write_report(output, lambda out: json.dump(doc, out, separators=(",", ":")))
    if error:
        env.error(error)
        return ExitStatus.ERROR
    return ExitStatus.CLEAN


def split_over_ranks(environ: Mapping[str, str] | None = None) -> bool:
    """Whether a launcher started this process as one of several ranks (``torchrun`` and
    ``accelerate launch`` set ``RANK`` and ``WORLD_SIZE``)."""
    env = os.environ if environ is None else environ
    try:
        world = int(env.get("WORLD_SIZE", "1"))
    except ValueError:
        return False
    return world > 1 and "RANK" in env


def join_ranks(environ: Mapping[str, str] | None = None) -> RankGroup | None:
    """This process's rank group, when it is one of several ranks; else ``None``."""
    env = os.environ if environ is None else environ
    if not split_over_ranks(env):
        return None
    from cachedoctor.sharding.ranks import RankGroup

    return RankGroup.join(env)


__all__ = ["join_ranks", "merge_and_render", "render", "split_over_ranks", "write_part"]
