"""A conditional request whose first answer is lost (the server did it; the proxy drops the
answer) is retried by the store, and the retry is refused: the DELETE finds nothing (404), the
PUT finds another version (412), the one the first attempt wrote. Before, repair took that for
"changed by someone else", gave up the item and deleted its quarantine copy: the object's old
bytes were nowhere (found by an adversarial review, rebuilt here first). Now the copy stays
whenever the old version is gone from the bucket, and a PUT whose bytes are there is the
repair's own. Through moto behind ``s3_proxy.py`` (fault ``lost``), the CLI in process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("s3fs")

from cli_run import cli
from factories import latent, pt_bytes, saved_on
from s3_proxy import S3Proxy
from s3_repair_helpers import Bucket

from cachedoctor.stores.connect import forget, store_for
from cachedoctor.stores.s3 import RetryPolicy, S3Settings

FAST = RetryPolicy(attempts=3, base=0.001, cap=0.002, stall=0.5, stall_attempts=2)


@pytest.fixture
def bucket(s3_server: Any, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Bucket:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    return Bucket(s3_server.client(), s3_bucket)


@pytest.fixture
def proxy(s3_server: Any, bucket: Bucket) -> Iterator[S3Proxy]:
    with S3Proxy(s3_server.url) as running:
        store_for(bucket.url(), S3Settings(endpoint_url=running.url), FAST)
        yield running
    forget()


def quarantined(bucket: Bucket) -> list[bytes]:
    return [bucket.get(bucket.url(key)) or b"" for key in bucket.keys(".cachedoctor/quarantine/")]


def test_a_move_whose_delete_answer_is_lost_keeps_the_copy(proxy: S3Proxy, bucket: Bucket) -> None:
    torn = pt_bytes(latent(seed=3))[:-40]
    bucket.put("torn.pt", torn)
    bucket.put("ok.pt", pt_bytes(latent(seed=2)))
    proxy.fail("lost", times=1, method="DELETE", key="cache/torn.pt")
    code, out, err = cli("repair", "--yes", bucket.url(), "--s3-endpoint-url", proxy.url, columns=400)
    assert proxy.injected["lost"] == 1
    assert (code, err) == (0, ""), out
    assert bucket.get(bucket.url("torn.pt")) is None
    assert torn in quarantined(bucket)  # the only copy of the old bytes
    assert "done: 1 verified, 0 skipped, 0 blocked, 0 failed" in out


def test_a_rewrite_whose_put_answer_is_lost_is_the_repairs_own(proxy: S3Proxy, bucket: Bucket) -> None:
    with saved_on("cuda:0"):
        tagged = pt_bytes(latent(seed=1))
    bucket.put("a.pt", tagged)
    bucket.put("ok.pt", pt_bytes(latent(seed=2)))
    proxy.fail("lost", times=1, method="PUT", key="cache/a.pt")
    code, out, err = cli("repair", "--yes", bucket.url(), "--s3-endpoint-url", proxy.url, columns=400)
    assert proxy.injected["lost"] == 1
    assert (code, err) == (0, ""), out
    assert tagged in quarantined(bucket)  # the old bytes kept
    assert bucket.get(bucket.url("a.pt")) not in (None, tagged)  # the rewrite is in place
    assert "done: 1 verified, 0 skipped, 0 blocked, 0 failed" in out
    code, out, _ = cli("quarantine", "list", bucket.url(), "--s3-endpoint-url", proxy.url, columns=400)
    assert code == 0 and "1 file" in out, out


def test_a_rewrite_refused_because_another_writer_won_gives_up_its_copy(proxy: S3Proxy, bucket: Bucket) -> None:
    """The other side of the rule: a 412 whose object holds someone else's bytes is refused as
    before (the item is skipped and its copy given up: it replaced nothing). The trainer's write
    lands between the copy into the quarantine and the PUT (a real write, on moto)."""
    from cachedoctor.repair.model import Action, ActionKind, Stat
    from cachedoctor.repair.quarantine import Quarantine
    from cachedoctor.repair.store_act import StoreActor

    with saved_on("cuda:0"):
        tagged = pt_bytes(latent(seed=1))
    url = bucket.put("a.pt", tagged)
    store = bucket.store
    info = store.head(url)
    assert info is not None
    real_put = store.put_if_match

    def trainer_first(target: str, data: bytes, etag: str) -> Any:
        bucket.put("a.pt", pt_bytes(latent(seed=5)))  # the trainer caches it again, now
        return real_put(target, data, etag)

    store.put_if_match = trainer_first  # type: ignore[method-assign]
    try:
        before = Stat(info.size, info.mtime_ns, 0)
        action = Action(ActionKind.REWRITE_CPU, url, bucket.url(), ("device-tagged",), before=before, etag=info.etag)
        actor = StoreActor(store, Quarantine(bucket.url(), "run-1", store), lambda _: None, threads=1)
        result = actor.guarded(action, lambda: actor.replace_with(action, info, b"new bytes"))
    finally:
        del store.put_if_match
    assert result.state.value == "skipped" and "changed since the scan" in result.message
    assert bucket.get(url) == pt_bytes(latent(seed=5))  # the trainer's bytes stand
    assert tagged not in quarantined(bucket)
