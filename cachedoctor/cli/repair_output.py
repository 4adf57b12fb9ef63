"""``--format`` and ``--output`` of ``repair`` and ``recover``: the text for people, or one
``cachedoctor.repair/1`` JSON document (docs/repair-json.md) to stdout or a file.

In JSON mode stdout carries the document and nothing else, and nothing is asked: a run that
would change files needs ``--yes`` (checked before any work, exit 2 without it). With
``--output FILE`` the document is written whole or not at all, as ``scan --output`` writes, and
a terminal on stdout still gets the text.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any

import typer

from cachedoctor.cli.environment import QUIET, Environment, current
from cachedoctor.errors import UsageError
from cachedoctor.exit_status import ExitStatus


class RepairFormat(str, enum.Enum):
    """What ``repair`` and ``recover`` write to stdout: text for people, or one JSON document."""

    TEXT = "text"
    JSON = "json"


RepairFormatOption = Annotated[
    RepairFormat,
    typer.Option(
        "--format",
        help="text, or json: one cachedoctor.repair/1 document (the plan and the result); "
        "json never asks, so it needs --yes to change files.",
        case_sensitive=False,
    ),
]
RepairOutputOption = Annotated[
    str | None,
    typer.Option("--output", "-o", metavar="FILE", help="With --format json: write the document to FILE."),
]


def output_mode(env: Environment, fmt: RepairFormat, output: str | None, consent: bool, how: str) -> bool:
    """Check ``--format``/``--output`` before any work; whether the text for people is printed.

    The JSON document is for a program, so nothing else goes to stdout and nothing is asked:
    without ``consent`` (``--yes``, or a run that changes nothing) it stops with ``how``. With
    ``--output FILE`` the document goes there, and a terminal on stdout still gets the text.
    """
    if fmt is RepairFormat.TEXT:
        if output is not None:
            raise UsageError("--output writes the JSON document; add --format json")
        return True
    if not consent:
        raise UsageError(f"--format json never asks before changing files: {how}")
    if output is not None:
        from cachedoctor.cli.report_file import check_writable

        problem = check_writable(output)
        if problem:
            raise UsageError(problem)
    human = output is not None and bool(env.stdout_isatty)
    if not human:
        env.verbosity = QUIET  # no progress either: a machine format gets the document alone
    return human


def emit(report: Any, command: str, targets: list[str], fmt: RepairFormat, output: str | None) -> int:
    """Write the JSON document (``--format json``) to stdout or ``--output``; the exit code."""
    import json

    from cachedoctor.cli.report_file import write_report
    from cachedoctor.report.repair_json import repair_document

    if fmt is RepairFormat.TEXT:
        return report.exit_code
    env = current()
    text = json.dumps(repair_document(report, command, targets), indent=2) + "\n"
    if output is None:
        env.stdout.write(text)
        return report.exit_code
    error = write_report(output, lambda out: print(text, end="", file=out))
    if error:
        env.error(error)
        return ExitStatus.ERROR
    return report.exit_code


__all__ = ["RepairFormat", "RepairFormatOption", "RepairOutputOption", "emit", "output_mode"]
