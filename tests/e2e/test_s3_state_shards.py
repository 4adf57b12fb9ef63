"""The state of an S3 prefix scanned in shards (issue 30): each shard keeps
``<hash of the prefix>.shard-K-of-N.sqlite`` in the user cache dir, and a whole scan after them
reads only the object rewritten since. A real moto server on 127.0.0.1; a shard's scan is
emulated as in ``tests/unit/scan/test_state_shards.py`` (its folders only, its shard given to
``StateSet.open``) until the sharded walk reaches ``scan()``."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("s3fs")

from factories import latent, pt_bytes

from cachedoctor.scan import ScanOptions, ScanResult, engine, scan
from cachedoctor.scan.state.places import default_path
from cachedoctor.scan.state.plan import StateSet
from cachedoctor.statedir import Shard
from cachedoctor.stores.connect import forget

FOLDERS = ["f0", "f1", "f2", "f3"]


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    yield home
    forget()


def run(monkeypatch: pytest.MonkeyPatch, url: str, shard: Shard | None) -> ScanResult:
    class Sharded(StateSet):
        @classmethod
        def open(
            cls, roots: list[str], state: str | None, remote: Sequence[str] = (), shard_: Shard | None = None
        ) -> StateSet:
            return StateSet.open(roots, state, remote, shard=shard)

    monkeypatch.setattr(engine, "StateSet", Sharded)
    exclude = () if shard is None else tuple(f for i, f in enumerate(FOLDERS) if i % shard[1] != shard[0])
    result = scan([url], ScanOptions(workers=4, state="auto", exclude=exclude))
    assert (result.errors, result.notes) == ([], [])
    return result


def test_shards_of_a_prefix_keep_their_own_databases_and_serve_a_whole_scan(
    s3_server: Any, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = s3_server.client()
    for i, folder in enumerate(FOLDERS):
        for j in range(2):
            client.put_object(Bucket=s3_bucket, Key=f"cache/{folder}/{j}.pt", Body=pt_bytes(latent(seed=10 * i + j)))
    url = f"s3://{s3_bucket}/cache"
    for k in (0, 1):
        first = run(monkeypatch, url, (k, 2))
        assert (first.stats.files_seen, first.stats.files_reused) == (4, 0)
    whole = default_path(url)
    kept = sorted(n for n in os.listdir(os.path.dirname(whole)) if not n.endswith(("-wal", "-shm")))
    assert kept == [os.path.basename(default_path(url, shard=(k, 2))) for k in (0, 1)] + [
        "state.shard-0-of-2.clock",
        "state.shard-1-of-2.clock",
    ]
    client.put_object(Bucket=s3_bucket, Key="cache/f3/1.pt", Body=pt_bytes(latent(seed=99))[:300])
    again = run(monkeypatch, url, None)  # f3 was shard 1's: its other object comes from there
    assert (again.stats.files_seen, again.stats.files_reused) == (8, 7)
    assert [(f.kind, f.path) for f in again.findings] == [("corrupt-archive", f"{url}/f3/1.pt")]
    assert os.path.isfile(whole)
