"""The remote walk's folders and the per-object fault rules, on an in-memory object store (the
store is the scan's input here, not the thing under test; the S3 member is tested against moto
in ``tests/e2e/test_s3_scan.py``)."""

from __future__ import annotations

from collections.abc import Iterator

from factories import latent, pt_bytes

from cachedoctor.scan.targets import EMPTY, OBJECT, PREFIX, resolve_target
from cachedoctor.scan.thread_reads import CHANGED_TWICE, read_object
from cachedoctor.scan.walk import listed_folders
from cachedoctor.stores.interface import (
    Location,
    ObjectChanged,
    ObjectGone,
    ObjectInfo,
    Store,
    TransientError,
)


class MemoryStore(Store):
    """Objects in a dict, which a test can rewrite under the reader (``changes``, ``churn``)."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects
        self.etags = dict.fromkeys(objects, "1")
        self.reads = 0
        self.changes: dict[str, int] = {}  # key -> reads before it is rewritten once
        self.churn: set[str] = set()  # keys rewritten before every read
        self.fail: type[Exception] | None = None

    def info(self, key: str) -> ObjectInfo:
        return ObjectInfo(f"s3://b/{key}", len(self.objects[key]), self.etags[key], 1_000_000_000)

    def list(self, prefix: Location) -> Iterator[ObjectInfo]:
        start = f"{prefix.key}/" if prefix.key else ""
        return (self.info(k) for k in sorted(self.objects) if k.startswith(start))

    def head(self, url: str) -> ObjectInfo | None:
        key = Location.parse(url).key
        return self.info(key) if key in self.objects else None

    def _get(self, info: ObjectInfo) -> bytes:
        self.reads += 1
        if self.fail is not None:
            raise self.fail(info.url)
        key = info.key
        if key in self.churn or self.changes.get(key) == 0:  # rewritten (once, or before every read)
            self.etags[key] = str(int(self.etags[key]) + 1)
        if key in self.changes:
            self.changes[key] -= 1
        if self.etags[key] != info.etag:
            raise ObjectChanged(info.url)
        return self.objects[key]

    def read_range(self, info: ObjectInfo, start: int, end: int) -> bytes:
        return self._get(info)[start:end]

    def read_whole(self, info: ObjectInfo, limit: int) -> bytes:
        return self._get(info)

    def put(self, url: str, data: bytes) -> ObjectInfo:  # pragma: no cover - not used by a scan
        raise NotImplementedError

    def put_if_absent(self, url: str, data: bytes) -> bool:  # pragma: no cover
        raise NotImplementedError

    def copy(self, source: ObjectInfo, target: str) -> ObjectInfo:  # pragma: no cover
        raise NotImplementedError

    def delete(self, url: str) -> None:  # pragma: no cover
        raise NotImplementedError


GOOD = pt_bytes({"latents": latent()})


def test_folders_are_key_dirnames_and_complete_before_later_keys() -> None:
    keys = ["p/a.pt", "p/b/x.pt", "p/b/y.pt", "p/b0.pt", "p/c/z.pt", "p/.cachedoctor/q/a.pt", "p/old/o.pt"]
    store = MemoryStore(dict.fromkeys(keys, GOOD))
    target = resolve_target("s3://b/p", store)
    folders = [(f.path, [u.rsplit("/", 1)[1] for u in f.files]) for f in listed_folders(target, ("old",))]
    assert target.kind == PREFIX
    assert sorted(folders) == [
        ("s3://b/p", ["a.pt", "b0.pt"]),
        ("s3://b/p/b", ["x.pt", "y.pt"]),
        ("s3://b/p/c", ["z.pt"]),
    ]
    assert folders.index(("s3://b/p/b", ["x.pt", "y.pt"])) < folders.index(("s3://b/p", ["a.pt", "b0.pt"]))


def test_a_url_naming_one_object_and_an_empty_prefix() -> None:
    store = MemoryStore({"p/a.pt": GOOD})
    assert resolve_target("s3://b/p/a.pt", store).kind == OBJECT
    assert resolve_target("s3://b/q", store).kind == EMPTY


def test_changed_once_is_read_again_from_a_fresh_head() -> None:
    store = MemoryStore({"p/a.pt": GOOD})
    listed = store.info("p/a.pt")
    store.changes["p/a.pt"] = 0  # rewritten before the first read
    outcome, info = read_object(store, listed, deep=False, facts=False, digest=False)
    assert (outcome.status, outcome.findings, info.etag) == ("read", (), "2")


def test_changed_twice_is_an_error_naming_it() -> None:
    store = MemoryStore({"p/a.pt": GOOD})
    store.churn.add("p/a.pt")
    outcome, _ = read_object(store, store.info("p/a.pt"), deep=True, facts=False, digest=False)
    assert (outcome.status, outcome.error) == ("error", CHANGED_TWICE)


def test_gone_since_the_listing_is_skipped() -> None:
    store = MemoryStore({"p/a.pt": GOOD})
    listed = store.info("p/a.pt")
    store.fail = ObjectGone  # deleted since the listing
    outcome, _ = read_object(store, listed, deep=False, facts=False, digest=False)
    assert outcome.status == "skipped"


def test_retries_exhausted_is_an_error_not_a_verdict() -> None:
    store = MemoryStore({"p/a.pt": GOOD})
    store.fail = TransientError
    outcome, _ = read_object(store, store.info("p/a.pt"), deep=False, facts=False, digest=False)
    assert outcome.status == "error" and outcome.findings == ()
