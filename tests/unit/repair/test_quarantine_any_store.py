"""One quarantine over every store (issue 29): the same scenario, keep -> list -> restore ->
purge, written once and run against a local folder and an S3 prefix (moto's server). The test
body names no scheme: what differs (a hard link or a verified copy, appended or rewritten
records, per-file or prefix locks) is the store's to say."""

from __future__ import annotations

from pathlib import Path

import pytest

from cachedoctor.repair.quarantine import Quarantine
from cachedoctor.repair.quarantine_restore import purge, restore
from cachedoctor.repair.quarantine_runs import list_runs
from cachedoctor.stores.connect import store_for
from cachedoctor.stores.interface import Store


@pytest.fixture(params=["local", "s3"])
def cache(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Store]:
    """A cache root and its store: a folder, or ``s3://<bucket>/cache``."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    local = request.param == "local"
    root = str(tmp_path / "cache") if local else f"s3://{request.getfixturevalue('s3_bucket')}/cache"
    return root, store_for(root)


def _read(store: Store, url: str) -> bytes | None:
    info = store.head(url)
    return None if info is None else store.read_whole(info, 1 << 20)


def test_keep_list_restore_purge_is_one_code_path_for_every_store(cache: tuple[str, Store]) -> None:
    root, store = cache
    a, b = f"{root}/sub/a.pt", f"{root}/b.pt"
    store.put(a, b"old-a")
    store.put(b, b"old-b")

    quarantine = Quarantine(root, "run-1", store)
    kept = quarantine.keep(store.head(a), ("batch-leak",), "clone-storage")  # type: ignore[arg-type]
    new = store.put(a, b"repaired-a")  # what repair writes over it
    quarantine.replaced(kept, new.etag)
    moved = quarantine.move(store.head(b), ("corrupt-archive",), "quarantine")  # type: ignore[arg-type]
    quarantine.write_records()
    assert (kept, moved) == (f"{quarantine.folder}/sub/a.pt", f"{quarantine.folder}/b.pt")
    assert (_read(store, a), _read(store, b), _read(store, moved)) == (b"repaired-a", None, b"old-b")

    (run,) = list_runs(root, store)
    assert (run.run_id, run.moved, run.size) == ("run-1", False, 10)
    assert [(f.relpath, f.original, f.reasons, f.action) for f in run.files] == [
        ("b.pt", b, ("corrupt-archive",), "quarantine"),
        ("sub/a.pt", a, ("batch-leak",), "clone-storage"),
    ]

    done, replaced = restore(root, run, "restore-1", store=store)
    assert done == [(f"{run.folder}/b.pt", b), (f"{run.folder}/sub/a.pt", a)]
    assert replaced  # the repaired a.pt stood in the way: kept first, so a restore loses nothing
    assert (_read(store, a), _read(store, b)) == (b"old-a", b"old-b")

    (aside,) = list_runs(root, store)
    assert (aside.run_id, [(f.relpath, f.original, f.reasons) for f in aside.files]) == (
        "restore-1",
        [("sub/a.pt", a, ("restore",))],
    )
    assert _read(store, f"{aside.folder}/sub/a.pt") == b"repaired-a"

    assert purge(root, aside, store) == len(b"repaired-a")
    assert list_runs(root, store) == []
    assert (_read(store, a), _read(store, b)) == (b"old-a", b"old-b")  # the cache itself untouched
