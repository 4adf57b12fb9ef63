"""ai-toolkit's cache rules (``layouts/_aitoolkit_rules.py``, ``_aitoolkit_config.py``) and image
preparation (``layouts/prepare/aitoolkit.py``) against the golden caches ai-toolkit 27a03a9 wrote
itself (``fixtures/trainers/aitoolkit``, made by its make_golden.py): every item's info dicts,
hashes and names rebuilt from the image and the job YAML alone, each file's metadata inverted to its
name's hash, ai-toolkit's own bucket choices for many sizes, and the exact pixels it encoded."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from cachedoctor.layouts import _aitoolkit_config as config
from cachedoctor.layouts import _aitoolkit_rules as rules
from cachedoctor.layouts.interface import LayoutError

GOLD = Path(__file__).resolve().parents[3] / "fixtures" / "trainers" / "aitoolkit"
ITEMS: list[dict[str, Any]] = json.loads((GOLD / "golden_items.json").read_text())["items"]
IDS = [f"{r['latent_file'].split('/')[-1]}@{r['resolution']}" for r in ITEMS]
FAMILY_YAML = {"sd15": "sd15.yaml", "flux": "flux.yaml"}


def dataset(family: str) -> config.AiToolkitDataset:
    pytest.importorskip("yaml")
    (only,) = config.load_job_config(str(GOLD / FAMILY_YAML[family]))
    return only


def read_metadata(path: Path) -> dict[str, str] | None:
    """A safetensors header's ``__metadata__``, read without safetensors."""
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
    return header.get("__metadata__")


def read_tensors(path: Path) -> dict[str, tuple[list[int], str]]:
    with open(path, "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    return {k: (v["shape"], v["dtype"]) for k, v in header.items() if k != "__metadata__"}


def test_job_yaml_parses_as_ai_toolkit_resolves_it() -> None:
    sd15, flux = dataset("sd15"), dataset("flux")
    assert sd15.folder_path == str(GOLD / "sd15" / "images") and sd15.resolutions == (96, 128)
    assert (sd15.process_type, sd15.caption_ext, sd15.trigger_word, sd15.flip_x) == ("sd_trainer", ".txt", "sks", True)
    assert sd15.cache_latents_to_disk and sd15.cache_text_embeddings  # the latter from train.cache_text_embeddings
    assert sd15.model.arch == "sd1" and sd15.model.latent_space_version == "sd1"
    assert sd15.model.text_embedding_space_version == "sd1" and sd15.model.bucket_divisibility == 16
    assert sd15.model.latent_dtype == "F32" and sd15.bucket_tolerance == 64  # the YAML default, unused
    assert flux.model.arch == "flux" and flux.model.latent_space_version == "flux1"  # from is_flux: true
    assert flux.model.bucket_divisibility == 32 and flux.trigger_word is None and flux.resolutions == (128,)
    assert sd15.hazards() == () and flux.hazards() == ()


@pytest.mark.parametrize("item", ITEMS, ids=IDS)
def test_names_rebuilt_from_image_and_yaml(item: dict[str, Any]) -> None:
    ds = dataset(item["family"])
    image = str(GOLD / item["image"])
    size = rules.image_size(image)  # after EXIF rotation, as ai-toolkit records it
    assert list(size) == item["image_size"]
    (where,) = [p for p in rules.buckets(size, ds) if p.resolution == item["resolution"]]
    assert [where.scale_to_width, where.scale_to_height] == item["scale_to"]
    assert [where.crop_x, where.crop_y, where.crop_width, where.crop_height] == item["crop"]
    info = rules.latent_info(os.path.basename(image), where, ds, flip_x=item["flip_x"])
    assert list(info.items()) == [tuple(kv) for kv in item["latent_info"]]  # same keys, values, order
    assert os.path.relpath(rules.latent_name(image, info), GOLD) == item["latent_file"]
    assert read_tensors(GOLD / item["latent_file"])["latent"] == (
        [ds.model.family.latent_channels, *where.latent_hw(8)] if ds.model.family else None,
        ds.model.latent_dtype,
    )
    caption = rules.cache_caption(rules.raw_caption(image, ds), ds)
    assert caption == item["caption"]
    text = rules.text_info(caption, ds.model.text_embedding_space_version or "")
    assert list(text.items()) == [tuple(kv) for kv in item["text_info"]]
    assert os.path.relpath(rules.text_name(image, text), GOLD) == item["text_file"]
    if "blank_text_file" in item:
        blank = rules.text_info(rules.dropout_caption(ds), ds.model.text_embedding_space_version or "")
        assert os.path.relpath(rules.text_name(image, blank), GOLD) == item["blank_text_file"]


@pytest.mark.parametrize("item", ITEMS, ids=IDS)
def test_metadata_inverts_to_the_names_hash(item: dict[str, Any]) -> None:
    path = GOLD / item["latent_file"]
    metadata = read_metadata(path)
    assert metadata is not None and metadata == item["latent_metadata"]
    info = rules.info_from_metadata(metadata)
    assert info is not None and list(info.items()) == [tuple(kv) for kv in item["latent_info"]]
    split = rules.split_name(path.name)
    assert split is not None and split[0] == Path(item["image"]).stem
    assert rules.settings_hash(info) == split[1]
    assert rules.metadata_for(info) == metadata  # what a writer puts back
    text_path = GOLD / item["text_file"]
    assert rules.info_from_metadata(read_metadata(text_path)) is None  # PromptEmbeds.save writes none
    assert set(read_tensors(text_path)) == set(item["text_keys"])


def test_every_cache_file_is_accounted_for() -> None:
    """No file in the golden cache folders that the items do not name (the blank embeddings included)."""
    named = {r["latent_file"] for r in ITEMS} | {r["text_file"] for r in ITEMS}
    named |= {r["blank_text_file"] for r in ITEMS if "blank_text_file" in r}
    on_disk = {str(p.relative_to(GOLD)) for p in GOLD.glob("*/images/_*/*.safetensors")}
    assert on_disk == named
    assert len({r["latent_file"] for r in ITEMS if r["family"] == "sd15"}) == 22  # two items of e_small share


def test_buckets_equal_ai_toolkits_own_setup_buckets() -> None:
    """1246 placements by ai-toolkit's BucketsMixin.setup_buckets (golden_buckets.json)."""
    cases = json.loads((GOLD / "golden_buckets.json").read_text())
    wrong = []
    for row in cases["rows"]:
        resolution, divisibility, scale, square, width, height, *want = row
        where = rules.placement((width, height), resolution, divisibility, scale=scale, square_crop=square)
        got = [where.scale_to_width, where.scale_to_height, where.crop_x, where.crop_y]
        if got + [where.crop_width, where.crop_height] != want:
            wrong.append((row, got))
    assert not wrong and len(cases["rows"]) == 1246


def test_bucket_rules_by_hand() -> None:
    # never more pixels than the image (no upscaling past its area), nor than resolution**2
    assert rules.bucket_for_image_size(60, 90, 128, 16) == (64, 80)
    assert rules.bucket_for_image_size(2000, 1000, 512, 16) == (736, 352)
    # the float product is ceiled: 200 * 1.12 = 224.00000000000003 -> 225
    where = rules.placement((80, 200), 128, 32)
    assert (where.scale_to_width, where.scale_to_height, where.crop_x, where.crop_width) == (90, 225, 13, 64)
    off = rules.placement((190, 150), 96, None, buckets=False)  # buckets off: no resolution in the name
    assert (off.scale_to_width, off.crop_width, off.out_size, off.latent_hw()) == (190, 190, (96, 96), (12, 12))
    assert rules.placement((190, 150), 96, 16, random_crop=True).crop_x is None


def test_captions_as_ai_toolkit_builds_them(tmp_path: Path) -> None:
    ds = dataset("sd15")
    assert rules.cache_caption("a, b,c", ds) == "sks a,  b, c"  # ', '.join(split(',')): spaces doubled
    assert rules.cache_caption("[trigger] x", ds) == "sks x"
    assert rules.cache_caption("x sks y", ds) == "x sks y"
    assert rules.inject_trigger("[name] and [trigger]", None) == " and "
    assert rules.dropout_caption(ds) == "sks "
    image = tmp_path / "a.png"
    (tmp_path / "a.txt").write_bytes(b"line one\r\nline two\r\n")
    assert rules.raw_caption(str(image), ds) == "line one\nline two\n"  # text mode, nothing stripped
    assert rules.raw_caption(str(tmp_path / "none.png"), ds) == ""


def test_hash_and_names() -> None:
    info = {"b": 1, "a": "x"}
    assert rules.settings_hash(info) == rules.settings_hash({"a": "x", "b": 1})  # sort_keys
    assert len(rules.settings_hash(info)) == 22
    assert rules.latent_name("/d/my_img.v2.png", info).startswith("/d/_latent_cache/my_img.v2_")
    assert rules.split_name("my_img_" + "A" * 22 + ".safetensors") == ("my_img", "A" * 22)
    assert rules.split_name("short_abc.safetensors") is None
    assert rules.info_from_metadata({"format": "pt"}) is None


def test_families() -> None:
    sd1, flux, sdxl = rules.FAMILIES["sd1"], rules.FAMILIES["flux"], rules.FAMILIES["sdxl"]
    assert (sd1.latent_channels, sd1.scaling_factor, sd1.shift_factor, sd1.posterior) == (4, 0.18215, 0.0, "sample")
    assert (flux.latent_channels, flux.scaling_factor, flux.shift_factor) == (16, 0.3611, 0.1159)
    assert sd1.recompute_why is flux.recompute_why is sdxl.recompute_why is None
    assert rules.FAMILIES["qwen_image"].recompute_why and rules.FAMILIES["wan21"].recompute_why
    assert config.latent_space_version("sdxl", {}) == "sdxl" and config.latent_space_version("auraflow", {}) == "sdxl"
    assert config.latent_space_version("pixart_sigma", {}) == "sdxl" and config.latent_space_version("ssd", {}) == "ssd"
    assert config.latent_space_version("ltx2.3", {}) == "ltx2.3_v2"
    assert config.latent_space_version("flux", {"latent_space_version": "mine"}) == "mine"
    assert config.resolve_arch({"arch": "flex1:tag"}) == "flux" and config.resolve_arch({"is_xl": True}) == "sdxl"
    assert config.resolve_arch({}) == "sd1" and config.text_space_version("ideogram4") == "ideogram4_te_v2"


def test_job_config_errors_and_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("yaml")
    job = tmp_path / "job.yaml"
    job.write_text(
        "job: extension\nconfig:\n  name: run1\n  process:\n    - type: sd_trainer\n      trigger_word: '[name]'\n"
        "      datasets:\n        - folder_path: ${DATA}/x\n          resolution: 64\n          caption_ext: cap\n"
        "          augments: [ColorJitter]\n          cache_latents_to_disk: true\n          buckets: false\n"
        "      train: {dtype: bf16}\n      model: {arch: sdxl, vae_dtype: fp16}\n"
    )
    with pytest.raises(LayoutError, match=r"\$\{DATA\}"):
        config.load_job_config(str(job))
    monkeypatch.setenv("DATA", "/data")
    (only,) = config.load_job_config(str(job))
    assert (only.folder_path, only.trigger_word, only.caption_ext) == ("/data/x", "run1", ".cap")
    assert not only.cache_latents_to_disk  # augments turn latent caching off
    assert (only.model.dtype, only.model.latent_dtype, only.resolutions, only.buckets) == ("bf16", "F16", (64,), False)
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "job: extension\nconfig:\n  name: x\n  process:\n    - type: sd_trainer\n      datasets:\n        - {}\n"
    )
    with pytest.raises(LayoutError, match="folder_path"):
        config.load_job_config(str(bad))
    with pytest.raises(LayoutError, match="cannot read"):
        config.load_job_config(str(tmp_path / "missing.yaml"))


def test_preparer_equals_the_pixels_ai_toolkit_encoded() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("PIL")
    from cachedoctor.layouts.interface import RecomputeSpec
    from cachedoctor.layouts.prepare import aitoolkit

    recorded = torch.load(GOLD / "pixels.pt")
    by_file = {r["latent_file"]: r for r in ITEMS}
    assert len(recorded) == 2
    for latent_file, want in recorded.items():
        item = by_file[latent_file]
        crop_x, crop_y, crop_w, crop_h = item["crop"]
        spec = RecomputeSpec(
            role="latent",
            source=str(GOLD / item["image"]),
            writer="dict",
            container_format="safetensors",
            key="latent",
            latent_hw=(crop_h // 8, crop_w // 8),
            resize=tuple(item["scale_to"]),
            crop=(crop_y, crop_x),
            flipped=item["flip_x"],
            prepare="aitoolkit",
        )
        prepared = aitoolkit.prepare(spec, 8)
        assert prepared.recorded == {}
        assert prepared.pixels.dtype == want.dtype and prepared.pixels.shape == want.shape
        assert (prepared.pixels - want).abs().max().item() == 0.0  # bit-exact


def test_the_layout_s_cache_folder_names_are_the_rules_own() -> None:
    """``aitoolkit.CACHE_FOLDERS`` spells the names out (``--layout auto`` asks for them without the rules)."""
    from cachedoctor.layouts.aitoolkit import CACHE_FOLDERS

    assert CACHE_FOLDERS == (rules.LATENT_DIR, rules.TEXT_DIR)
