"""The proxy's ``keep_alive`` (``tests/s3_proxy.py``), which the S3 benchmark relies on: moto closes
its connection after every answer; with ``keep_alive=True`` the proxy keeps the client's open,
as S3 does, and sends each request to the server on a new connection of its own."""

from __future__ import annotations

import http.client
from typing import Any
from urllib.parse import urlsplit

import pytest

pytest.importorskip("moto")

from s3_proxy import S3Proxy

BUCKET = "proxy-keep-alive"


@pytest.fixture(scope="module")
def bucket(s3_server: Any) -> str:
    client = s3_server.client()
    client.create_bucket(Bucket=BUCKET)
    for name in ("a.pt", "b.pt"):
        client.put_object(Bucket=BUCKET, Key=name, Body=name.encode() * 100)
    return BUCKET


def _get(conn: http.client.HTTPConnection, proxy: S3Proxy, key: str) -> tuple[int, str | None, bytes]:
    """A GET of ``key`` on ``conn``, signed in the URL (for the proxy's address) as any S3 GET is."""
    import boto3

    client = boto3.client("s3", endpoint_url=proxy.url)
    url = urlsplit(client.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": key}))
    conn.request("GET", f"{url.path}?{url.query}")
    answer = conn.getresponse()
    return answer.status, answer.getheader("Connection"), answer.read()


def test_keep_alive_answers_two_requests_on_one_client_connection(s3_server: Any, bucket: str) -> None:
    with S3Proxy(s3_server.url, keep_alive=True) as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
        assert _get(conn, proxy, "a.pt") == (200, None, b"a.pt" * 100)
        first = conn.sock
        assert first is not None  # not closed after the answer
        assert _get(conn, proxy, "b.pt") == (200, None, b"b.pt" * 100)
        assert conn.sock is first
        conn.close()
        assert proxy.count("GET") == 2


def test_without_keep_alive_the_servers_close_is_passed_on(s3_server: Any, bucket: str) -> None:
    with S3Proxy(s3_server.url) as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
        assert _get(conn, proxy, "a.pt") == (200, "close", b"a.pt" * 100)
        assert conn.sock is None  # http.client closed it, as the answer said
        conn.close()
        assert proxy.count("GET") == 1
