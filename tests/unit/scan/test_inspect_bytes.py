"""Repair judges bytes in memory (scan.inspect_bytes, formats.read_bytes) exactly as the scan judges the same bytes in a file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from factories import save_pt, saved_on

from cachedoctor.formats import read_bytes, read_file
from cachedoctor.scan import inspect_bytes, inspect_file


def _kinds(outcome: object) -> list[tuple[str, str]]:
    return sorted((f.kind, f.message) for f in outcome.findings)  # type: ignore[attr-defined]


def test_a_healthy_file_in_memory_is_judged_as_on_disk(tmp_path: Path) -> None:
    path = save_pt(tmp_path / "a.pt", torch.randn(4, 8, 8).to(torch.bfloat16))
    on_disk, in_memory = inspect_file(str(path), deep=True), inspect_bytes(str(path), path.read_bytes())
    assert (in_memory.status, _kinds(in_memory)) == ("read", []) == (on_disk.status, _kinds(on_disk))
    assert in_memory.group == on_disk.group and in_memory.peer == on_disk.peer
    assert in_memory.shapes == on_disk.shapes == (("", (4, 8, 8)),)


def test_a_nan_and_a_device_tag_in_memory_are_found_as_on_disk(tmp_path: Path) -> None:
    bad = torch.randn(4, 8, 8)
    bad[0, 0, 0] = float("nan")
    with saved_on("cuda:0"):
        path = save_pt(tmp_path / "b.pt", bad)
    in_memory = inspect_bytes(str(path), path.read_bytes())
    assert {k for k, _m in _kinds(in_memory)} == {"non-finite", "device-tagged"}
    assert _kinds(in_memory) == _kinds(inspect_file(str(path), deep=True))


def test_torn_bytes_in_memory_are_a_corrupt_archive(tmp_path: Path) -> None:
    path = save_pt(tmp_path / "c.pt", torch.randn(4, 8, 8))
    torn = path.read_bytes()[:-100]
    in_memory = inspect_bytes(str(path), torn)
    path.write_bytes(torn)
    assert [k for k, _m in _kinds(in_memory)] == ["corrupt-archive"]
    assert _kinds(in_memory) == _kinds(inspect_file(str(path), deep=True))


@pytest.mark.parametrize("deep", [False, True])
def test_the_readers_verdict_on_bytes_is_read_files(tmp_path: Path, deep: bool) -> None:
    path = save_pt(tmp_path / "d.pt", {"latent": torch.randn(4, 8, 8)})
    assert read_bytes(str(path), path.read_bytes(), deep=deep) == read_file(str(path), deep=deep)
