"""``--layout auto`` guesses the layout from a bounded number of directory entries, so guessing
never lists a million-file cache before the scan lists it again. One walk asks every layout
(``layouts/auto.py``), so the budget is ``_images.DETECT_ENTRIES`` for all of them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cachedoctor.layouts import _images, kohya, onetrainer
from cachedoctor.layouts.interface import LayoutOptions


def _kohya_pair_after_filler(root: Path, filler: int) -> None:
    (root / "a").mkdir(parents=True)
    for i in range(filler):
        (root / "a" / f"{i:04d}.pt").write_bytes(b"")
    (root / "z").mkdir()
    (root / "z" / "cat.png").write_bytes(b"")
    (root / "z" / "cat_1024x1024_sdxl.npz").write_bytes(b"")


def test_kohya_detection_stops_at_the_entry_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _kohya_pair_after_filler(tmp_path, filler=30)
    layout = kohya.KohyaLayout()
    assert layout.detect([str(tmp_path)], LayoutOptions()) is not None  # within the real budget: found
    monkeypatch.setattr(_images, "DETECT_ENTRIES", 10)
    assert layout.detect([str(tmp_path)], LayoutOptions()) is None  # "a" alone spends the budget


def test_walk_images_without_a_budget_lists_everything(tmp_path: Path) -> None:
    _kohya_pair_after_filler(tmp_path, filler=30)
    assert [os.path.basename(f) for f, _, _ in _images.walk_images(str(tmp_path), budget=10)] == [tmp_path.name, "a"]
    assert [os.path.basename(f) for f, _, _ in _images.walk_images(str(tmp_path))] == [tmp_path.name, "a", "z"]


def test_onetrainer_detection_checks_variation_folders_without_listing_them(tmp_path: Path) -> None:
    variation = tmp_path / "image" / "group" / "variation-0"
    variation.mkdir(parents=True)
    (variation / "aggregate.pt").write_bytes(b"")
    for i in range(50):
        (variation / f"{i}.pt").write_bytes(b"")
    (tmp_path / "loop").symlink_to(tmp_path)  # a symlink loop is not followed
    assert onetrainer.OneTrainerLayout().detect([str(tmp_path)], LayoutOptions()) == (
        f"{variation / 'aggregate.pt'} indexes the cache"
    )


def test_onetrainer_detection_gives_up_at_the_entry_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(30):
        (tmp_path / "a" / f"d{i:02d}").mkdir(parents=True)
    (tmp_path / "b" / "variation-0").mkdir(parents=True)
    (tmp_path / "b" / "variation-0" / "aggregate.pt").write_bytes(b"")
    assert onetrainer.OneTrainerLayout().detect([str(tmp_path)], LayoutOptions()) is not None
    monkeypatch.setattr(_images, "DETECT_ENTRIES", 10)
    assert onetrainer.OneTrainerLayout().detect([str(tmp_path)], LayoutOptions()) is None
