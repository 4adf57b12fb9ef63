"""Run the CLI in-process with an injected environment (what every new test uses)."""

from __future__ import annotations

import io
import json

from cachedoctor.cli.app import run
from cachedoctor.cli.environment import Environment


def cli(*argv: str, cwd: str = "/", columns: int | None = None) -> tuple[int, str, str]:
    """``(exit code, stdout, stderr)`` of ``cachedoctor *argv``; ``columns``: the terminal's
    width (human output is wrapped to it; default ``$COLUMNS`` or 80)."""
    out, err = io.StringIO(), io.StringIO()
    env = Environment(
        stdout=out, stderr=err, stdout_isatty=False, stderr_isatty=False, stdin_isatty=False, cwd=cwd, columns=columns
    )
    return run(list(argv), env), out.getvalue(), err.getvalue()


def scan_json(*argv: str) -> dict:
    """The JSON report of ``cachedoctor scan --format json *argv`` (stderr must be empty)."""
    code, out, err = cli("scan", "--format", "json", *argv)
    assert err == "", err
    return json.loads(out)
