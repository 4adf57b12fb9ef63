"""The walk of listed stores (``walk.listed_folders``: any store's sorted listing grouped into
folders by key) finds, on the local store, the folders and files the file-system walk finds in
the shipped fixture tree: the grouping written for object stores is the one rule for every
store. (The scan keeps the file-system walk for local targets because only a file system has
what it also judges: dangling links, FIFOs, symlink loops.)"""

from __future__ import annotations

from pathlib import Path

from cachedoctor.scan.targets import PREFIX, resolve_target
from cachedoctor.scan.walk import listed_folders, walk
from cachedoctor.stores.local import LocalStore

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"


def _plain(root: Path) -> bool:
    """No symlink and no special file below ``root`` (what only the file-system walk sees)."""
    return all(not p.is_symlink() and (p.is_file() or p.is_dir()) for p in root.rglob("*"))


def test_the_listing_walk_on_the_local_store_finds_the_file_system_walks_folders() -> None:
    roots = [
        p
        for p in sorted((FIXTURES / "caches").iterdir()) + sorted((FIXTURES / "datasets").iterdir())
        if p.is_dir() and _plain(p)
    ]
    assert len(roots) >= 5
    for root in roots:
        target = resolve_target(str(root), LocalStore())
        assert target.kind == PREFIX
        listed = {f.path: f.files for f in listed_folders(target, ("*.txt",))}
        walked = {f.path: f.files for f in walk([str(root)], [], ("*.txt",))}
        assert listed == walked, root
        assert all(
            f.listed is not None and [i.url for i in f.listed] == f.files
            for f in listed_folders(resolve_target(str(root), LocalStore()), ())
        )
