"""A repair killed at a file's move into the quarantine leaves that file's reason on record.

``quarantine list`` after a killed repair showed 46 of 204 files as ``[unknown: no record]``:
the record was written after the move, and a batch of lossless rewrites held its records in
memory until the batch was replaced. Each real repair below is SIGKILLed right after its next
file lands in the quarantine (``CACHEDOCTOR_TEST_KILL_AT_QUARANTINE=1``: a kill point that only
this variable arms, inside ``Quarantine.keep``/``move``), and is resumed by the next; after every
kill each quarantined file must have its reasons and action.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from factories import peers, save_pt, saved_on

from cachedoctor.repair.quarantine_runs import list_runs

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _cache(folder: Path) -> dict[str, str]:
    """Healthy peers and, per planted file, the finding kind whose reason it must keep."""
    peers(folder, n=4, dtype=torch.float32)
    planted = {}
    for i in range(2):
        save_pt(folder / f"leak{i}.pt", torch.randn(7, 4, 8, 8, generator=torch.Generator().manual_seed(i))[i + 1])
        planted[f"leak{i}.pt"] = "batch-leak"  # clone-storage: a batch of rewrites keeps the old files
        with saved_on("cuda:0"):
            save_pt(folder / f"gpu{i}.pt", torch.randn(4, 8, 8, generator=torch.Generator().manual_seed(10 + i)))
        planted[f"gpu{i}.pt"] = "device-tagged"  # rewrite-cpu: the same batch
        (folder / f"tmpAbCdEfG{i}").write_bytes(b"half a latent")
        planted[f"tmpAbCdEfG{i}"] = "partial-write"  # quarantine: moved out
    return planted


def _repair(cache: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEDOCTOR_TEST_KILL")}
    env.update(PYTHONPATH=str(ROOT), **extra)
    argv = [sys.executable, "-m", "cachedoctor", "repair", str(cache), "--yes", "--no-state"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)


def test_every_file_killed_on_its_way_into_the_quarantine_keeps_its_reason(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    planted = _cache(cache)
    kills = 0
    for _ in range(len(planted) + 2):  # one file further each time; the last run finishes
        done = _repair(cache, CACHEDOCTOR_TEST_KILL_AT_QUARANTINE="1")
        if done.returncode != -signal.SIGKILL:
            assert done.returncode == 0, done.stdout + done.stderr
            break
        kills += 1
        (run,) = list_runs(str(cache))  # one run: each repair resumes the killed one
        unexplained = [f.relpath for f in run.files if not f.reasons or f.action == "unknown"]
        assert unexplained == [], f"after kill {kills}: quarantined without a reason: {unexplained}"
    assert kills == len(planted)  # every file was killed on its way in once
    (run,) = list_runs(str(cache))
    assert {f.relpath: f.reasons for f in run.files} == {name: (kind,) for name, kind in planted.items()}
