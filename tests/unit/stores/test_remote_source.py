"""``RangeSource`` + the format readers on real objects in moto, counted at the proxy: what a
quick read of one object costs in requests, and that a hostile object cannot make it cost more
than a bound (nor hide a pickle behind that bound)."""

from __future__ import annotations

import io
import pickle
import zipfile
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto")
torch = pytest.importorskip("torch")

from s3_proxy import S3Proxy  # noqa: E402

from cachedoctor.formats import _dispatch  # noqa: E402
from cachedoctor.stores.s3 import RetryPolicy, S3Settings, S3Store  # noqa: E402
from cachedoctor.stores.source import HEAD_WINDOW, MAX_REQUESTS, RangeSource  # noqa: E402

BUCKET = "remote-source"


def _saved(obj: object) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _hostile(base: bytes, decoys: int) -> bytes:
    """A torch.save archive with ``decoys`` harmless extra pickles, each behind 20 KB of filler
    (one range each), and a last pickle that names ``os.system``."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(base)) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as target:
        prefix = source.namelist()[0].split("/")[0]
        for name in source.namelist():
            target.writestr(name, source.read(name))
        for i in range(decoys):
            target.writestr(f"{prefix}/data/filler{i}", b"\0" * 20_000)
            target.writestr(f"{prefix}/extra{i}.pkl", pickle.dumps([i], protocol=2))
        target.writestr(f"{prefix}/data/filler-last", b"\0" * 20_000)
        target.writestr(f"{prefix}/last.pkl", b"cos\nsystem\n.")
    return out.getvalue()


SMALL = _saved(torch.zeros(4, 8, 8, dtype=torch.bfloat16))
LARGE = _saved(torch.ones(4, 128, 130))  # fp32, just over the head window
HOSTILE = _hostile(SMALL, decoys=3 * MAX_REQUESTS)


@pytest.fixture(scope="module")
def store(s3_server: Any) -> Iterator[tuple[S3Store, S3Proxy]]:
    client = s3_server.client()
    client.create_bucket(Bucket=BUCKET)
    for name, body in (("small.pt", SMALL), ("large.pt", LARGE), ("hostile.pt", HOSTILE)):
        client.put_object(Bucket=BUCKET, Key=name, Body=body)
    with S3Proxy(s3_server.url) as proxy:
        yield S3Store(BUCKET, S3Settings(endpoint_url=proxy.url), RetryPolicy(base=0.001)), proxy


def _read(store: tuple[S3Store, S3Proxy], name: str) -> tuple[Any, RangeSource, int]:
    s3, proxy = store
    info = s3.head(f"s3://{BUCKET}/{name}")
    assert info is not None
    proxy.clear()
    src = RangeSource(s3, info)
    meta = _dispatch(info.url, src, deep=False)
    return meta, src, proxy.count("GET")


def test_a_small_latent_is_one_request(store: tuple[S3Store, S3Proxy]) -> None:
    meta, src, gets = _read(store, "small.pt")
    assert meta is not None and [t.shape for t in meta.tensors] == [(4, 8, 8)]
    assert (src.requests, gets, src.bytes_read) == (1, 1, len(SMALL))


def test_a_large_torch_zip_is_two_ranged_requests(store: tuple[S3Store, S3Proxy]) -> None:
    assert len(LARGE) > HEAD_WINDOW
    meta, src, gets = _read(store, "large.pt")
    assert meta is not None and [t.shape for t in meta.tensors] == [(4, 128, 130)]
    assert (src.requests, gets) == (2, 2)
    assert src.bytes_read < len(LARGE) // 2  # the start and the end, not the tensor data


def test_a_hostile_archive_costs_a_bounded_number_of_requests(store: tuple[S3Store, S3Proxy]) -> None:
    """Three times the range budget in extra pickles: the budget's ranges, then the whole object
    once; and the last pickle (past the budget) is still screened."""
    meta, src, gets = _read(store, "hostile.pt")
    assert (src.requests, gets) == (MAX_REQUESTS + 1, MAX_REQUESTS + 1)
    assert meta is not None and any(name.endswith("system") for name in meta.foreign_globals)
