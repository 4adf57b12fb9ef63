"""``layouts/_listing.py``: the scout's questions asked of a folder's joined names answer as the
loops over the names would, whatever the names (letter case, non-ASCII, names that are another
name's suffix or prefix), and the layouts claim a scouted folder as they claim a plain set."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from cachedoctor.layouts import LAYOUTS
from cachedoctor.layouts._images import IMAGE_SUFFIXES
from cachedoctor.layouts._listing import Listing, any_ending, any_image, any_starting
from cachedoctor.layouts._scout import scout

_PIECES = [
    "a", "Σ", "ς", "İ", "\u212a", "ß", "x", "_", "-", ".", "shard_", "variation-", ".npz", ".NPZ", ".png",
    ".PnG", ".jpeg", ".safetensors", ".toml", "\u0130.png", ".pt", "é", " ",
]  # fmt: skip


def _names(rng: random.Random) -> set[str]:
    return {"".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(0, 12))}


@pytest.mark.parametrize("seed", range(300))
def test_each_question_answers_as_the_loop_over_the_names(seed: int) -> None:
    rng = random.Random(seed)
    names = _names(rng)
    listing = Listing(names)
    for suffixes in ((".npz",), (".safetensors",), (".toml",), (".pt", ".npz"), ("z",), ("Σ",)):
        assert any_ending(listing, *suffixes) == any(n.endswith(suffixes) for n in names), (names, suffixes)
        assert any_ending(names, *suffixes) == any_ending(listing, *suffixes)
    for prefix in ("shard_", "variation-", "a", "İ"):
        assert any_starting(listing, prefix) == any(n.startswith(prefix) for n in names), (names, prefix)
    assert any_image(listing) == any(n.lower().endswith(IMAGE_SUFFIXES) for n in names), names
    assert listing == names


def test_a_name_that_only_contains_a_suffix_is_not_taken_for_one() -> None:
    listing = Listing({"a.npz.bak", "shard", "xshard_1.bin", "photo.png.txt"})
    assert not any_ending(listing, ".npz")
    assert not any_starting(listing, "shard_")
    assert not any_image(listing)


def test_the_scout_claims_as_before_in_a_kohya_folder(tmp_path: Path) -> None:
    (tmp_path / "cat.PNG").write_bytes(b"")
    (tmp_path / "cat_1024x1024_sdxl.npz").write_bytes(b"")
    found = scout(str(tmp_path), list(LAYOUTS.values()))
    assert [(layout.name, claim.marker) for layout, claim in found.claims] == [
        ("kohya", str(tmp_path / "cat_1024x1024_sdxl.npz"))
    ]
