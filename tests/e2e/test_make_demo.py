"""``make demo DEMO=/path``: a user's cache is scanned and its repair planned, never copied or changed.

The repair of a copy is for the shipped fixtures only: a user's cache may be hundreds of GB, and
copying it to /tmp unasked filled disks. The real Makefile runs with the real CLI; the venv's
install stamp is taken as current (``-o``), so nothing is installed.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch
from factories import peers, save_pt

ROOT = Path(__file__).resolve().parents[2]


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_demo_on_a_users_cache_plans_the_repair_and_copies_nothing(tmp_path: Path) -> None:
    cache = tmp_path / "my cache"
    peers(cache, dtype=torch.float32)
    save_pt(cache / "leak.pt", torch.randn(7, 4, 8, 8)[1])  # a batch-leak: repair would rewrite it
    before = _files(cache)
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        ["make", "--no-print-directory", "-o", ".venv/.installed-stamp", "-o", "bytecode", "demo", f"DEMO={cache}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    text = " ".join(done.stdout.split())
    assert (
        f"{cache} is your cache: it is scanned and its repair planned (--dry-run); nothing is copied or changed" in text
    )
    assert "batch-leak" in text and "dry run" in text.lower()
    assert _files(cache) == before
    assert list(temp.iterdir()) == []  # no copy in TMPDIR
    assert tempfile.gettempdir() != str(temp)  # (the test process's own temp dir is not the one watched)
