"""``S3Store`` against moto's real server, through the fault-injecting proxy (``s3_proxy.py``):
each test plants one fault (or one change to the bucket) and asserts what the store says.

One bucket and one proxy per module (every request costs real server CPU); a test that changes
an object works on a key of its own.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto")

from s3_proxy import S3Proxy

from cachedoctor.stores.interface import (
    Location,
    ObjectChanged,
    ObjectGone,
    ObjectInfo,
    RemoteError,
    TransientError,
)
from cachedoctor.stores.s3 import RetryPolicy, S3Settings, S3Store

BUCKET = "store-faults"
SMALL = b"s" * 1000
BIG = bytes(range(256)) * 1200  # 307,200 bytes
FAST = RetryPolicy(attempts=4, base=0.001, cap=0.002)


@pytest.fixture(scope="module")
def proxy(s3_server: Any) -> Iterator[S3Proxy]:
    client = s3_server.client()
    client.create_bucket(Bucket=BUCKET)
    client.put_object(Bucket=BUCKET, Key="data/small.pt", Body=SMALL)
    client.put_object(Bucket=BUCKET, Key="data/big.bin", Body=BIG)
    with S3Proxy(s3_server.url) as running:
        yield running


@pytest.fixture(scope="module")
def shared_store(proxy: S3Proxy) -> S3Store:
    return S3Store(BUCKET, S3Settings(endpoint_url=proxy.url), FAST)


@pytest.fixture
def store(shared_store: S3Store, proxy: S3Proxy) -> S3Store:
    """The module's store (a client costs about a second to build), its counters at zero."""
    proxy.clear()
    shared_store.retries = shared_store.requests = 0
    return shared_store


def _listed(store: S3Store, name: str) -> ObjectInfo:
    found = store.head(f"s3://{BUCKET}/{name}")
    assert found is not None
    return found


def test_list_is_one_request_sorted_by_key(store: S3Store, proxy: S3Proxy) -> None:
    infos = list(store.list(Location.parse(f"s3://{BUCKET}/data")))
    assert [(i.url, i.size) for i in infos] == [
        (f"s3://{BUCKET}/data/big.bin", len(BIG)),
        (f"s3://{BUCKET}/data/small.pt", len(SMALL)),
    ]
    assert proxy.log == [("GET", f"/{BUCKET}")]


def test_throttling_is_retried_then_succeeds(store: S3Store, proxy: S3Proxy) -> None:
    info = _listed(store, "data/small.pt")
    proxy.fail("throttle", times=3, method="GET")
    assert store.read_range(info, 0, 10) == SMALL[:10]
    assert (store.retries, proxy.injected["throttle"]) == (3, 3)


def test_throttling_past_the_attempts_is_transient(store: S3Store, proxy: S3Proxy) -> None:
    info = _listed(store, "data/small.pt")
    proxy.fail("throttle", times=10, method="GET")
    with pytest.raises(TransientError, match=r"still failing after 4 attempts: .*SlowDown") as caught:
        store.read_range(info, 0, 10)
    assert "reached max retries" not in str(caught.value)
    # botocore's own retries are off: four attempts are four requests, not eight
    assert (store.retries, proxy.injected["throttle"]) == (3, 4)


def test_reset_mid_body_is_retried(store: S3Store, proxy: S3Proxy) -> None:
    info = _listed(store, "data/big.bin")
    proxy.fail("reset-mid", times=2, method="GET")
    assert store.read_whole(info, len(BIG)) == BIG
    assert store.retries == 2


def test_short_body_is_retried(store: S3Store, proxy: S3Proxy) -> None:
    info = _listed(store, "data/big.bin")
    proxy.fail("short", times=1, method="GET")
    assert store.read_range(info, 1000, 201_000) == BIG[1000:201_000]
    assert store.retries == 1


def test_reset_before_the_answer_is_retried(store: S3Store, proxy: S3Proxy) -> None:
    info = _listed(store, "data/small.pt")
    proxy.fail("reset", times=2, method="GET")
    assert store.read_whole(info, len(SMALL)) == SMALL
    # aiohttp resends once by itself when a pooled keep-alive connection was dropped; the
    # second reset (on a fresh connection) is this store's retry
    assert (store.retries, proxy.injected["reset"]) == (1, 2)


def test_deleted_between_list_and_get_is_gone(store: S3Store, s3_server: Any) -> None:
    s3_server.client().put_object(Bucket=BUCKET, Key="gone/a.pt", Body=SMALL)
    info = _listed(store, "gone/a.pt")
    s3_server.client().delete_object(Bucket=BUCKET, Key="gone/a.pt")
    with pytest.raises(ObjectGone):
        store.read_range(info, 0, 10)
    with pytest.raises(ObjectGone):
        store.read_whole(info, info.size)
    assert store.head(info.url) is None


def test_rewritten_between_list_and_get_is_changed(store: S3Store, s3_server: Any) -> None:
    s3_server.client().put_object(Bucket=BUCKET, Key="changed/a.pt", Body=SMALL)
    info = _listed(store, "changed/a.pt")
    s3_server.client().put_object(Bucket=BUCKET, Key="changed/a.pt", Body=SMALL[:-1] + b"!")
    with pytest.raises(ObjectChanged):
        store.read_range(info, 0, 10)
    with pytest.raises(ObjectChanged):
        store.read_whole(info, info.size)
    assert store.retries == 0


def test_body_larger_than_listed_is_changed(store: S3Store) -> None:
    """A server that sends no ETag (the request is then unconditional) and an object longer
    than its listing: ``read_whole``'s limit, not a RemoteError and not a retry."""
    real = _listed(store, "data/big.bin")
    listed = ObjectInfo(real.url, 1000, "", real.mtime_ns)
    with pytest.raises(ObjectChanged):
        store.read_whole(listed, 1000)
    assert store.retries == 0


def test_put_if_absent_twice(store: S3Store, proxy: S3Proxy) -> None:
    url = f"s3://{BUCKET}/locks/{time.monotonic_ns()}.lock"
    assert store.put_if_absent(url, b"run 1") is True
    assert store.put_if_absent(url, b"run 2") is False
    assert [m for m, _ in proxy.log] == ["PUT", "PUT"]


def test_missing_bucket_is_one_line(proxy: S3Proxy) -> None:
    proxy.clear()
    store = S3Store("no-such-bucket-here", S3Settings(endpoint_url=proxy.url), FAST)
    with pytest.raises(RemoteError) as caught:
        list(store.list(Location.parse("s3://no-such-bucket-here/x")))
    assert caught.value.message == (
        "no bucket 'no-such-bucket-here' at this endpoint; check the URL and --s3-endpoint-url"
    )
    assert store.retries == 0


def test_refused_endpoint_fails_fast() -> None:
    import moto_server

    dead = f"http://127.0.0.1:{moto_server.free_port()}"  # nothing listens there
    store = S3Store(BUCKET, S3Settings(endpoint_url=dead), RetryPolicy(attempts=3, base=0.001, cap=0.002))
    with pytest.raises(RemoteError, match=r"cannot reach the endpoint .*check --s3-endpoint-url"):
        list(store.list(Location.parse(f"s3://{BUCKET}/x")))
    assert store.retries == 2


def test_no_credentials_is_one_line(proxy: S3Proxy, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    for name in list(os.environ):
        if name.startswith("AWS_") and name != "AWS_DEFAULT_REGION":
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    proxy.clear()
    store = S3Store(BUCKET, S3Settings(endpoint_url=proxy.url), FAST)
    with pytest.raises(RemoteError, match="no AWS credentials found; set AWS_ACCESS_KEY_ID"):
        list(store.list(Location.parse(f"s3://{BUCKET}/data")))
    assert proxy.count() == 0


@pytest.mark.slow
def test_refused_credentials_are_one_line() -> None:
    """moto with authentication on (``INITIAL_NO_AUTH_ACTION_COUNT=0``) knows no key at all, so
    the test's keys are refused as a real S3 refuses an unknown key: ``InvalidAccessKeyId`` on
    a LIST, a bare 403 on a HEAD (no body to name the code)."""
    import moto_server

    server = moto_server.start(auth=True)
    try:
        store = S3Store(BUCKET, S3Settings(endpoint_url=server.url, key="AKIAUNKNOWN", secret="nope"), FAST)
        with pytest.raises(RemoteError, match=r"refused these credentials \(InvalidAccessKeyId\)"):
            list(store.list(Location.parse(f"s3://{BUCKET}/x")))
        with pytest.raises(RemoteError, match=r"refused these credentials \(403\)"):
            store.head(f"s3://{BUCKET}/x/a.pt")
        assert store.retries == 0
    finally:
        server.stop()
