"""The seam's proof on the read side: the thread reader, which reads only through ``Store``
methods (it serves object stores), gives every shipped fixture file the verdict the worker
processes give it when they open the file by path. Run over the local store, the one reader
written for object stores judges local files exactly as the local one does, quick and deep."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from cachedoctor.scan.outcome import Outcome
from cachedoctor.scan.thread_reads import read_object
from cachedoctor.scan.worker import inspect_path
from cachedoctor.stores.local import LocalStore

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "caches"
FILES = sorted(str(p) for p in FIXTURES.rglob("*") if p.is_file() and not p.is_symlink())


def _verdict(outcome: Outcome) -> Outcome:
    """An outcome less what depends on how the bytes were fetched (windows, not one pread)."""
    return dataclasses.replace(outcome, io_bytes=0)


@pytest.mark.parametrize("deep", [False, True], ids=["quick", "deep"])
def test_thread_reader_over_the_local_store_agrees_with_the_workers(deep: bool) -> None:
    assert len(FILES) > 50, "the shipped fixtures are where the test expects them"
    store = LocalStore()
    differ = []
    for path in FILES:
        info = store.head(path)
        assert info is not None
        by_store, _ = read_object(store, info, deep, False, False)
        by_path = inspect_path(path, deep=deep)
        if _verdict(by_store) != _verdict(by_path):
            differ.append((path, by_store, by_path))
    assert differ == []
    kinds = {f.kind for path in FILES for f in inspect_path(path, deep=deep).findings}
    assert len(kinds) >= 3, f"the fixtures plant several defects ({sorted(kinds)})"
