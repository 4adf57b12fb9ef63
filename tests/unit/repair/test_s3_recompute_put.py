"""The write end of a remote recompute (``StoreActor.put_made``) against moto's S3 server: a
missing entry is created only while it is still missing (``If-None-Match: *``), so a trainer
that re-cached it since the scan keeps its object; the new bytes are judged before any request."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import latent, pt_bytes
from s3_repair_helpers import Bucket

from cachedoctor.repair.model import Action, ActionKind, ItemResult, ItemState
from cachedoctor.repair.quarantine import Quarantine
from cachedoctor.repair.store_act import CREATED, StoreActor


@pytest.fixture
def bucket(s3_server: object, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Bucket:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    return Bucket(s3_server.client(), s3_bucket)  # type: ignore[attr-defined]


def made(bucket: Bucket, data: bytes) -> tuple[ItemResult, list[ItemResult]]:
    """``put_made`` of ``data`` for the missing entry ``m.pt``; its result and what was recorded."""
    recorded: list[ItemResult] = []
    actor = StoreActor(bucket.store, Quarantine(bucket.location.url, "run-1", bucket.store), recorded.append)
    action = Action(ActionKind.RECOMPUTE, bucket.url("m.pt"), bucket.url(), ("missing-entry",))
    return actor.put_made(action, lambda _a: data), recorded


def test_a_missing_entry_is_created_by_one_put(bucket: Bucket) -> None:
    new = pt_bytes(latent(seed=1))
    result, recorded = made(bucket, new)
    assert (result.state, result.message, result.quarantined) == (ItemState.VERIFIED, "written and checked", None)
    assert bucket.get(bucket.url("m.pt")) == new
    assert recorded == [] and bucket.keys(".cachedoctor/") == []  # nothing to keep


def test_a_missing_entry_the_trainer_wrote_since_the_scan_is_not_overwritten(bucket: Bucket) -> None:
    trainer = pt_bytes(latent(seed=2))
    bucket.put("m.pt", trainer)
    result, _ = made(bucket, pt_bytes(latent(seed=1)))
    assert (result.state, result.message) == (ItemState.SKIPPED, CREATED)
    assert bucket.get(bucket.url("m.pt")) == trainer


def test_new_bytes_the_scan_would_reject_are_not_sent(bucket: Bucket) -> None:
    bad = latent(seed=1).float()
    bad[0, 0, 0] = float("nan")
    result, _ = made(bucket, pt_bytes(bad))
    assert result.state is ItemState.FAILED and result.message.startswith("not written: the new object would be")
    assert "non-finite" in result.message and bucket.keys() == []
