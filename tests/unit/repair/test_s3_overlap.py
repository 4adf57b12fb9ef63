"""Repairs of overlapping remote prefixes are kept apart by their locks, and a repair's records
list only what it really replaced: against moto's S3 server, one planted lock or race per test."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import cli
from factories import latent, pt_bytes, saved_on
from s3_repair_helpers import Bucket, findings, kinds

from cachedoctor.repair.model import ItemState
from cachedoctor.repair.prefix_lock import PrefixLock, PrefixLocked
from cachedoctor.repair.quarantine_restore import restore
from cachedoctor.repair.quarantine_runs import list_runs
from cachedoctor.repair.store_act import CHANGED
from cachedoctor.repair.store_session import StoreSession, listed, plan_listed
from cachedoctor.stores.interface import Location


@pytest.fixture
def bucket(s3_server: object, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Bucket:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))  # the local journal
    return Bucket(s3_server.client(), s3_bucket, prefix="nest")  # type: ignore[attr-defined]


def cuda_tagged(seed: int = 7) -> bytes:
    with saved_on("cuda:0"):
        return pt_bytes(latent(seed=seed))


def other_lock(bucket: Bucket, key: str, run_id: str) -> PrefixLock:
    """Another repair (alive: this process) holding the prefix ``key`` of the bucket."""
    lock = PrefixLock(bucket.store, Location(bucket.location.scheme, bucket.name, key), run_id)
    lock.acquire()
    return lock


@pytest.mark.parametrize(
    ("held", "repaired"),
    [("nest/t", "nest"), ("nest", "nest/t"), ("", "nest/t")],
    ids=["a-prefix-under-it", "its-parent", "the-bucket-root"],
)
def test_a_repair_refuses_while_an_overlapping_prefix_is_locked(bucket: Bucket, held: str, repaired: str) -> None:
    old = cuda_tagged()
    bucket.put("t/a.pt", old)
    other = other_lock(bucket, held, "run-of-the-other")
    url = f"s3://{bucket.name}/{repaired}"

    code, out, err = cli("repair", "--yes", url)

    other_url = f"s3://{bucket.name}/{held}/.cachedoctor/lock".replace(f"{bucket.name}//", f"{bucket.name}/")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1
    assert err.startswith(f"cachedoctor: error: {other_url}: a repair of the overlapping prefix ")
    assert "(run run-of-the-other, pid " in err
    assert bucket.get(bucket.url("t/a.pt")) == old  # nothing written
    assert bucket.client.list_objects_v2(Bucket=bucket.name)["KeyCount"] == 2  # its own lock released
    other.release()


def test_of_two_overlapping_repairs_that_start_together_the_later_lets_go(bucket: Bucket) -> None:
    store = bucket.store
    first = other_lock(bucket, "nest", "run-a")
    later = other_lock(bucket, "nest/t", "run-b")  # both hold their own lock: now each looks

    with pytest.raises(PrefixLocked) as stopped:
        later.exclude_overlaps([])  # it sees the earlier one above it, and lets go
    assert stopped.value.path == bucket.url(".cachedoctor/lock")
    assert bucket.keys("t/.cachedoctor/") == []
    first.exclude_overlaps(listed(store, first.location))  # then the earlier one goes on
    assert bucket.keys(".cachedoctor/") == [".cachedoctor/lock"]
    first.release()


def test_the_earlier_of_two_stops_when_the_later_never_saw_it(bucket: Bucket) -> None:
    first = other_lock(bucket, "nest", "run-a")
    later = other_lock(bucket, "nest/t", "run-b")  # it looked before the first one's lock was there
    first.outwait = 0.0

    with pytest.raises(PrefixLocked) as stopped:
        first.exclude_overlaps(listed(bucket.store, first.location))
    assert stopped.value.path == bucket.url("t/.cachedoctor/lock")
    assert bucket.keys(".cachedoctor/") == []  # released: the later one goes on alone
    later.release()


def test_the_records_list_only_what_was_replaced_when_another_writer_wins(bucket: Bucket) -> None:
    bucket.put("a.pt", cuda_tagged(1))
    bucket.put("b.pt", cuda_tagged(2))
    theirs = pt_bytes(latent(seed=9))
    store, location = bucket.store, bucket.location
    put_if_match = store.put_if_match

    def another_writer_first(url: str, data: bytes, etag: str):  # type: ignore[no-untyped-def]
        if url.endswith("/b.pt"):  # the trainer rewrites b.pt between repair's copy and its PUT
            bucket.put("b.pt", theirs)
        return put_if_match(url, data, etag)

    store.put_if_match = another_writer_first  # type: ignore[method-assign]
    try:
        with StoreSession(store, location, ["repair", location.url]) as session:
            plan = plan_listed(findings(bucket, "a.pt", "b.pt"), location, listed(store, location))
            results = {r.path: (r.state, r.message) for r in session.act(plan)}
    finally:
        del store.put_if_match  # type: ignore[method-assign]

    assert results[bucket.url("b.pt")] == (ItemState.SKIPPED, CHANGED)
    assert bucket.get(bucket.url("b.pt")) == theirs and kinds(bucket, "a.pt") == []
    assert [r["path"] for r in bucket.records(session.run_id)] == ["a.pt"]
    assert bucket.keys(f".cachedoctor/quarantine/{session.run_id}/") == [
        f".cachedoctor/quarantine/{session.run_id}/.records.jsonl",
        f".cachedoctor/quarantine/{session.run_id}/a.pt",
    ]
    (run,) = list_runs(location.url, store)
    assert [f.relpath for f in run.files] == ["a.pt"]
    done, _ = restore(location.url, run, "restore-run", store=store)  # not refused: b.pt is not in it
    assert done == [(bucket.url(f".cachedoctor/quarantine/{session.run_id}/a.pt"), bucket.url("a.pt"))]
    assert bucket.get(bucket.url("a.pt")) == cuda_tagged(1) and bucket.get(bucket.url("b.pt")) == theirs


def test_an_object_another_writer_broke_during_the_repair_is_theirs_not_worse(
    bucket: Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket.put("a.pt", cuda_tagged(1))
    bucket.put("b.pt", cuda_tagged(2))
    torn = pt_bytes(latent(seed=9))[:-40]
    store = bucket.store  # the one the CLI's repair gets (one client per bucket and settings)
    put_if_match = store.put_if_match

    def another_writer_first(url: str, data: bytes, etag: str):  # type: ignore[no-untyped-def]
        if url.endswith("/b.pt"):  # a writer dies mid-way through b.pt between repair's scan and its PUT
            bucket.put("b.pt", torn)
        return put_if_match(url, data, etag)

    monkeypatch.setattr(store, "put_if_match", another_writer_first)
    code, out, err = cli("repair", "--yes", bucket.url(), columns=400)

    assert (code, err) == (1, "")
    assert "done: 1 verified, 1 skipped, 0 blocked, 0 failed" in out
    assert "worse:" not in out and "please report" not in out
    assert "changed by another writer during the repair (not by this one): 1 object(s)" in out
    assert (
        "  changed by another writer: during the repair: neither the version it scanned nor the one it wrote; "
        "the next scan judges it"
    ) in out
    assert bucket.get(bucket.url("b.pt")) == torn and kinds(bucket, "a.pt") == []
