"""``quarantine list`` as text: a summary per run, or one line per file (local and s3:// alike).

The summary is two lines a run however many files it holds (a killed repair's run of 204 files
printed 204 lines): its id, when it ran, files, size, then the files counted by reason. A run
named on the command line, or ``--all``, is listed file by file.
"""

from __future__ import annotations

from collections import Counter
from typing import TextIO

from cachedoctor.repair.quarantine import QuarantineRun
from cachedoctor.repair.run_ids import run_time
from cachedoctor.report.text import human_size, wrap_line

#: what ``list`` prints under its summaries, so the files are one command away
MORE = (
    "One line per file: `cachedoctor quarantine list RUN` (RUN: a run's id, a prefix of it, or latest), "
    "or --all for every run."
)
NO_RECORD = "no record"  # a file whose record was lost (written before its move since issue 28)


def write_summary(run: QuarantineRun, indent: str, width: int, out: TextIO) -> None:
    """Id, time, files and size; then the files counted by reason, the commonest first."""
    when = run_time(run.run_id)
    print(
        f"{indent}{run.run_id}{f' ({when})' if when else ''}: {len(run.files)} file(s), {human_size(run.size)}",
        file=out,
    )
    counts = Counter(reason for item in run.files for reason in item.reasons or (NO_RECORD,))
    if counts:
        why = ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        print(wrap_line(f"{indent}  why: {why}", width), file=out)


def write_files(run: QuarantineRun, indent: str, width: int, out: TextIO) -> None:
    """One line per file; at ``width`` the ``[action: why]`` goes under its path."""
    print(f"{indent}{run.run_id}: {len(run.files)} file(s), {human_size(run.size)}", file=out)
    for item in run.files:
        why = ",".join(item.reasons) or NO_RECORD
        line, tag = f"{indent}  {item.relpath}", f"[{item.action}: {why}]"
        if len(line) + 2 + len(tag) <= width:
            print(f"{line}  {tag}", file=out)
        else:  # the path whole on its line (it is what gets copied), the reason under it
            print(f"{line}\n{indent}      {tag}", file=out)


def write_runs(runs: list[QuarantineRun], indent: str, every: bool, width: int, out: TextIO) -> None:
    """Each run as a summary, or with ``every`` file by file."""
    for run in runs:
        (write_files if every else write_summary)(run, indent, width, out)


__all__ = ["MORE", "write_files", "write_runs", "write_summary"]
