"""The seam's proof on the write side: the repair written for object stores, whose every write
is a compare-and-swap on a ``Store`` (versioned read, kept copy, conditional replace), run on
the local-disk store, repairs a cache exactly as the local file pipeline does (batched fsyncs,
hard links, renames): the same items with the same end states, byte-identical files, the same
findings after, and the same files kept in the quarantine."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from cachedoctor.layouts import LayoutName, LayoutOptions
from cachedoctor.repair.run import RepairOptions, RepairOutcome, repair
from cachedoctor.scan import ScanOptions

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "caches" / "simpletuner" / "vae"


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def _kept(folder: Path) -> dict[str, str]:
    runs = list((folder / ".cachedoctor" / "quarantine").iterdir())
    assert len(runs) == 1
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in runs[0].iterdir() if p.name != ".records.jsonl"}


def _states(outcome: RepairOutcome) -> list[tuple[str, str, str]]:
    return sorted((Path(r.path).name, r.kind.value, r.state.value) for r in outcome.results)


def test_the_store_repair_on_the_local_store_equals_the_file_pipeline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cachedoctor.repair.store_flow import repair_store

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # the store flow's journal
    by_store, by_files = tmp_path / "store" / "vae", tmp_path / "files" / "vae"
    shutil.copytree(FIXTURE, by_store)
    shutil.copytree(FIXTURE, by_files)
    before = _digests(by_store)
    options = RepairOptions(scan=ScanOptions(workers=1))

    stored = repair_store([str(by_store)], options, ["repair"], lambda _: True, lambda _: None)
    filed = repair(
        [str(by_files)], LayoutName.AUTO, LayoutOptions(), options, ["repair"], lambda _: True, lambda _: None
    )

    assert _states(stored) == _states(filed)
    done = {state for _, _, state in _states(stored)}
    assert "verified" in done and "blocked" in done  # rewrites and moves done, recomputes refused
    assert _digests(by_store) == _digests(by_files) != before
    assert stored.after is not None and filed.after is not None
    assert [(f.kind, Path(f.path).name) for f in stored.after.findings] == [
        (f.kind, Path(f.path).name) for f in filed.after.findings
    ]
    assert _kept(by_store) == _kept(by_files)
    assert set(_kept(by_store)) <= set(before)  # what was replaced or moved, as it was
