"""diffusion-pipe's dataset rules (``layouts/_diffusion_pipe_rules.py``) against the caches
diffusion-pipe 8f83dbf wrote itself (``fixtures/trainers/diffusion_pipe``, made by its
make_golden.py): from the dataset TOML and the images alone, every cached item's folder and its
place in the folder; and the committed metadata.db files against ``golden_items.json``."""

from __future__ import annotations

import json
import os
import sqlite3
from collections import defaultdict
from pathlib import Path

import pytest

from cachedoctor.layouts import LayoutError
from cachedoctor.layouts import _diffusion_pipe_rules as rules
from cachedoctor.layouts._images import image_size

GOLD = Path(__file__).resolve().parents[3] / "fixtures" / "trainers" / "diffusion_pipe"
GOLDEN = json.loads((GOLD / "golden_items.json").read_text())["folders"]
ROUND_TO = 16  # Flux: CommonPipeline.pixels_round_to_multiple


def _config() -> rules.DPipeConfig:
    return rules.load_dataset_config(str(GOLD / "dataset.toml"), base=str(GOLD))


def _expected_folders() -> dict[str, list[list[str | None]]]:
    """Per cache folder (relative to GOLD), the image_specs in cache order, from the rules alone."""
    d = _config().directories[0]
    root = os.path.relpath(d.cache_root("flux"), GOLD)
    names = rules.listed([e.name for e in os.scandir(d.resolved) if e.is_file()])
    order = [names[i] for i in rules.directory_order(d, len(names))]
    groups: dict[tuple, list[str]] = defaultdict(list)
    for name in order:  # every golden image has a caption and opens
        size = image_size(os.path.join(d.resolved, name))
        assert size is not None
        key = rules.group_key(size, 1, d)
        assert key is not None
        groups[key].append(name)
    folders: dict[str, list[list[str | None]]] = {}
    for group, members in groups.items():
        specs: list[list[str | None]] = [[None, f"{d.path}/{n}"] for n in members]
        for i in (1, 2):  # Flux: CLIP and T5; the text embeddings keep the directory order
            folders[f"{root}/{rules.ar_frames_folder_name(group)}/text_embeddings_{i}"] = specs
        for key in rules.size_buckets(group, d, ROUND_TO):
            perm = rules.size_bucket_order(key, len(specs))
            folders[f"{root}/{rules.cache_folder_name(key)}/latents"] = [specs[k] for k in perm]
    for i in (1, 2):
        folders[f"{root}/uncond_text_embeddings_{i}"] = [[None, None]]
    return folders


def test_config_is_what_diffusion_pipe_used() -> None:
    cfg = _config()
    assert len(cfg.directories) == 1
    d = cfg.directories[0]
    assert (d.path, d.resolved, d.num_repeats) == ("images", str(GOLD / "images"), 2)
    assert (d.enable_ar_bucket, d.resolutions, d.ars, d.frame_buckets) == (True, (96, 128), (0.5, 1.0, 2.0), (1,))
    assert d.size_buckets is None and d.shuffle_metadata and d.skip_empty_caption
    assert d.cache_root("flux") == str(GOLD / "images" / "cache" / "flux")


def test_every_golden_item_in_its_folder_and_place() -> None:
    expected = _expected_folders()
    recorded = {folder: [item["image_spec"] for item in v["items"]] for folder, v in GOLDEN.items()}
    assert recorded == expected


def test_size_buckets_of_the_golden_groups() -> None:
    d = _config().directories[0]
    assert rules.size_buckets((1.0, 1), d) == [(1.0, 96, 96, 1), (1.0, 128, 128, 1)]
    assert rules.size_buckets((2.0, 1), d) == [(2.0, 128, 64, 1), (2.0, 176, 96, 1)]
    assert rules.size_buckets((0.5, 1), d) == [(0.5, 64, 128, 1), (0.5, 96, 176, 1)]
    assert [rules.cache_folder_name(k) for k in rules.bucket_for((200, 80), 1, d)] == [
        "cache_2.000x128x64x1",
        "cache_2.000x176x96x1",
    ]
    assert rules.resized_size((2.0, 176, 96, 1)) == (176, 96)


@pytest.mark.parametrize("folder", sorted(GOLDEN))
def test_metadata_db_matches_golden_items(folder: str) -> None:
    recorded = GOLDEN[folder]
    path = GOLD / folder
    con = sqlite3.connect(f"file:{path / 'metadata.db'}?mode=ro", uri=True)
    try:
        assert con.execute("SELECT value FROM fingerprint").fetchall() == [(recorded["fingerprint"],)]
        tables = sorted(n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'"))
        assert tables == recorded["tables"]
        items = con.execute("SELECT shard, shard_index FROM items ORDER BY rowid").fetchall()
        shards = {
            int(t.split("_")[1]): con.execute(f"SELECT offset, size FROM {t} ORDER BY rowid").fetchall()
            for t in tables
            if t.startswith("shard_")
        }
    finally:
        con.close()
    assert [(i["shard"], i["shard_index"]) for i in recorded["items"]] == items
    for item in recorded["items"]:
        assert shards[item["shard"]][item["shard_index"]] == (item["offset"], item["size"])
    for shard, rows in shards.items():  # blobs back to back from offset 0, each a torch.save zip
        data = (path / f"shard_{shard}.bin").read_bytes()
        assert len(data) == recorded["shard_bytes"][str(shard)] == sum(size for _, size in rows)
        assert [offset for offset, _ in rows] == [sum(s for _, s in rows[:k]) for k in range(len(rows))]
        assert all(data[offset : offset + 4] == b"PK\x03\x04" for offset, _ in rows)


def test_two_shards_in_one_folder() -> None:
    two = [f for f, v in GOLDEN.items() if len(v["shard_bytes"]) > 1]
    assert two == ["images/cache/flux/cache_1.000x128x128x1/latents"]


def test_item_keys_per_kind() -> None:
    latents = GOLDEN["images/cache/flux/cache_1.000x96x96x1/latents"]["items"][0]["keys"]
    assert latents["latents"] == {"shape": [16, 12, 12], "dtype": "float32"}
    assert set(latents) == {"latents", "mask", "image_spec", "caption"}
    assert latents["caption"]["type"] == "list"
    clip = GOLDEN["images/cache/flux/ar_frames_1.000_1/text_embeddings_1"]["items"][0]["keys"]
    assert set(clip) == {"clip_embed", "image_spec"}


def test_bucket_suffix_and_folder_names() -> None:
    assert rules.bucket_suffix((0.6666, 1)) == "0.667_1"
    assert rules.bucket_suffix((512, 768, 33)) == "512x768x33"
    assert rules.cache_folder_name((1.0, 512, 512, 1)) == "cache_1.000x512x512x1"
    assert rules.legacy_cache_folder_name((1.0, 512, 512, 1)) == "cache_512x512x1"
    assert rules.ar_frames_folder_name((1.5, 33)) == "ar_frames_1.500_33"
    with pytest.raises(ValueError):
        rules.bucket_suffix((1,))
    assert rules.round_to_nearest_multiple(136, 16) == 128  # 8.5 rounds half to even, as Python's round
    assert rules.round_to_nearest_multiple(152, 16) == 160


def _parse(text: str, tmp_path: Path) -> rules.DPipeConfig:
    (tmp_path / "d.toml").write_text(text)
    return rules.load_dataset_config(str(tmp_path / "d.toml"), base=str(tmp_path))


def test_directory_overrides_and_defaults(tmp_path: Path) -> None:
    cfg = _parse(
        "resolutions = [512]\nenable_ar_bucket = true\nmin_ar = 0.5\nmax_ar = 2.0\nnum_ar_buckets = 7\n"
        "frame_buckets = [33]\nnum_repeats = 3\n"
        "[[directory]]\npath = 'a/'\n"
        "[[directory]]\npath = '/abs/b'\nresolutions = [[640, 480]]\nar_buckets = [[512, 512], [448, 576]]\n"
        "num_repeats = 1\nshuffle_metadata = false\n",
        tmp_path,
    )
    a, b = cfg.directories
    assert (a.resolutions, a.frame_buckets, a.num_repeats) == ((512,), (1, 33), 3)
    assert a.ars == (0.5, 0.63, 0.794, 1.0, 1.26, 1.587, 2.0)
    assert a.resolved == str(tmp_path / "a") and rules.directory_order(a, 3) == rules.permutation(
        3, rules.seed_from_hash("a")
    )
    assert (b.resolutions, b.ars, b.resolved, b.shuffle_metadata) == ((554.256,), (0.778, 1.0), "/abs/b", False)
    assert rules.directory_order(b, 3) == [0, 1, 2]
    assert rules.group_key((1000, 500), 40, a) == (2.0, 33)
    assert rules.group_key((1000, 500), 20, a) is None  # a video shorter than 33 frames and not an image


def test_size_buckets_mode_keeps_diffusion_pipes_candidate_order(tmp_path: Path) -> None:
    """dataset.py:856-857 indexes the frame-sorted size_buckets with the sorted unique ARs' order."""
    cfg = _parse("size_buckets = [[768, 512, 1], [512, 512, 1]]\n[[directory]]\npath = 'x'\n", tmp_path)
    d = cfg.directories[0]
    assert d.ars == (1.0, 1.5)
    assert rules.group_key((512, 512), 1, d) == (768, 512, 1)  # not (512, 512, 1)
    assert rules.bucket_for((512, 512), 1, d) == [(768, 512, 1)]
    assert rules.cache_folder_name((768, 512, 1)) == "cache_768x512x1"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("resolutions = [512]\n", "[[directory]]"),
        ("[[directory]]\npath = 'x'\nresolutions = [512]\n", "top level"),
        ("resolutions = [512]\n[[directory]]\npath = 'x'\nenable_ar_bucket = true\nmin_ar = 0.5\n", "min_ar"),
        ("resolutions = [512]\n[[directory]]\npath = 'x'\nnum_repeats = 0\n", "num_repeats"),
        ("resolutions = [512\n", "TOML"),
        ("resolutions = [512]\n[[directory]]\nnum_repeats = 1\n", "no path"),
    ],
)
def test_bad_configs(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(LayoutError, match=words.replace("[", r"\[").replace("]", r"\]")):
        _parse(text, tmp_path)


def test_model_names() -> None:
    assert rules.MODEL_NAMES["flux"] == "flux" and rules.MODEL_NAMES["hunyuan_video_15"] == "hunyuan_video_1.5"
    assert "wan2.2_5b" in rules.ALT_MODEL_NAMES["wan"] and rules.PIXELS_ROUND_TO_MULTIPLE["wan2.2_5b"] == 32


def test_aspect_buckets_equal_numpys_geomspace_without_numpy() -> None:
    """Planning imports no numpy: the plain-Python geomspace rounds to numpy's buckets."""
    import random

    import numpy as np

    from cachedoctor.layouts._diffusion_pipe_rules import ROUND_DECIMAL_DIGITS, _geomspace_ars

    rng = random.Random(0)
    for _ in range(2_000):
        lo, hi, n = round(rng.uniform(0.1, 1), 3), round(rng.uniform(1, 5), 3), rng.randint(1, 12)
        want = tuple(float(x) for x in sorted({round(x, ROUND_DECIMAL_DIGITS) for x in np.geomspace(lo, hi, n)}))
        assert _geomspace_ars(lo, hi, n) == want, (lo, hi, n)
