"""A remote repair killed with SIGKILL at its two dangerous instants, then finished by recover:
between the verified quarantine copy and the PUT, and between the PUT and the journal's commit.
The lock object the killed repair left is named by the next repair, and cleared by recover.

The repair is a real subprocess (the library's flow, as ``cachedoctor repair s3://`` runs it),
killed by its own crash point (``CACHEDOCTOR_TEST_KILL_AT_POINT``, ``repair/swap.py``); the
promises checked: the object ends healthy, its old bytes are in the quarantine exactly once, the
records say where they came from, the lock object is gone, the journal's run is finished.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from factories import latent, pt_bytes, saved_on
from s3_repair_helpers import Bucket, kinds

from cachedoctor.repair.journal import interrupted_run
from cachedoctor.repair.prefix_lock import PrefixLocked, journal_home
from cachedoctor.repair.store_session import StoreSession

pytestmark = pytest.mark.slow
TESTS = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent(
    """
    import sys
    from s3_repair_helpers import Bucket, findings
    import boto3
    from cachedoctor.repair.store_session import StoreSession, listed, plan_listed

    bucket = Bucket(boto3.client("s3"), sys.argv[1])
    store, location = bucket.store, bucket.location
    with StoreSession(store, location, ["repair", location.url]) as session:
        plan = plan_listed(findings(bucket, *sys.argv[2:]), location, listed(store, location))
        session.act(plan)
    print(session.run_id)
    """
)


@pytest.fixture
def bucket(s3_server: object, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Bucket:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    return Bucket(s3_server.client(), s3_bucket)  # type: ignore[attr-defined]


def child(bucket: Bucket, *rels: str, kill_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent)]))
    if kill_at:
        env["CACHEDOCTOR_TEST_KILL_AT_POINT"] = kill_at
    return subprocess.run(
        [sys.executable, "-c", CHILD, bucket.name, *rels], env=env, capture_output=True, text=True, timeout=120
    )


def cuda_tagged(seed: int) -> bytes:
    with saved_on("cuda:0"):
        return pt_bytes(latent(seed=seed))


@pytest.mark.parametrize("point", ["remote-after-copy", "remote-after-put"])
def test_recover_finishes_a_repair_killed_around_its_put(bucket: Bucket, point: str) -> None:
    old = {"a.pt": cuda_tagged(1), "b.pt": cuda_tagged(2)}
    for rel, data in old.items():
        bucket.put(rel, data)

    killed = child(bucket, *old, kill_at=point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert bucket.keys(".cachedoctor/lock") == [".cachedoctor/lock"]  # left by the kill
    run = interrupted_run(journal_home(bucket.location))
    assert run is not None and len(run.unfinished) == 2
    with pytest.raises(PrefixLocked) as locked:  # a plain repair names the dead holder and the way out
        StoreSession(bucket.store, bucket.location).__enter__()
    assert f"run {run.run_id}, pid " in locked.value.message
    assert f"that process is gone: `cachedoctor recover {bucket.url()} --apply` clears the lock" in locked.value.message

    with StoreSession(bucket.store, bucket.location, ["recover"], take_stale=True, command="recover") as session:
        results = session.finish_interrupted()

    assert session.run_id == run.run_id
    assert sorted(r.state.value for r in results) == ["verified", "verified"]
    for rel, data in old.items():
        assert kinds(bucket, rel) == []
        assert bucket.get(bucket.url(f".cachedoctor/quarantine/{run.run_id}/{rel}")) == data
    assert bucket.keys(".cachedoctor/") == [  # each old version once, its records, no lock
        f".cachedoctor/quarantine/{run.run_id}/.records.jsonl",
        f".cachedoctor/quarantine/{run.run_id}/a.pt",
        f".cachedoctor/quarantine/{run.run_id}/b.pt",
    ]
    records = {r["path"]: r for r in bucket.records(run.run_id)}
    assert {p: (r["original"], r["reasons"]) for p, r in records.items()} == {
        rel: (bucket.url(rel), ["device-tagged"]) for rel in old
    }
    assert interrupted_run(journal_home(bucket.location)) is None
