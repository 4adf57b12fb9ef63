"""musubi-tuner's rules (``layouts/_musubi_*.py``) and preparer (``layouts/prepare/musubi.py``) against
what musubi-tuner 30c658c itself did for the golden datasets (``fixtures/trainers/musubi``, written by
its own caching scripts: ``golden_buckets.json`` is read from its ``ItemInfo``s as they were saved and
from ``prepare_for_training``; ``pixels.npz`` is what its Z-Image VAE received). musubi is not imported."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cachedoctor.layouts import LayoutError
from cachedoctor.layouts import _musubi_rules as rules
from cachedoctor.layouts._images import image_size
from cachedoctor.layouts._musubi_config import MusubiDataset, load_dataset_config
from cachedoctor.layouts.interface import RecomputeSpec
from cachedoctor.layouts.prepare import musubi as prepare
from cachedoctor.repair.model import NotRewritable

GOLD = Path(__file__).resolve().parents[3] / "fixtures" / "trainers" / "musubi"
RECORDED: dict[str, Any] = json.loads((GOLD / "golden_buckets.json").read_text())
TOMLS = ("zi.toml", "wan.toml")
CACHED = [(toml, row) for toml in TOMLS for rows in RECORDED[toml]["cached"].values() for row in rows]
WINDOW = re.compile(r"_(\d{5})-(\d{3})(\.\w+)$")


def header(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    found: dict[str, Any] = json.loads(data[8 : 8 + int.from_bytes(data[:8], "little")])
    return found


def datasets(toml: str) -> dict[str, MusubiDataset]:
    """The TOML's datasets by cache directory (relative to the fixture folder, as musubi ran there)."""
    found = load_dataset_config(str(GOLD / toml), arch=RECORDED[toml]["arch"])
    return {os.path.relpath(d.cache_directory, GOLD): d for d in found}


def cache_id(case: tuple[str, dict[str, Any]]) -> str:
    return case[1]["latent_cache"]


@pytest.mark.parametrize(("toml", "row"), CACHED, ids=[cache_id(c) for c in CACHED])
def test_every_cached_item_is_reproduced(toml: str, row: dict[str, Any]) -> None:
    arch = RECORDED[toml]["arch"]
    folder = next(d for d, rows in RECORDED[toml]["cached"].items() if row in rows)
    dataset = datasets(toml)[folder]
    key = row["item_key"]
    window = WINDOW.search(key)
    if window is None:  # an image: its own size, the dataset's bucket settings
        size = image_size(str(GOLD / key))
        assert size is not None and list(size) == row["original_size"]
        bucket = rules.bucket_resolution(
            size, dataset.resolution, dataset.enable_bucket, dataset.bucket_no_upscale, arch
        )
        name = rules.latent_cache_name(key, size, arch)
        frames = 1
    else:  # a clip window: the bucket is the name's size; the windows follow the frame rules
        clip = WINDOW.sub(r"\3", key)
        facts = RECORDED["clips"][clip]
        bucket = rules.video_bucket_resolution(tuple(facts["frame_size"]), dataset.resolution, arch)
        assert list(bucket) == row["original_size"]
        end = max(dataset.target_frames) if dataset.frame_extraction == "head" else None
        loaded = rules.loaded_frames(facts["frames"], dataset.source_fps, rules.ARCHS[arch].target_fps, end)
        start, count = int(window.group(1)), int(window.group(2))
        assert (start, count) in rules.frame_windows(
            loaded,
            dataset.target_frames,
            dataset.frame_extraction or "head",
            dataset.frame_stride,
            dataset.frame_sample,
        )
        assert rules.window_item_key(clip, (start, count)) == key
        name = rules.latent_cache_name(clip, bucket, arch, (start, count))
        frames = 1 + (count - 1) // 4
    assert list(bucket) == row["bucket_size"][:2] and name == row["latent_cache"]
    h, w = bucket[1] // rules.ARCHS[arch].downscale, bucket[0] // rules.ARCHS[arch].downscale
    expected_shape = [16, h, w] if rules.ARCHS[arch].layout == "CHW" else [16, frames, h, w]
    assert row["latent_shape"] == expected_shape
    written = header(GOLD / folder / name)
    meta = written.pop("__metadata__")
    assert list(written) == [rules.latent_key(arch, h, w, row["latent_dtype"], frames)]
    assert meta == rules.latent_metadata(arch, tuple(row["original_size"]), row["frame_count"])


def test_windows_of_each_clip_dataset_are_all_musubi_cached() -> None:
    """Every window frame_windows gives was cached, and nothing else (head, chunk, slide after fps)."""
    for folder, dataset in datasets("wan.toml").items():
        if dataset.kind != "video":
            continue
        names = sorted(r["latent_cache"] for r in RECORDED["wan.toml"]["cached"][folder])
        ours = []
        for clip in rules.video_items(str(GOLD / os.path.relpath(dataset.video_directory or "", GOLD))):
            facts = RECORDED["clips"][os.path.relpath(clip, GOLD)]
            bucket = rules.video_bucket_resolution(tuple(facts["frame_size"]), dataset.resolution, "wan")
            end = max(dataset.target_frames) if dataset.frame_extraction == "head" else None
            loaded = rules.loaded_frames(facts["frames"], dataset.source_fps, 16.0, end)
            for window in rules.frame_windows(loaded, dataset.target_frames, dataset.frame_extraction or "head"):
                ours.append(rules.latent_cache_name(clip, bucket, "wan", window))
        assert sorted(ours) == names


@pytest.mark.parametrize("toml", TOMLS)
def test_names_parse_as_training_reads_them(toml: str) -> None:
    arch = RECORDED[toml]["arch"]
    for view in RECORDED[toml]["training"]:
        folder = GOLD / view["cache_directory"]
        files = sorted(p.name for p in folder.iterdir())
        latents = [f for f in files if f.endswith(f"_{arch}.safetensors")]
        assert sorted(i["latent_cache"] for i in view["items"]) == latents
        for item in view["items"]:
            parsed = rules.parse_cache_name(item["latent_cache"], view["kind"])
            assert parsed is not None and parsed == rules.parse_cache_name(item["latent_cache"])
            assert (parsed.item_key, list(parsed.size or ()), parsed.arch) == (
                item["item_key"],
                item["image_size"],
                arch,
            )
            assert parsed.window is None if view["kind"] == "image" else parsed.window[1] == item["frame_count"]
            assert parsed.te_name == item["te_cache"] and item["te_cache"] in files
            dataset = datasets(toml)[view["cache_directory"]]
            bucket = rules.bucket_resolution(
                parsed.size, dataset.resolution, dataset.enable_bucket, dataset.bucket_no_upscale, arch
            )
            assert list(bucket) == item["bucket"][:2] and item["repeats"] == dataset.num_repeats
            te = rules.parse_cache_name(item["te_cache"])
            assert te is not None and te.is_te and (te.item_key, te.arch) == (item["item_key"], arch)
        assert {f for f in files if f.endswith("_te.safetensors")} == {i["te_cache"] for i in view["items"]}


@pytest.mark.parametrize("toml", TOMLS)
def test_config_parses_to_what_musubi_built(toml: str) -> None:
    parsed = datasets(toml)
    fields = ("resolution", "enable_bucket", "bucket_no_upscale", "batch_size", "num_repeats", "caption_extension")
    video = ("target_frames", "frame_extraction", "frame_stride", "frame_sample", "max_frames", "source_fps")
    for view in RECORDED[toml]["training"]:
        dataset = parsed[view["cache_directory"]]
        assert dataset.index == view["dataset"] and dataset.kind == view["kind"]
        for field in fields + (video if view["kind"] == "video" else ()):
            value = getattr(dataset, field)
            assert (list(value) if isinstance(value, tuple) else value) == view[field], field


def test_te_files_hold_the_caption_and_key_musubi_writes() -> None:
    for toml in TOMLS:
        arch = rules.ARCHS[RECORDED[toml]["arch"]]
        for view in RECORDED[toml]["training"]:
            for item in view["items"]:
                written = header(GOLD / view["cache_directory"] / item["te_cache"])
                meta = written.pop("__metadata__")
                assert meta["architecture"] == arch.metadata_name and meta["format_version"] == "1.0.1"
                assert [k.replace("bfloat16", "{dtype}") for k in written] == [arch.te_keys[0]]
                assert rules.loaded_as(next(iter(written)))[1]  # varlen: kept as a list by training
                caption = next(GOLD.glob(f"*/**/{item['item_key']}.txt")).read_text().strip()
                assert meta["caption1"] == caption


def test_preparer_equals_what_musubi_fed_its_vae() -> None:
    """RGBA grown with PIL LANCZOS (alpha-weighted), INTER_AREA with a crop, a palette PNG grown."""
    pixels = np.load(GOLD / "pixels.npz")
    assert sorted(pixels.files) == ["zi/images/c_rgba.png", "zi/images/e_big.png", "zi/images/f_pal.png"]
    for name in pixels.files:
        reference = pixels[name]
        spec = RecomputeSpec(
            "latent", str(GOLD / name), "dict", latent_hw=(reference.shape[1] // 8, reference.shape[2] // 8)
        )
        ours = prepare.prepare(spec, 8).pixels.numpy()
        assert ours.dtype == np.float32 and ours.shape == reference.shape
        assert float(np.abs(ours - reference).max()) < 1e-6, name
    clip = RecomputeSpec("latent", str(GOLD / "wan/videos/v_wide.avi"), "dict", latent_hw=(10, 14))
    with pytest.raises(NotRewritable, match="3D video VAE"):
        prepare.prepare(clip, 8)


def test_buckets_match_numpy_argmin_everywhere() -> None:
    for resolution, arch in (((128, 128), "zi"), ((96, 96), "wan"), ((512, 768), "qi"), ((256, 256), "ho1")):
        resos = rules.bucket_resolutions(resolution, True, arch)
        ratios = np.array([w / h for w, h in resos])
        for width in range(16, 400, 13):
            for height in range(16, 400, 11):
                expected = resos[int(np.abs(ratios - width / height).argmin())]
                assert rules.bucket_resolution((width, height), resolution, True, False, arch) == expected
    assert rules.bucket_resolutions((128, 128), True, "zi") == [
        (64, 256), (80, 192), (96, 160), (112, 144), (128, 128), (144, 112), (160, 96), (192, 80), (256, 64)
    ]  # fmt: skip
    assert rules.bucket_resolution((300, 20), (96, 64), False, True, "wan") == (
        96,
        64,
    )  # no buckets: one, no_upscale off
    assert rules.bucket_resolution((30, 70), (96, 96), True, True, "wan") == (16, 64)
    assert rules.argmin([0.5, 0.25, 0.25]) == 1
    with pytest.raises(ValueError, match="too small"):
        rules.bucket_resolutions((16, 16), True, "zi")
    assert rules.resize_plan((100, 100), (128, 128)) == rules.ResizePlan((128, 128), (0, 0), "lanczos")
    assert rules.resize_plan((128, 100), (128, 96)) == rules.ResizePlan((128, 100), (0, 2), "area")  # scale 1: area


def test_frame_windows_follow_musubi_rules() -> None:
    assert rules.round_target_frames([6, 1, 4, 5, 25]) == (1, 5, 25)
    assert rules.frame_windows(13, [1, 6], "head") == [(0, 1), (0, 5)]
    assert rules.frame_windows(13, [5], "chunk") == [(0, 5), (5, 5)]
    assert rules.frame_windows(7, [5], "slide", frame_stride=1) == [(0, 5), (1, 5), (2, 5)]
    assert rules.frame_windows(10, [5], "uniform", frame_sample=1) == [(0, 5)]  # uniform with one sample is head
    assert rules.frame_windows(40, [9], "full", max_frames=30) == [(0, 29)]
    for count, sample in ((13, 3), (100, 7), (6, 4), (9, 9), (5, 2)):
        expected = [(int(i), 5) for i in np.linspace(0, count - 5, sample, dtype=int)]
        assert rules.frame_windows(count, [5], "uniform", frame_sample=sample) == expected
    assert rules.frame_windows(6, [5], "uniform", frame_sample=4) == [(0, 5), (0, 5), (0, 5), (1, 5)]
    with pytest.raises(ValueError, match="not supported"):
        rules.frame_windows(5, [1], "every")
    assert rules.loaded_frames(13, 32.0, 16.0) == 7 and rules.loaded_frames(10, 8.0, 16.0, end=5) == 3
    assert rules.loaded_frames(13, None, None, end=5) == 5


def test_names_and_keys() -> None:
    name = rules.latent_cache_name("v/a_b.c.mp4", (640, 480), "fp", (12, 37), section=2)
    assert name == "a_b.c_00012-037-0002_0640x0480_fp.safetensors"
    parsed = rules.parse_cache_name(name)
    assert parsed == rules.Parsed("a_b.c", "fp", False, (640, 480), (12, 37), 2)
    assert rules.te_cache_name("v/a_b.c.mp4", "fp") == parsed.te_name == "a_b.c_fp_te.safetensors"
    image = rules.parse_cache_name("x_00001-005_0064x0064_wan.safetensors", "image")  # an image named like a window
    assert image == rules.Parsed("x_00001-005", "wan", False, (64, 64))
    for junk in ("notes_zi.safetensors", "a_64_zi.safetensors", "a_0064x0064_zi.pt", "zi.safetensors"):
        assert rules.parse_cache_name(junk) is None
    assert rules.latent_key("f2d", 8, 6, "float32") == "latents_8x6_float32"
    assert rules.latent_key("wan", 8, 6, "bfloat16", frames=2) == "latents_2x8x6_bfloat16"
    key = rules.parse_latent_key("latents_control_0_1x8x8_float8_e4m3fn")
    assert key == rules.LatentKey("latents_control_0", 1, 8, 8, "float8_e4m3fn")
    assert rules.parse_latent_key("clip_bfloat16") is None and rules.parse_latent_key("f_indices_int32") is None
    assert rules.loaded_as("latents_1x8x8_float32") == ("latents", False)
    assert rules.loaded_as("varlen_llm_embed_bfloat16") == ("llm_embed", True)
    assert rules.loaded_as("llm_mask") == ("llm_mask", False)


def test_every_musubi_architecture_is_described() -> None:
    """dataset/architectures.py at 30c658c, short -> full."""
    names = {
        "hv": "hunyuan_video", "wan": "wan", "fp": "framepack", "fk": "flux_kontext", "f2d": "flux_2_dev",
        "f2k4b": "flux_2_klein_4b", "f2k9b": "flux_2_klein_9b", "qi": "qwen_image", "qie": "qwen_image_edit",
        "qil": "qwen_image_layered", "k5": "kandinsky5", "hv15": "hunyuan_video_1_5", "zi": "z_image",
        "ho1": "hidream_o1_image", "i4": "ideogram4", "kr2": "krea2",
    }  # fmt: skip
    assert set(rules.ARCHS) == set(names)
    for short, arch in rules.ARCHS.items():
        assert arch.short == short and "_" not in short
        assert arch.full == names[short]
        assert arch.metadata_name == ("qwen_image" if short in ("qie", "qil") else names[short])  # cache_io.py:178
        assert arch.latent_keys[0].startswith("latents_") and arch.te_keys
        assert (arch.recompute_why is None) == (short == "zi")
        assert arch.recompute_why is None or arch.recompute_why.endswith(".py")
    assert [s for s, a in rules.ARCHS.items() if a.video] == ["hv", "wan", "fp", "k5", "hv15"]
    with pytest.raises(ValueError, match="unknown musubi-tuner architecture"):
        rules.arch_of("sdxl")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('[[datasets]]\nvideo_directory = "v"\ncaption_extension = ".txt"\nsource_fps = 30\n', "write 30.0"),
        ('[general]\ncache_directory = "c"\n[[datasets]]\nimage_directory = "i"\n', "does not allow 'cache_directory'"),
        ('flag = 1\n[[datasets]]\nimage_directory = "i"\n', "top-level 'flag'"),
        ('[[datasets]]\nimage_directory = "i"\n', "no caption_extension"),
        ('[[datasets]]\nimage_jsonl_file = "i.jsonl"\n', "no cache_directory"),
        ('[[datasets]]\ncaption_extension = ".txt"\n', "no image_directory"),
        ('[[datasets]]\nimage_directory = "i"\ntarget_frames = [1]\n', "does not allow 'target_frames'"),
        ('[[datasets]]\nvideo_directory = "v"\ncaption_extension = ".t"\nframe_extraction = "all"\n', "frame_extraction"),
        ('[[datasets]]\nimage_directory = "i"\ncaption_extension = ".t"\nresolution = [1, 2, 3]\n', r"\[W, H\]"),
        ('[general]\ncaption_extension = ".t"\n[[datasets]]\nimage_directory = "i"\n[[datasets]]\nimage_directory = "j"\ncache_directory = "i"\n', "share the cache directory"),
        ('[[datasets]]\nvideo_directory = "v"\ncaption_extension = ".t"\n', "zi cannot use"),
    ],
)  # fmt: skip
def test_configs_musubi_refuses(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "d.toml"
    path.write_text(text)
    with pytest.raises(LayoutError, match=match):
        load_dataset_config(str(path), arch="zi" if "zi" in match else "wan")


def test_config_defaults_fallbacks_and_json(tmp_path: Path) -> None:
    config = {
        "general": {"resolution": [96, 64], "caption_extension": ".txt", "bucket_no_upscale": True},
        "datasets": [
            {"image_directory": "img", "flux_kontext_no_resize_control": True},
            {"video_directory": "vid", "target_frames": [1, 4, 9, 10], "frame_extraction": "uniform"},
        ],
    }
    (tmp_path / "d.json").write_text(json.dumps(config))
    image, video = load_dataset_config(str(tmp_path / "d.json"), arch="wan", cli={"batch_size": 3})
    assert (image.cache_directory, image.resolution, image.enable_bucket, image.bucket_no_upscale) == (
        str(tmp_path / "img"), (96, 64), False, False,
    )  # fmt: skip
    assert (image.batch_size, image.num_repeats, image.no_resize_control, image.fp_latent_window_size) == (
        3,
        1,
        True,
        9,
    )
    assert (video.kind, video.cache_directory, video.target_frames, video.frame_extraction) == (
        "video", str(tmp_path / "vid"), (1, 9), "head",
    )  # fmt: skip
    assert (video.max_frames, video.frame_stride, video.source_fps) == (129, 1, None)
