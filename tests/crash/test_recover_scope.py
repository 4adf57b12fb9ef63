"""``recover --apply`` resumes an interrupted ``repair --only KIND`` with that run's own scope:
it finishes what the run was asked to do and nothing more (a batch leak and a torn archive that
``--only`` left out stay as they are), on disk and in a bucket alike. The repair is a real
subprocess SIGKILLed at its first crash point (``CACHEDOCTOR_TEST_KILL_AT``, ``repair/swap.py``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cli_run import cli
from factories import latent, leaked_view, pt_bytes, saved_on
from s3_repair_helpers import Bucket, kinds

pytestmark = pytest.mark.slow


def cuda_tagged() -> bytes:
    with saved_on("cuda:0"):
        return pt_bytes(latent(seed=1))


LEAK = pt_bytes(leaked_view(torch.randn(4, 4, 8, 8).to(torch.bfloat16), 1))
TORN = pt_bytes(latent(seed=3))[:-40]


def killed_repair(target: str, **env: str) -> None:
    """``repair --yes --only device-tagged TARGET``, SIGKILLed at its first crash point."""
    done = subprocess.run(
        [sys.executable, "-m", "cachedoctor", "repair", "--yes", "--only", "device-tagged", target],
        env=dict(os.environ, **env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr


@pytest.fixture
def bucket(s3_server: object, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Bucket:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))  # the local journal
    return Bucket(s3_server.client(), s3_bucket)  # type: ignore[attr-defined]


def test_recover_of_a_remote_repair_keeps_its_only(bucket: Bucket) -> None:
    bucket.put("a.pt", cuda_tagged())
    bucket.put("v.pt", LEAK)
    bucket.put("t.pt", TORN)
    killed_repair(bucket.url(), CACHEDOCTOR_TEST_KILL_AT_POINT="remote-after-copy")

    code, out, err = cli("recover", bucket.url(), columns=400)
    assert (code, err) == (1, "")
    assert "  --apply resumes it with its own scope: --only device-tagged" in out

    code, out, err = cli("recover", "--apply", "--yes", bucket.url(), columns=400)
    assert err == "", out
    assert "done: 1 verified, 0 skipped, 0 blocked, 0 failed" in out
    assert kinds(bucket, "a.pt") == []  # the interrupted item, finished
    assert bucket.get(bucket.url("v.pt")) == LEAK  # left out by --only: untouched
    assert bucket.get(bucket.url("t.pt")) == TORN
    assert [k for k in bucket.keys(".cachedoctor/") if not k.endswith(".records.jsonl")] == [
        k for k in bucket.keys(".cachedoctor/quarantine/") if k.endswith("/a.pt")
    ]


def test_recover_of_a_local_repair_keeps_its_only(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "a.pt").write_bytes(cuda_tagged())
    (cache / "v.pt").write_bytes(LEAK)
    (cache / "t.pt").write_bytes(TORN)
    killed_repair(str(cache), CACHEDOCTOR_TEST_KILL_AT_POINT="mid-write")
    (temp,) = [p.name for p in cache.iterdir() if p.name.startswith(".cachedoctor-")]  # its torn write

    code, out, err = cli("recover", str(cache), columns=400)
    assert err == "" and code == 1
    assert "  --apply resumes it with its own scope: --only device-tagged" in out

    code, out, err = cli("recover", "--apply", "--yes", str(cache), columns=400)
    assert err == "", out
    assert "done: 2 verified, 0 skipped, 0 blocked, 0 failed" in out  # the item, and its temp file
    assert (
        "before -> after: batch-leak 1 -> 1, corrupt-archive 1 -> 1, device-tagged 1 -> 0, partial-write 1 -> 0" in out
    )
    assert (cache / "v.pt").read_bytes() == LEAK
    assert (cache / "t.pt").read_bytes() == TORN
    assert temp not in {p.name for p in cache.iterdir()}  # the killed run's own torn write: cleaned up
    assert cli("scan", "--deep", "--format", "json", str(cache))[1].count('"kind": "device-tagged"') == 0
