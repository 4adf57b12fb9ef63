"""The state of an S3 prefix scanned in shards (issue 30): each shard keeps
``<hash of the prefix>.shard-K-of-N.sqlite`` in the user cache dir, and a whole scan after them
reads only the object rewritten since. A real moto server on 127.0.0.1, the real engine with
``ScanOptions.shard``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("s3fs")

from factories import latent, pt_bytes

from cachedoctor.scan import ScanOptions, ScanResult, scan
from cachedoctor.scan.state.places import default_path
from cachedoctor.sharding.interface import Shard
from cachedoctor.stores.connect import forget


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    yield home
    forget()


def run(url: str, shard: Shard | None) -> ScanResult:
    result = scan([url], ScanOptions(workers=4, state="auto", shard=shard))
    assert (result.errors, result.notes) == ([], [])
    return result


def test_shards_of_a_prefix_keep_their_own_databases_and_serve_a_whole_scan(s3_server: Any, s3_bucket: str) -> None:
    client = s3_server.client()
    url = f"s3://{s3_bucket}/cache"
    folders: list[str] = []
    while len(folders) < 2 or not all(any(Shard(k, 2).owns(f"{url}/{f}") for f in folders) for k in (0, 1)):
        folder = f"f{len(folders)}"
        for j in range(2):
            body = pt_bytes(latent(seed=10 * len(folders) + j))
            client.put_object(Bucket=s3_bucket, Key=f"cache/{folder}/{j}.pt", Body=body)
        folders.append(folder)
    for k in (0, 1):
        first = run(url, Shard(k, 2))
        owned = [f for f in folders if Shard(k, 2).owns(f"{url}/{f}")]
        assert (first.stats.files_seen, first.stats.files_reused) == (2 * len(owned), 0)
    whole = default_path(url)
    kept = sorted(n for n in os.listdir(os.path.dirname(whole)) if not n.endswith(("-wal", "-shm")))
    assert kept == [os.path.basename(default_path(url, shard=Shard(k, 2))) for k in (0, 1)] + [
        "state.shard-0-of-2.clock",
        "state.shard-1-of-2.clock",
    ]
    client.put_object(Bucket=s3_bucket, Key="cache/f1/1.pt", Body=pt_bytes(latent(seed=99))[:300])
    again = run(url, None)  # the rest comes from the shards' databases
    assert (again.stats.files_seen, again.stats.files_reused) == (2 * len(folders), 2 * len(folders) - 1)
    assert [(f.kind, f.path) for f in again.findings] == [("corrupt-archive", f"{url}/f1/1.pt")]
    assert os.path.isfile(whole)
