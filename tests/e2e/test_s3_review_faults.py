"""Faults an independent review found ending in a traceback or a long hang, each through the
real CLI against moto behind the fault-injecting proxy (``s3_proxy.py``): a listing that keeps
being throttled, an endpoint that is a plain web server, an object whose GET stalls, and a slow
download that is no hostile file. The store's policy is made fast for these tests by opening the
store the CLI will use first (``store_for`` keeps one per bucket and settings)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("s3fs")

from cli_run import cli
from factories import latent, pt_bytes
from s3_proxy import S3Proxy

from cachedoctor.stores.connect import forget, store_for
from cachedoctor.stores.s3 import RetryPolicy, S3Settings

FAST = RetryPolicy(attempts=3, base=0.001, cap=0.002, stall=0.5, stall_attempts=2)


@pytest.fixture
def proxy(s3_server: Any, s3_bucket: str) -> Iterator[S3Proxy]:
    client = s3_server.client()
    for i in range(3):
        client.put_object(Bucket=s3_bucket, Key=f"cache/{i}.pt", Body=pt_bytes({"latents": latent(seed=i)}))
    with S3Proxy(s3_server.url) as running:
        store_for(f"s3://{s3_bucket}", S3Settings(endpoint_url=running.url), FAST)
        yield running
    forget()


def scan(proxy: S3Proxy, bucket: str, *argv: str) -> tuple[int, str, str]:
    return cli("scan", f"s3://{bucket}/cache", "--no-state", "--s3-endpoint-url", proxy.url, *argv)


def test_a_listing_still_throttled_after_the_retries_is_one_line(proxy: S3Proxy, s3_bucket: str) -> None:
    proxy.fail("throttle", times=100, method="GET")
    code, out, err = scan(proxy, s3_bucket)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith(f"cachedoctor: error: s3://{s3_bucket}/cache: the listing failed")
    assert "try again later" in err


def test_an_endpoint_that_is_no_s3_server_is_one_line(tmp_path: Any) -> None:
    """A plain web server answers the listing with a 404 page."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        store_for("s3://nobody", S3Settings(endpoint_url=url), FAST)
        code, out, err = cli("scan", "s3://nobody/p", "--no-state", "--s3-endpoint-url", url)
    finally:
        server.shutdown()
        forget()
    assert (code, out) == (2, "")
    assert (
        err
        == "cachedoctor: error: s3://nobody/p: the endpoint answered 404 to a listing: it is not an S3 server, or --s3-endpoint-url is wrong\n"
    )


def test_an_object_whose_get_stalls_is_reported_once_the_stall_limit_is_reached(proxy: S3Proxy, s3_bucket: str) -> None:
    """Before, the scan waited for six 60-second read timeouts (six minutes) on one object."""
    proxy.fail("delay", times=10, method="GET", key="cache/1.pt", seconds=30)
    code, out, err = scan(proxy, s3_bucket, "--format", "json")
    assert code == 2, err
    assert f"s3://{s3_bucket}/cache/1.pt: could not be read (no answer within 0.5 s, 2 times: the server stalls)" in err
    assert proxy.injected["delay"] == 2


def test_time_spent_downloading_is_not_the_readers_time(proxy: S3Proxy, s3_bucket: str) -> None:
    """A download slower than --file-timeout is no hostile file: the timeout bounds the readers."""
    store_for(f"s3://{s3_bucket}", S3Settings(endpoint_url=proxy.url), RetryPolicy(base=0.001, stall=10))
    proxy.fail("delay", times=1, method="GET", key="cache/2.pt", seconds=1.5)
    code, out, err = scan(proxy, s3_bucket, "--file-timeout", "0.5", "--deep")
    assert (code, err) == (0, ""), out
    assert proxy.injected["delay"] == 1
