"""The conformance suite on the local-disk store (``stores/local.py``), in a fresh folder.

Keys a path would rewrite (``a//b``, ``..``, ``./x``) and a file name longer than the file
system's 255 bytes are refused (``exact_keys`` is false). The tests run as root here, and root
ignores permission bits, so the store that keeps failing is one whose prefix lies under a
regular file (ENOTDIR), a fault no user can write through.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from conformance import StoreConformance, StoreHarness

from cachedoctor.stores.interface import Store, StoreError
from cachedoctor.stores.local import LocalStore


@pytest.fixture
def harness(tmp_path: Path) -> StoreHarness:
    root = tmp_path / "store"
    root.mkdir()

    @contextlib.contextmanager
    def failing(mode: str) -> Iterator[tuple[Store, str]]:
        assert mode == "not-a-folder"
        blocker = tmp_path / "a-file"
        blocker.write_bytes(b"not a folder")
        yield LocalStore(), str(blocker / "cache")

    (tmp_path / "a-regular-file").write_bytes(b"not a folder")
    return StoreHarness(
        missing=(LocalStore(), str(tmp_path / "a-regular-file" / "cache")),
        store=LocalStore(),
        prefix=str(root),
        other=LocalStore(),
        failing=failing,
        failure_modes=("not-a-folder",),
        object_error=StoreError,
        listing_error=StoreError,
        refused=frozenset({"double-slash", "dot-dot", "dot", "too-long-for-a-file-name"}),
    )


class TestLocalStore(StoreConformance):
    pass
