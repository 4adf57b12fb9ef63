"""Each layout's ``recompute_spec``: for one known expected entry, the exact keys, dtype,
container, writer and sizes a recompute must produce (or the exact reason it cannot)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from factories import save_pt, write_npz

from cachedoctor.formats import read_file
from cachedoctor.layouts import LAYOUTS, RecomputeSpec, Template, TemplateFinder, recompute_spec
from cachedoctor.layouts.interface import Expected


def template(path: Path) -> Template:
    meta = read_file(str(path), deep=False)
    assert meta is not None
    return Template(str(path), meta)


def source(tmp_path: Path, name: str = "img.png") -> str:
    path = tmp_path / name
    path.write_bytes(b"png")
    return str(path)


def test_simpletuner_latent_copies_a_bare_bf16_peer_and_the_recorded_crop(tmp_path: Path) -> None:
    peer = save_pt(tmp_path / "peer.pt", torch.zeros(4, 16, 12, dtype=torch.bfloat16))
    src = source(tmp_path)
    entry = Expected(str(tmp_path / "a.pt"), src, latent_hw=(16, 12), crop=(120, 140, 6, 0))
    spec, why = LAYOUTS["simpletuner"].recompute_spec(str(tmp_path / "a.pt"), entry, template(peer))
    assert why is None
    assert spec == RecomputeSpec(
        "latent",
        src,
        "bare-tensor",
        "torch-zip",
        "",
        "bfloat16",
        True,
        (16, 12),
        resize=(120, 140),
        crop=(6, 0),
        keys=("",),
        template=str(peer),
        prepare="simpletuner",
        posterior="sample",
    )


def test_simpletuner_latent_follows_a_dict_peer(tmp_path: Path) -> None:
    peer = save_pt(tmp_path / "peer.pt", {"latents": torch.zeros(4, 8, 8, dtype=torch.float16)})
    entry = Expected(str(tmp_path / "a.pt"), source(tmp_path), latent_hw=(8, 8), hints=(("scaling", "raw"),))
    spec, _ = LAYOUTS["simpletuner"].recompute_spec(str(tmp_path / "a.pt"), entry, template(peer))
    assert spec is not None
    assert (spec.writer, spec.key, spec.dtype, spec.keys, spec.resize, spec.crop) == (
        "dict",
        "latents",
        "float16",
        ("latents",),
        None,
        None,
    )


def test_simpletuner_without_peer_writes_a_bare_bf16_tensor_and_without_size_is_blocked(tmp_path: Path) -> None:
    entry = Expected(str(tmp_path / "a.pt"), source(tmp_path), latent_hw=(8, 8), hints=(("scaling", "raw"),))
    spec, _ = LAYOUTS["simpletuner"].recompute_spec(str(tmp_path / "a.pt"), entry, None)
    assert spec is not None and (spec.writer, spec.dtype, spec.container_format, spec.template) == (
        "bare-tensor",
        "bfloat16",
        "torch-zip",
        None,
    )
    unsized = Expected(str(tmp_path / "a.pt"), entry.source)
    assert LAYOUTS["simpletuner"].recompute_spec(str(tmp_path / "a.pt"), unsized, None) == (
        None,
        "the layout does not record this entry's latent size (no bucket metadata for it)",
    )


def test_simpletuner_text_encodes_the_recorded_caption(tmp_path: Path) -> None:
    peer = save_pt(tmp_path / "p-sd1x.pt", {"prompt_embeds": torch.zeros(1, 4, 8), "pooled": torch.zeros(1, 8)})
    entry = Expected(str(tmp_path / "x-sd1x.pt"), source(tmp_path, "img.txt"), "text", text="a red cat")
    spec, why = LAYOUTS["simpletuner"].recompute_spec(entry.path, entry, template(peer))
    assert why is None and spec == RecomputeSpec(
        "text",
        entry.source,
        "dict",
        "torch-zip",
        "",
        "float32",
        False,
        None,
        text="a red cat",
        keys=("prompt_embeds", "pooled"),
        template=str(peer),
    )


def test_kohya_takes_the_bucket_from_the_entry_itself_and_the_flip_from_its_peer(tmp_path: Path) -> None:
    own = write_npz(
        tmp_path / "a_0096x0128_sdxl.npz",
        latents_16x12=np.zeros((4, 16, 12), np.float32),
        original_size_16x12=np.array([96, 128]),
        crop_ltrb_16x12=np.array([0, 0, 96, 128]),
    )
    peer = write_npz(
        tmp_path / "b_0096x0128_sdxl.npz",
        latents_16x12=np.zeros((4, 16, 12), np.float32),
        latents_flipped_16x12=np.zeros((4, 16, 12), np.float32),
    )
    entry = Expected(str(own), source(tmp_path, "a.png"))
    spec, why = LAYOUTS["kohya"].recompute_spec(str(own), entry, template(peer))
    assert why is None
    assert spec == RecomputeSpec(
        "latent",
        entry.source,
        "kohya-npz",
        "npz",
        "latents_16x12",
        "float32",
        False,
        (16, 12),
        keys=("latents_16x12", "latents_flipped_16x12"),
        flipped=True,
        template=str(peer),
        prepare="kohya",
        posterior="sample",
    )


def test_kohya_without_peer_writes_the_three_standard_keys(tmp_path: Path) -> None:
    own = write_npz(tmp_path / "a.npz", latents_8x10=np.full((4, 8, 10), np.nan, np.float32))
    spec, _ = LAYOUTS["kohya"].recompute_spec(str(own), Expected(str(own), source(tmp_path)), None)
    assert spec is not None and spec.keys == ("latents_8x10", "original_size_8x10", "crop_ltrb_8x10")
    assert (spec.latent_hw, spec.flipped, spec.template) == ((8, 10), False, None)


def test_kohya_entry_that_is_missing_cannot_be_sized(tmp_path: Path) -> None:
    path = str(tmp_path / "a_0096x0128_sdxl.npz")
    spec, why = LAYOUTS["kohya"].recompute_spec(path, Expected(path, source(tmp_path)), None)
    assert spec is None and why is not None and why.startswith("kohya records an entry's bucket only inside the entry")
    assert "--kohya-config dataset.toml" in why


def test_onetrainer_latent_uses_latent_image_in_the_peers_dtype(tmp_path: Path) -> None:
    peer = save_pt(
        tmp_path / "0.pt",
        {
            "latent_image": torch.zeros(4, 8, 8, dtype=torch.bfloat16),
            "original_resolution": (64, 64),
            "crop_offset": (0, 0),
        },
    )
    entry = Expected(str(tmp_path / "1.pt"), source(tmp_path), latent_hw=(8, 8), latent_key="latent_image")
    spec, why = LAYOUTS["onetrainer"].recompute_spec(entry.path, entry, template(peer))
    assert why is None and spec == RecomputeSpec(
        "latent",
        entry.source,
        "dict",
        "torch-zip",
        "latent_image",
        "bfloat16",
        False,
        (8, 8),
        keys=("latent_image",),
        template=str(peer),
        prepare="mgds",
        posterior="mode",
    )
    bare, _ = LAYOUTS["onetrainer"].recompute_spec(entry.path, entry, None)
    assert bare is not None and (bare.keys, bare.dtype) == (
        ("latent_image", "original_resolution", "crop_offset"),
        "float32",
    )


def test_onetrainer_text_entries_are_left_to_onetrainer(tmp_path: Path) -> None:
    entry = Expected(str(tmp_path / "0.pt"), source(tmp_path), "text", text="a cat")
    assert LAYOUTS["onetrainer"].recompute_spec(entry.path, entry, None) == (
        None,
        "OneTrainer text caches hold tokens and several encoders' states; re-cache them with OneTrainer",
    )


def test_manifest_latent_uses_the_rows_key_and_shape(tmp_path: Path) -> None:
    peer = save_pt(tmp_path / "p.pt", {"lat": torch.zeros(4, 10, 12, dtype=torch.float16), "small": torch.zeros(2)})
    entry = Expected(
        str(tmp_path / "a.pt"), source(tmp_path), latent_key="lat", shape=(4, 10, 12), hints=(("scaling", "raw"),)
    )
    spec, why = LAYOUTS["manifest"].recompute_spec(entry.path, entry, template(peer))
    assert why is None and spec == RecomputeSpec(
        "latent",
        entry.source,
        "dict",
        "torch-zip",
        "lat",
        "float16",
        False,
        (10, 12),
        keys=("lat", "small"),
        template=str(peer),
    )


def test_manifest_without_key_takes_the_peers_largest_tensor(tmp_path: Path) -> None:
    peer = save_pt(tmp_path / "p.pt", {"small": torch.zeros(2), "big": torch.zeros(4, 8, 8)})
    entry = Expected(str(tmp_path / "a.pt"), source(tmp_path), latent_hw=(8, 8), hints=(("scaling", "raw"),))
    spec, _ = LAYOUTS["manifest"].recompute_spec(entry.path, entry, template(peer))
    assert spec is not None and (spec.writer, spec.key, spec.dtype) == ("dict", "big", "float32")


def test_text_caption_is_read_from_its_caption_file(tmp_path: Path) -> None:
    caption = tmp_path / "img.txt"
    caption.write_text("  a dog on a sofa \n")
    entry = Expected(str(tmp_path / "img_te_outputs.npz"), str(caption), "text")
    spec, _ = LAYOUTS["manifest"].recompute_spec(entry.path, entry, None)
    assert spec is not None and (spec.text, spec.container_format) == ("a dog on a sofa", "npz")
    no_caption = Expected(entry.path, source(tmp_path), "text")
    assert LAYOUTS["manifest"].recompute_spec(entry.path, no_caption, None) == (
        None,
        "no caption is recorded for it (the layout keeps captions this repair cannot read)",
    )
    blocked, why = LAYOUTS["kohya"].recompute_spec(entry.path, entry, None)  # two encoders' outputs in one file
    assert blocked is None and why is not None and "one-encoder text adapter cannot make" in why


def test_dispatch_finds_a_healthy_template_of_the_same_role_skipping_bad_files(tmp_path: Path) -> None:
    bad = write_npz(tmp_path / "a_0064x0064_sdxl.npz", latents_8x8=np.zeros((4, 8, 8), np.float32))
    write_npz(tmp_path / "b_te_outputs.npz", hidden=np.zeros((4, 8), np.float32))
    good = write_npz(tmp_path / "c_0064x0064_sdxl.npz", latents_8x8=np.zeros((4, 8, 8), np.float32))
    entry = Expected(str(bad), source(tmp_path, "a.png"))
    spec, why = recompute_spec(str(bad), entry, "kohya", TemplateFinder({str(bad)}))
    assert why is None and spec is not None and spec.template == str(good)


def test_dispatch_checks_the_source_before_asking_any_layout(tmp_path: Path) -> None:
    path = str(tmp_path / "a.pt")
    finder = TemplateFinder(set())
    assert recompute_spec(path, None, "simpletuner", finder)[1] == (
        "its source is unknown: repair with the dataset (--config, --layout or --manifest)"
    )
    gone = Expected(path, str(tmp_path / "nope.png"), latent_hw=(8, 8))
    assert recompute_spec(path, gone, "kohya", finder) == (None, f"its source {tmp_path / 'nope.png'} is gone")
    listed_gone = Expected(path, source(tmp_path), latent_hw=(8, 8), source_exists=False)
    assert recompute_spec(path, listed_gone, "onetrainer", finder)[1] == f"its source {listed_gone.source} is gone"
