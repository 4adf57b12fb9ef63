"""Repair judges bytes in memory exactly as the scan judges the same bytes in a file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from factories import save_pt, saved_on

from cachedoctor.formats import read_file
from cachedoctor.repair.in_memory import meta_of, outcome_of
from cachedoctor.scan import inspect_file


def _kinds(outcome: object) -> list[tuple[str, str]]:
    return sorted((f.kind, f.message) for f in outcome.findings)  # type: ignore[attr-defined]


def test_a_healthy_file_in_memory_is_judged_as_on_disk(tmp_path: Path) -> None:
    path = save_pt(tmp_path / "a.pt", torch.randn(4, 8, 8).to(torch.bfloat16))
    on_disk, in_memory = inspect_file(str(path), deep=True), outcome_of(str(path), path.read_bytes())
    assert (in_memory.status, _kinds(in_memory)) == ("read", []) == (on_disk.status, _kinds(on_disk))
    assert in_memory.group == on_disk.group and in_memory.peer == on_disk.peer
    assert in_memory.shapes == on_disk.shapes == (("", (4, 8, 8)),)


def test_a_nan_and_a_device_tag_in_memory_are_found_as_on_disk(tmp_path: Path) -> None:
    bad = torch.randn(4, 8, 8)
    bad[0, 0, 0] = float("nan")
    with saved_on("cuda:0"):
        path = save_pt(tmp_path / "b.pt", bad)
    in_memory = outcome_of(str(path), path.read_bytes())
    assert {k for k, _m in _kinds(in_memory)} == {"non-finite", "device-tagged"}
    assert _kinds(in_memory) == _kinds(inspect_file(str(path), deep=True))


def test_torn_bytes_in_memory_are_a_corrupt_archive(tmp_path: Path) -> None:
    path = save_pt(tmp_path / "c.pt", torch.randn(4, 8, 8))
    torn = path.read_bytes()[:-100]
    in_memory = outcome_of(str(path), torn)
    path.write_bytes(torn)
    assert [k for k, _m in _kinds(in_memory)] == ["corrupt-archive"]
    assert _kinds(in_memory) == _kinds(inspect_file(str(path), deep=True))


def test_the_restricted_readers_verdict_on_bytes_is_read_files(tmp_path: Path) -> None:
    path = save_pt(tmp_path / "d.pt", {"latent": torch.randn(4, 8, 8)})
    assert meta_of(str(path), path.read_bytes(), deep=False) == read_file(str(path), deep=False)


@pytest.mark.parametrize("deep", [False, True])
def test_without_bytes_the_file_is_read(tmp_path: Path, deep: bool) -> None:
    path = save_pt(tmp_path / "e.pt", torch.randn(2, 2))
    assert meta_of(str(path), None, deep=deep) == read_file(str(path), deep=deep)
