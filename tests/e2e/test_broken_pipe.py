"""A reader that stops early (``cachedoctor ... | head -n 1``) gets no traceback on stderr."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv", [[], ["explain"], ["scan", str(ROOT / "fixtures" / "caches")]])
def test_a_closed_pipe_ends_quietly(argv: list[str]) -> None:
    """The pipe is closed before cachedoctor writes anything, so every write meets EPIPE."""
    reader, writer = os.pipe()
    os.close(reader)
    with open(writer, "wb") as out:
        done = subprocess.run(
            [sys.executable, "-m", "cachedoctor", *argv], stdout=out, stderr=subprocess.PIPE, text=True, timeout=60
        )
    # nothing but the progress lines stderr gets when it is not a terminal (cli/progress_lines.py)
    assert [line for line in done.stderr.splitlines() if not line.startswith("cachedoctor: scan: ")] == []
    assert done.returncode == 1
