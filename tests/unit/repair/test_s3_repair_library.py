"""Repair of a remote cache as a library (``repair/remote_*.py``) against moto's S3 server: one
planted defect per test, the object replaced by one PUT (or moved out), the old bytes in the
quarantine byte for byte with their records, restore giving them back, never worse."""

from __future__ import annotations

import io
import os
import socket
from pathlib import Path

import pytest
import torch
from factories import latent, leaked_view, pt_bytes, saved_on
from s3_repair_helpers import Bucket, findings, kinds

from cachedoctor.repair.model import ActionKind, ItemState
from cachedoctor.repair.prefix_lock import PrefixLock, PrefixLocked
from cachedoctor.repair.quarantine_restore import RestoreRefused, restore
from cachedoctor.repair.quarantine_runs import list_runs
from cachedoctor.repair.store_session import NO_RECOMPUTE, NO_SOURCE, StoreSession, listed, plan_listed


@pytest.fixture
def bucket(s3_server: object, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Bucket:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))  # the local journal
    return Bucket(s3_server.client(), s3_bucket)  # type: ignore[attr-defined]


def cuda_tagged() -> bytes:
    with saved_on("cuda:0"):
        return pt_bytes(latent(seed=7))


def repair(bucket: Bucket, *rels: str):  # type: ignore[no-untyped-def]
    """List, judge, plan and act as ``cachedoctor repair`` does; the session and its results."""
    store, location = bucket.store, bucket.location
    with StoreSession(store, location, ["repair", location.url]) as session:
        infos = listed(store, location)
        plan = plan_listed(findings(bucket, *rels), location, infos)
        results = session.act(plan)
    return session, plan, results


def test_a_cuda_tagged_latent_is_rewritten_by_one_put_and_its_old_bytes_kept(bucket: Bucket) -> None:
    old = cuda_tagged()
    healthy = pt_bytes(latent(seed=1))
    bucket.put("a.pt", old)
    bucket.put("b.pt", healthy)
    assert kinds(bucket, "a.pt") == ["device-tagged"]

    session, plan, results = repair(bucket, "a.pt", "b.pt")

    assert [(a.kind, a.path) for a in plan.actions] == [(ActionKind.REWRITE_CPU, bucket.url("a.pt"))]
    assert [(r.state, r.message) for r in results] == [(ItemState.VERIFIED, "written and checked")]
    kept = f".cachedoctor/quarantine/{session.run_id}/a.pt"
    assert bucket.get(bucket.url(kept)) == old
    assert kinds(bucket, "a.pt") == []  # the rescan is clean
    assert torch.equal(torch.load(io.BytesIO(bucket.get(bucket.url("a.pt")) or b""), weights_only=True), latent(seed=7))
    assert bucket.get(bucket.url("b.pt")) == healthy  # never worse: the healthy object untouched
    (record,) = bucket.records(session.run_id)
    assert (record["path"], record["original"], record["reasons"], record["action"], record["size"]) == (
        "a.pt",
        bucket.url("a.pt"),
        ["device-tagged"],
        "rewrite-cpu",
        len(old),
    )
    assert record["replaced_by"] == bucket.client.head_object(Bucket=bucket.name, Key="cache/a.pt")["ETag"].strip('"')
    assert bucket.keys(".cachedoctor/lock") == []  # released


def test_a_view_of_a_batch_is_cloned_and_restore_gives_the_old_bytes_back(bucket: Bucket) -> None:
    old = pt_bytes(leaked_view(torch.randn(4, 4, 8, 8).to(torch.bfloat16), 1))
    bucket.put("sub/v.pt", old)
    assert kinds(bucket, "sub/v.pt") == ["batch-leak"]

    session, plan, results = repair(bucket, "sub/v.pt")

    assert [a.kind for a in plan.actions] == [ActionKind.CLONE_STORAGE]
    assert [r.state for r in results] == [ItemState.VERIFIED]
    assert kinds(bucket, "sub/v.pt") == []
    assert len(bucket.get(bucket.url("sub/v.pt")) or b"") < len(old)

    (found,) = list_runs(bucket.location.url, bucket.store)
    assert (found.run_id, [f.relpath for f in found.files]) == (session.run_id, ["sub/v.pt"])
    assert found.files[0].reasons == ("batch-leak",)
    done, aside = restore(bucket.location.url, found, "restore-1", store=bucket.store)
    assert done == [(bucket.url(f".cachedoctor/quarantine/{session.run_id}/sub/v.pt"), bucket.url("sub/v.pt"))]
    assert bucket.get(bucket.url("sub/v.pt")) == old
    assert aside  # the repaired version was kept first: a restore loses nothing either
    assert bucket.keys(".cachedoctor/quarantine/") == [
        ".cachedoctor/quarantine/restore-1/.records.jsonl",
        ".cachedoctor/quarantine/restore-1/sub/v.pt",
    ]


def test_an_unreadable_object_is_moved_out_by_copy_verify_delete(bucket: Bucket) -> None:
    old = pt_bytes(latent(seed=3))[:-40]  # the zip's end record cut off
    bucket.put("t.pt", old)
    assert kinds(bucket, "t.pt") == ["corrupt-archive"]

    session, plan, results = repair(bucket, "t.pt")

    assert [a.kind for a in plan.actions] == [ActionKind.QUARANTINE]
    assert [r.state for r in results] == [ItemState.VERIFIED]
    assert results[0].message == (f"moved to the quarantine (not recomputed: {NO_SOURCE}; the trainer re-caches it)")
    assert bucket.get(bucket.url("t.pt")) is None
    assert bucket.get(bucket.url(f".cachedoctor/quarantine/{session.run_id}/t.pt")) == old


def test_an_object_rewritten_after_the_listing_is_left_alone(bucket: Bucket) -> None:
    bucket.put("a.pt", cuda_tagged())
    store, location = bucket.store, bucket.location
    with StoreSession(store, location) as session:
        plan = plan_listed(findings(bucket, "a.pt"), location, listed(store, location))
        bucket.put("a.pt", pt_bytes(latent(seed=8)))  # the trainer writes the object again
        results = session.act(plan)
    assert [(r.state, r.message) for r in results] == [
        (ItemState.SKIPPED, "changed since the scan; left for the final scan to judge")
    ]
    assert bucket.keys(".cachedoctor/") == []  # nothing copied, nothing written


def test_a_restore_does_not_overwrite_an_object_that_changed_since_unless_forced(bucket: Bucket) -> None:
    old = cuda_tagged()
    bucket.put("a.pt", old)
    repair(bucket, "a.pt")
    trainer = pt_bytes(latent(seed=9))
    bucket.put("a.pt", trainer)  # written again since the repair
    (found,) = list_runs(bucket.location.url, bucket.store)

    with pytest.raises(RestoreRefused) as refused:
        restore(bucket.location.url, found, "restore-1", store=bucket.store)
    assert refused.value.path == bucket.url("a.pt")
    assert "changed since repair run" in refused.value.message and "--force" in refused.value.message
    assert bucket.get(bucket.url("a.pt")) == trainer

    restore(bucket.location.url, found, "restore-2", force=True, store=bucket.store)
    assert bucket.get(bucket.url("a.pt")) == old
    assert bucket.get(bucket.url(".cachedoctor/quarantine/restore-2/a.pt")) == trainer


def test_a_latent_that_needs_a_recompute_is_blocked_with_one_line_and_left_in_place(bucket: Bucket) -> None:
    nan = latent(seed=2).float()
    nan[0, 0, 0] = float("nan")
    old = pt_bytes(nan.to(torch.bfloat16))
    bucket.put("n.pt", old)
    assert kinds(bucket, "n.pt") == ["non-finite"]

    _session, plan, results = repair(bucket, "n.pt")

    assert [(a.kind, a.blocked) for a in plan.actions] == [(ActionKind.RECOMPUTE, NO_RECOMPUTE)]
    assert [(r.state, r.message) for r in results] == [(ItemState.BLOCKED, NO_RECOMPUTE)]
    assert "\n" not in NO_RECOMPUTE
    assert bucket.get(bucket.url("n.pt")) == old
    assert bucket.keys(".cachedoctor/") == []


def test_a_second_repair_of_a_locked_prefix_stops_naming_the_holder_and_an_error_releases_the_lock(
    bucket: Bucket,
) -> None:
    old = cuda_tagged()
    bucket.put("a.pt", old)
    with PrefixLock(bucket.store, bucket.location, "run-held-by-the-test"), pytest.raises(PrefixLocked) as locked:
        repair(bucket, "a.pt")
    assert locked.value.path == bucket.url(".cachedoctor/lock")
    assert locked.value.message.startswith(
        f"another repair holds this prefix (run run-held-by-the-test, pid {os.getpid()} on {socket.gethostname()}, since "
    )
    assert locked.value.message.endswith(" UTC); wait for it to finish")
    assert bucket.get(bucket.url("a.pt")) == old and bucket.keys(".cachedoctor/") == []

    with pytest.raises(ZeroDivisionError), StoreSession(bucket.store, bucket.location):
        assert bucket.keys(".cachedoctor/") == [".cachedoctor/lock"]
        1 / 0  # noqa: B018
    assert bucket.keys(".cachedoctor/") == []


def test_a_rewrite_costs_one_get_one_copy_one_head_and_one_put(bucket: Bucket) -> None:
    bucket.put("a.pt", cuda_tagged())
    store, location = bucket.store, bucket.location
    with StoreSession(store, location) as session:
        plan = plan_listed(findings(bucket, "a.pt"), location, listed(store, location))
        before = store.requests  # type: ignore[attr-defined]
        session.act(plan)
        spent = store.requests - before  # type: ignore[attr-defined]
    assert spent == 4 + 2  # the object's four, then the run's records object (PUT, HEAD)


def test_an_object_whose_quarantine_copy_does_not_verify_is_neither_replaced_nor_deleted(bucket: Bucket) -> None:
    from cachedoctor.stores.s3 import S3Settings, S3Store

    class WrongCopy(S3Store):
        """Fault injection: the server's copy holds other bytes than the source's."""

        def copy(self, source, target):  # type: ignore[no-untyped-def]
            super().copy(source, target)
            return self.put(target, b"not the object")

    old_tagged, old_torn = cuda_tagged(), pt_bytes(latent(seed=3))[:-40]
    bucket.put("a.pt", old_tagged)
    bucket.put("t.pt", old_torn)
    store, location = WrongCopy(bucket.name, S3Settings()), bucket.location
    with StoreSession(store, location) as session:
        results = session.act(plan_listed(findings(bucket, "a.pt", "t.pt"), location, listed(store, location)))
    assert [(r.path, r.state) for r in results] == [
        (bucket.url("a.pt"), ItemState.FAILED),
        (bucket.url("t.pt"), ItemState.FAILED),
    ]
    assert results[0].message.startswith(
        f"the quarantine copy {bucket.url(f'.cachedoctor/quarantine/{session.run_id}/a.pt')} has size 14"
    )
    assert (bucket.get(bucket.url("a.pt")), bucket.get(bucket.url("t.pt"))) == (old_tagged, old_torn)
    assert bucket.keys(".cachedoctor/") == []  # the wrong copies removed, no records


def test_of_eight_repairs_racing_for_one_prefix_exactly_one_gets_the_lock(bucket: Bucket) -> None:
    from concurrent.futures import ThreadPoolExecutor

    locks = [PrefixLock(bucket.store, bucket.location, f"run-{i}") for i in range(8)]

    def take(lock: PrefixLock) -> str:
        try:
            lock.acquire()
        except PrefixLocked as exc:
            return exc.message
        return "held"

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(take, locks))
    (winner,) = [lock for lock, answer in zip(locks, answers, strict=True) if answer == "held"]
    losers = [answer for answer in answers if answer != "held"]
    assert len(losers) == 7
    assert all(f"(run {winner.holder.run_id}, pid {os.getpid()}" in answer for answer in losers)
    winner.release()
    assert bucket.keys(".cachedoctor/") == []
