"""The one conformance suite every store passes (like restic's ``internal/backend/test`` and
rclone's ``fstests``): each ``test_conformance_<store>.py`` supplies a :class:`StoreHarness` and
runs :class:`StoreConformance` unchanged, so the logic above ``Store`` can rely on one contract.

What the contract pins, beyond the docstrings of ``stores/interface.py``:

* a listing is recursive, sorted by the keys' UTF-8 bytes, complete across pages, and empty (not
  an error) for an empty or a missing prefix; ``prefix/ab`` does not list ``prefix/abc``;
* a read past the end is short, never an error; a read of a version that is no longer there is
  :class:`ObjectChanged` (rewritten) or :class:`ObjectGone` (deleted);
* a conditional write or delete of an object that does not exist is :class:`ObjectGone`, on
  every store; a plain delete of one is silent;
* an odd key (``a//b``, ``..``, a trailing space, unicode, a long name) is stored and listed back
  as itself (``capabilities.exact_keys``), or refused with :class:`KeyNotStorable`, never stored
  under another name;
* a store whose every request fails gives up after a bounded number of tries: an object request
  raises the harness's ``object_error`` and a listing its ``listing_error``, each one line that
  names the URL (or, on a file system, the folder that failed).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass, field
from typing import Any

import pytest

from cachedoctor.stores.interface import (
    KeyNotStorable,
    Location,
    ObjectChanged,
    ObjectGone,
    ObjectInfo,
    RemoteError,
    Store,
    StoreError,
    TransientError,
)

DATA = bytes(range(256)) * 40  # 10,240 bytes, no two neighbours alike
ODD_KEYS = {
    "double-slash": "a//b.pt",
    "dot-dot": "a/../b.pt",
    "dot": "./x.pt",
    "unicode": "ünï/кэш.pt",
    "long": "l" * 220 + ".pt",  # longer than 200 bytes, shorter than a file name may be
    "too-long-for-a-file-name": "m" * 300 + ".pt",
    "trailing-space": "space.pt ",
}


@dataclass
class StoreHarness:
    """One store under test. ``prefix``: the URL of a fresh, empty prefix on it; ``other``: a
    second store on the same namespace, standing for another writer (its own connection);
    ``failing(mode)``: a store and a prefix URL on which every request fails in that mode."""

    store: Store
    prefix: str
    other: Store
    failing: Callable[[str], ContextManager[tuple[Store, str]]]
    failure_modes: tuple[str, ...]
    object_error: type[Exception]
    listing_error: type[Exception]
    #: keys (of ODD_KEYS) this store refuses: it cannot hold them as themselves
    refused: frozenset[str] = field(default_factory=frozenset)
    #: makes the store list in pages of this many objects (``None``: it has no pages)
    set_page_size: Callable[[int], None] | None = None
    #: a store and a prefix whose container does not exist (a bucket no one made; a folder
    #: under a regular file)
    missing: tuple[Store, str] | None = None

    def url(self, key: str) -> str:
        return f"{self.prefix}/{key}"

    def keys(self, infos: Iterator[ObjectInfo] | list[ObjectInfo]) -> list[str]:
        return [info.url.removeprefix(self.prefix + "/") for info in infos]


def object_store_harness(
    store: Any, other: Any, broken: Any, proxy: Any, prefix: str, missing: tuple[Store, str]
) -> Iterator[StoreHarness]:
    """The harness of a network store: ``store`` and ``other`` (a second client, the other
    writer) on the server, ``broken`` behind ``proxy`` (``tests/s3_proxy.py``, which fails any
    HTTP), a fresh ``prefix``. Its page size is put back after the test."""

    @contextlib.contextmanager
    def failing(mode: str) -> Iterator[tuple[Store, str]]:
        proxy.fail(mode, times=1_000_000)
        try:
            yield broken, prefix
        finally:
            proxy.clear()

    def set_page_size(size: int) -> None:
        store.page_size = size

    yield StoreHarness(
        store=store,
        prefix=prefix,
        other=other,
        failing=failing,
        failure_modes=("reset", "throttle"),
        object_error=TransientError,
        listing_error=RemoteError,
        set_page_size=set_page_size,
        missing=missing,
    )
    store.page_size = type(store).page_size


def one_line(exc: BaseException, url: str) -> None:
    text = str(exc)
    assert "\n" not in text and url in text, text


class StoreConformance:
    """The suite. A subclass named ``Test...`` defines the ``harness`` fixture."""

    def listed(self, harness: StoreHarness, key: str) -> ObjectInfo:
        found = harness.store.head(harness.url(key))
        assert found is not None
        return found

    # -- list ------------------------------------------------------------------------------------

    def test_list_is_recursive_and_sorted_by_key_bytes(self, harness: StoreHarness) -> None:
        keys = ["b/z.pt", "a-b.pt", "a/b.pt", "é.pt", "Z.pt", "a/c/d.pt"]
        for key in keys:
            harness.store.put(harness.url(key), key.encode())
        infos = list(harness.store.list(Location.parse(harness.prefix)))
        assert harness.keys(infos) == sorted(keys, key=lambda k: k.encode())
        assert [i.size for i in infos] == [len(k.encode()) for k in harness.keys(infos)]

    def test_list_is_complete_across_pages(self, harness: StoreHarness) -> None:
        if harness.set_page_size is None:
            pytest.skip("this store lists without pages")
        harness.set_page_size(2)
        keys = [f"p/{i:02d}.pt" for i in range(7)]
        for key in keys:
            harness.store.put(harness.url(key), b"")
        assert harness.keys(harness.store.list(Location.parse(harness.prefix))) == keys

    def test_list_of_empty_and_missing_prefix_is_empty(self, harness: StoreHarness) -> None:
        assert list(harness.store.list(Location.parse(harness.prefix))) == []
        assert list(harness.store.list(Location.parse(harness.url("never/written")))) == []

    def test_list_of_prefix_leaves_out_its_longer_siblings(self, harness: StoreHarness) -> None:
        harness.store.put(harness.url("ab/1.pt"), b"1")
        harness.store.put(harness.url("abc/2.pt"), b"2")
        harness.store.put(harness.url("ab.pt"), b"3")
        assert harness.keys(harness.store.list(Location.parse(harness.url("ab")))) == ["ab/1.pt"]

    # -- head, reads -----------------------------------------------------------------------------

    def test_head_of_present_and_absent_object(self, harness: StoreHarness) -> None:
        written = harness.store.put(harness.url("h.pt"), DATA)
        found = harness.store.head(harness.url("h.pt"))
        assert found is not None
        assert (found.url, found.size, found.etag) == (harness.url("h.pt"), len(DATA), written.etag)
        assert harness.store.head(harness.url("absent.pt")) is None

    def test_listing_and_head_agree(self, harness: StoreHarness) -> None:
        harness.store.put(harness.url("same.pt"), DATA)
        (listed,) = harness.store.list(Location.parse(harness.prefix))
        assert listed == harness.store.head(harness.url("same.pt"))

    def test_read_range_gives_exact_bytes(self, harness: StoreHarness) -> None:
        harness.store.put(harness.url("r.pt"), DATA)
        info = self.listed(harness, "r.pt")
        assert harness.store.read_range(info, 0, 10) == DATA[:10]
        assert harness.store.read_range(info, 1000, 5000) == DATA[1000:5000]
        assert harness.store.read_range(info, 0, len(DATA)) == DATA

    def test_read_range_past_the_end_is_short(self, harness: StoreHarness) -> None:
        harness.store.put(harness.url("r.pt"), DATA)
        info = self.listed(harness, "r.pt")
        assert harness.store.read_range(info, len(DATA) - 5, len(DATA) + 100) == DATA[-5:]
        assert harness.store.read_range(info, len(DATA) + 10, len(DATA) + 20) == b""

    def test_read_of_rewritten_object_is_changed(self, harness: StoreHarness) -> None:
        harness.store.put(harness.url("w.pt"), DATA)
        info = self.listed(harness, "w.pt")
        harness.other.put(harness.url("w.pt"), DATA[::-1] + b"!")
        with pytest.raises(ObjectChanged):
            harness.store.read_range(info, 0, 10)
        with pytest.raises(ObjectChanged):
            harness.store.read_whole(info, 1 << 20)

    def test_read_of_deleted_object_is_gone(self, harness: StoreHarness) -> None:
        harness.store.put(harness.url("d.pt"), DATA)
        info = self.listed(harness, "d.pt")
        harness.other.delete(harness.url("d.pt"))
        with pytest.raises(ObjectGone):
            harness.store.read_range(info, 0, 10)
        with pytest.raises(ObjectGone):
            harness.store.read_whole(info, 1 << 20)

    def test_read_whole_within_and_over_the_limit(self, harness: StoreHarness) -> None:
        harness.store.put(harness.url("whole.pt"), DATA)
        info = self.listed(harness, "whole.pt")
        assert harness.store.read_whole(info, len(DATA)) == DATA
        with pytest.raises(ObjectChanged):
            harness.store.read_whole(info, len(DATA) - 1)

    # -- writes ----------------------------------------------------------------------------------

    def test_put_replaces_and_returns_the_new_version(self, harness: StoreHarness) -> None:
        first = harness.store.put(harness.url("p.pt"), b"one")
        second = harness.store.put(harness.url("p.pt"), b"three")
        assert (second.size, second.url) == (5, harness.url("p.pt"))
        assert second.etag != first.etag
        assert harness.store.head(harness.url("p.pt")) == second
        assert harness.store.read_whole(second, 100) == b"three"

    def test_put_if_absent_creates_once(self, harness: StoreHarness) -> None:
        assert harness.store.put_if_absent(harness.url("lock"), b"first") is True
        assert harness.store.put_if_absent(harness.url("lock"), b"second") is False
        assert harness.store.read_whole(self.listed(harness, "lock"), 100) == b"first"

    def test_copy_gives_equal_bytes(self, harness: StoreHarness) -> None:
        harness.store.put(harness.url("src.pt"), DATA)
        copied = harness.store.copy(self.listed(harness, "src.pt"), harness.url("q/dst.pt"))
        assert (copied.url, copied.size) == (harness.url("q/dst.pt"), len(DATA))
        assert harness.store.read_whole(copied, len(DATA)) == DATA
        assert harness.store.head(harness.url("src.pt")) is not None

    def test_copy_of_changed_source_is_changed(self, harness: StoreHarness) -> None:
        harness.store.put(harness.url("src.pt"), DATA)
        info = self.listed(harness, "src.pt")
        harness.other.put(harness.url("src.pt"), b"newer bytes")
        with pytest.raises(ObjectChanged):
            harness.store.copy(info, harness.url("q/dst.pt"))
        assert harness.store.head(harness.url("q/dst.pt")) is None

    def test_copy_of_deleted_source_is_gone(self, harness: StoreHarness) -> None:
        harness.store.put(harness.url("src.pt"), DATA)
        info = self.listed(harness, "src.pt")
        harness.other.delete(harness.url("src.pt"))
        with pytest.raises(ObjectGone):
            harness.store.copy(info, harness.url("q/dst.pt"))

    def test_delete_removes_and_is_silent_when_absent(self, harness: StoreHarness) -> None:
        harness.store.put(harness.url("x.pt"), DATA)
        harness.store.delete(harness.url("x.pt"))
        assert harness.store.head(harness.url("x.pt")) is None
        harness.store.delete(harness.url("x.pt"))
        assert list(harness.store.list(Location.parse(harness.prefix))) == []

    # -- compare-and-swap ------------------------------------------------------------------------

    def test_put_if_match_writes_when_the_version_matches(self, harness: StoreHarness) -> None:
        old = harness.store.put(harness.url("c.pt"), b"old")
        new = harness.store.put_if_match(harness.url("c.pt"), b"newer", old.etag)
        assert (new.size, new.url) == (5, harness.url("c.pt"))
        current = self.listed(harness, "c.pt")
        assert (current.etag, harness.store.read_whole(current, 100)) == (new.etag, b"newer")

    def test_put_if_match_after_another_writer_is_changed(self, harness: StoreHarness) -> None:
        old = harness.store.put(harness.url("c.pt"), b"old")
        harness.other.put(harness.url("c.pt"), b"theirs!")
        with pytest.raises(ObjectChanged):
            harness.store.put_if_match(harness.url("c.pt"), b"mine", old.etag)
        assert harness.store.read_whole(self.listed(harness, "c.pt"), 100) == b"theirs!"

    def test_put_if_match_on_absent_object_is_gone(self, harness: StoreHarness) -> None:
        old = harness.store.put(harness.url("c.pt"), b"old")
        harness.other.delete(harness.url("c.pt"))
        with pytest.raises(ObjectGone):
            harness.store.put_if_match(harness.url("c.pt"), b"mine", old.etag)
        assert harness.store.head(harness.url("c.pt")) is None

    def test_delete_if_match_deletes_the_version_read(self, harness: StoreHarness) -> None:
        old = harness.store.put(harness.url("c.pt"), b"old")
        harness.store.delete_if_match(harness.url("c.pt"), old.etag)
        assert harness.store.head(harness.url("c.pt")) is None

    def test_delete_if_match_after_another_writer_is_changed(self, harness: StoreHarness) -> None:
        old = harness.store.put(harness.url("c.pt"), b"old")
        harness.other.put(harness.url("c.pt"), b"theirs!")
        with pytest.raises(ObjectChanged):
            harness.store.delete_if_match(harness.url("c.pt"), old.etag)
        assert harness.store.head(harness.url("c.pt")) is not None

    def test_delete_if_match_on_absent_object_is_gone(self, harness: StoreHarness) -> None:
        old = harness.store.put(harness.url("c.pt"), b"old")
        harness.other.delete(harness.url("c.pt"))
        with pytest.raises(ObjectGone):
            harness.store.delete_if_match(harness.url("c.pt"), old.etag)

    # -- odd keys --------------------------------------------------------------------------------

    @pytest.mark.parametrize("kind", sorted(ODD_KEYS))
    def test_odd_key_is_itself_or_refused(self, harness: StoreHarness, kind: str) -> None:
        key = ODD_KEYS[kind]
        url = harness.url(key)
        if kind in harness.refused:
            assert not harness.store.capabilities.exact_keys
            for attempt in (
                lambda: harness.store.put(url, DATA),
                lambda: harness.store.put_if_absent(url, DATA),
                lambda: harness.store.head(url),
            ):
                with pytest.raises(KeyNotStorable) as caught:
                    attempt()
                one_line(caught.value, url)
            assert list(harness.store.list(Location.parse(harness.prefix))) == []
            return
        written = harness.store.put(url, DATA)
        assert written.url == url
        (listed,) = harness.store.list(Location.parse(harness.prefix))
        assert (harness.keys([listed]), listed.size) == ([key], len(DATA))
        assert harness.store.read_whole(listed, len(DATA)) == DATA
        assert harness.store.put_if_absent(url, b"again") is False
        harness.store.delete(url)
        assert harness.store.head(url) is None

    # -- a place that is not there ----------------------------------------------------------------

    def test_writes_where_there_is_no_container_are_one_line(self, harness: StoreHarness) -> None:
        """A repair's first write (its lock, made only if absent) into a bucket no one made, or
        a folder that cannot be, is the store's one-line error, not a verdict on one object."""
        assert harness.missing is not None
        store, prefix = harness.missing
        url = f"{prefix}/.cachedoctor/lock"
        for write in (lambda: store.put_if_absent(url, b"lock"), lambda: store.put(url, DATA)):
            with pytest.raises(StoreError) as caught:
                write()
            one_line(caught.value, prefix.rsplit("/", 1)[0])

    # -- a store that keeps failing --------------------------------------------------------------

    def test_store_that_keeps_failing_gives_up_in_one_line(self, harness: StoreHarness) -> None:
        for mode in harness.failure_modes:
            with harness.failing(mode) as (store, prefix):
                url = f"{prefix}/f.pt"
                with pytest.raises(harness.object_error) as caught:
                    store.put(url, DATA)
                one_line(caught.value, prefix)
                if not store.capabilities.local_paths:  # a file under a file is simply absent
                    with pytest.raises(harness.object_error) as caught:
                        store.head(url)
                    one_line(caught.value, url)
                    with pytest.raises(harness.object_error) as caught:
                        store.read_range(ObjectInfo(url, len(DATA), "1", 0), 0, 10)
                    one_line(caught.value, url)
                with pytest.raises(harness.listing_error) as listing:
                    list(store.list(Location.parse(prefix)))
                assert isinstance(listing.value, StoreError)
                one_line(listing.value, prefix)
