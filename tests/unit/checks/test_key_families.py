"""Keys that spell a size or dtype (musubi-tuner's ``latents_{F}x{H}x{W}_{dtype}``, kohya's
``latents_<h>x<w>``): peers are judged within the key family, a key that disagrees with its
tensor is a finding, and every message names a key the file holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from factories import findings_of, save_pt
from safetensors.torch import save_file

from cachedoctor import keynames
from cachedoctor.scan import ScanOptions, scan


def musubi_latent(path: Path, h: int = 8, w: int = 8, dtype: torch.dtype = torch.bfloat16, *, shape=None) -> Path:
    """A Z-Image latent as musubi's ``save_latent_cache_z_image`` writes it: (C, H, W) under
    ``latents_1x{H}x{W}_{dtype}``, with musubi's metadata."""
    tensor = torch.randn(*(shape or (16, h, w))).to(dtype)
    name = str(dtype).split(".")[-1]
    meta = {"architecture": "z_image", "width": str(w * 8), "height": str(h * 8), "format_version": "1.0.1"}
    save_file({f"latents_1x{h}x{w}_{name}": tensor}, str(path), metadata=meta)
    return path


def musubi_te(path: Path, length: int = 7, dtype: torch.dtype = torch.bfloat16) -> Path:
    name = str(dtype).split(".")[-1]
    meta = {"architecture": "z_image", "caption1": "a cat", "format_version": "1.0.1"}
    save_file({f"varlen_llm_embed_{name}": torch.randn(length, 32).to(dtype)}, str(path), metadata=meta)
    return path


def report(*targets: Path, deep: bool = False) -> list[dict]:
    result = scan([str(t) for t in targets], ScanOptions(deep=deep, workers=1))
    assert result.errors == []
    return [json.loads(json.dumps(f.to_json())) for f in result.findings]


@pytest.mark.parametrize(
    ("key", "family", "dims", "dtype"),
    [
        ("latents_1x8x8_bfloat16", "latents_FxHxW", (1, 8, 8), "bfloat16"),
        ("latents_control_0_1x16x12_float32", "latents_control_0_FxHxW", (1, 16, 12), "float32"),
        ("latents_16x12", "latents_HxW", (16, 12), None),
        ("latents_flipped_16x12", "latents_flipped_HxW", (16, 12), None),
        ("varlen_llm_embed_bfloat16", "varlen_llm_embed", None, "bfloat16"),
        ("latents_2x16x12_float8_e4m3fnuz", "latents_FxHxW", (2, 16, 12), "float8_e4m3fnuz"),
        ("f_indices_int32", "f_indices", None, "int32"),
        ("llm_mask", "llm_mask", None, None),
        ("latent", "latent", None, None),
        ("model_1x1_conv", "model_1x1_conv", None, None),  # a size inside a name is not the key's size
        ("", "", None, None),
    ],
)
def test_key_names_parse(key: str, family: str, dims: tuple | None, dtype: str | None) -> None:
    assert keynames.parse(key) == (family, dims, dtype)


def test_spell_renames_size_and_dtype_only_where_spelled() -> None:
    assert keynames.spell("latents_1x8x8_bfloat16", (1, 16, 12)) == "latents_1x16x12_bfloat16"
    assert keynames.spell("latents_1x8x8_bfloat16", dtype="float32") == "latents_1x8x8_float32"
    assert keynames.spell("latents_8x8", (16, 12)) == "latents_16x12"
    assert keynames.spell("latent", (16, 12), "float32") == "latent"


def test_pristine_musubi_folder_with_latents_and_text_embeds_is_healthy(tmp_path: Path) -> None:
    for i, (h, w) in enumerate([(8, 8), (12, 6), (6, 12), (10, 8)]):
        musubi_latent(tmp_path / f"im{i}_{w * 8:04d}x{h * 8:04d}_zi.safetensors", h, w)
        musubi_te(tmp_path / f"im{i}_zi_te.safetensors", length=5 + i)
    assert report(tmp_path, deep=True) == []


def test_a_key_that_says_another_size_than_its_tensor(tmp_path: Path) -> None:
    for i in range(3):
        musubi_latent(tmp_path / f"im{i}_0064x0064_zi.safetensors")
    bad = tmp_path / "odd_0064x0064_zi.safetensors"
    meta = {"architecture": "z_image", "width": "64", "height": "64", "format_version": "1.0.1"}
    save_file({"latents_1x8x8_bfloat16": torch.zeros(16, 5, 7, dtype=torch.bfloat16)}, str(bad), metadata=meta)
    [finding] = report(tmp_path)
    assert (finding["kind"], finding["path"]) == ("shape-mismatch", str(bad))
    assert finding["message"] == "latents_1x8x8_bfloat16 has shape [16, 5, 7]: its key says 1x8x8"
    assert finding["details"]["key_dims"] == [1, 8, 8]


def test_video_latent_key_agrees_with_channels_frames_size(tmp_path: Path) -> None:
    ok = tmp_path / "clip_00000-005_0064x0064_wan.safetensors"
    save_file({"latents_2x8x8_bfloat16": torch.zeros(16, 2, 8, 8, dtype=torch.bfloat16)}, str(ok))
    bad = tmp_path / "clip_00005-005_0064x0064_wan.safetensors"
    save_file({"latents_2x8x8_bfloat16": torch.zeros(16, 1, 8, 8, dtype=torch.bfloat16)}, str(bad))
    assert findings_of(tmp_path) == [("shape-mismatch", str(bad), "recompute")]


def test_float32_latent_among_bfloat16_peers_names_its_own_key(tmp_path: Path) -> None:
    for i, (h, w) in enumerate([(8, 8), (12, 6), (6, 12), (10, 8)]):
        musubi_latent(tmp_path / f"im{i}_{w * 8:04d}x{h * 8:04d}_zi.safetensors", h, w)
    bad = musubi_latent(tmp_path / "odd_0096x0064_zi.safetensors", 8, 12, torch.float32)
    [finding] = report(tmp_path)
    assert (finding["kind"], finding["path"]) == ("dtype-mismatch", str(bad))
    assert finding["message"] == "latents_1x8x12_float32 is float32 where most of its 4 peers are bfloat16"
    assert finding["details"]["keys"] == {"latents_1x8x12_float32": "float32"}


def test_a_key_that_names_another_dtype_than_its_tensor(tmp_path: Path) -> None:
    bad = tmp_path / "odd_0064x0064_zi.safetensors"
    save_file({"latents_1x8x8_bfloat16": torch.zeros(16, 8, 8)}, str(bad))
    [finding] = report(tmp_path)
    assert (finding["kind"], finding["message"]) == (
        "dtype-mismatch",
        "latents_1x8x8_bfloat16 is float32: its key says bfloat16",
    )


def test_channel_count_differs_within_the_family_names_the_key(tmp_path: Path) -> None:
    for i, (h, w) in enumerate([(8, 8), (12, 6), (6, 12)]):
        musubi_latent(tmp_path / f"im{i}_{w * 8:04d}x{h * 8:04d}_zi.safetensors", h, w)
    bad = musubi_latent(tmp_path / "odd_0064x0064_zi.safetensors", shape=(4, 8, 8))
    [finding] = report(tmp_path)
    assert (finding["kind"], finding["path"]) == ("shape-mismatch", str(bad))
    assert finding["message"] == "latents_1x8x8_bfloat16 has shape [4, 8, 8]: 4 channels where peers have 16"


def test_patch_token_latents_of_other_buckets_are_peers(tmp_path: Path) -> None:
    """musubi's HiDream-O1 caches (h, w, D) patch tokens under ``latents_1x{h}x{w}_{dtype}``: the
    feature size is D, not the bucket's height."""
    for i, (h, w) in enumerate([(4, 4), (6, 3), (3, 6)]):
        path = tmp_path / f"im{i}_{w * 32:04d}x{h * 32:04d}_ho1.safetensors"
        save_file({f"latents_1x{h}x{w}_bfloat16": torch.zeros(h, w, 48, dtype=torch.bfloat16)}, str(path))
    assert findings_of(tmp_path) == []


def test_kohya_sized_key_message_is_unchanged(tmp_path: Path) -> None:
    import numpy as np

    bad = tmp_path / "a_0064x0064_flux.npz"
    np.savez(bad, latents_8x8=np.zeros((16, 8, 6), np.float32))
    [finding] = report(tmp_path)
    assert finding["message"] == "latents_8x8 has shape [16, 8, 6]: its key says 8x8"
    assert finding["details"]["expected_hw"] == [8, 8]


# a container its name does not promise -------------------------------------------------------


def test_torch_zip_under_a_safetensors_name_is_corrupt(tmp_path: Path) -> None:
    """What repair once wrote for ai-toolkit: safetensors' load_file fails on it."""
    bad = save_pt(tmp_path / "img_abc.safetensors", {"latent": torch.zeros(4, 8, 8)})
    [finding] = report(tmp_path, deep=True)
    assert finding["path"] == str(bad)
    assert (finding["kind"], finding["details"]["problem"], finding["details"]["format"]) == (
        "corrupt-archive",
        "wrong-container",
        "torch-zip",
    )
    assert finding["message"].startswith("named .safetensors but holds a torch-zip file: safetensors' load_file")


def test_safetensors_under_a_pt_name_is_corrupt(tmp_path: Path) -> None:
    bad = tmp_path / "x.pt"
    save_file({"latent": torch.zeros(4, 8, 8)}, str(bad))
    assert findings_of(tmp_path) == [("corrupt-archive", str(bad), "recompute")]


def test_gzip_under_a_pt_name_is_what_simpletuner_reads(tmp_path: Path) -> None:
    from factories import gzipped, latent, pt_bytes

    (tmp_path / "x.pt").write_bytes(gzipped(pt_bytes(latent())))
    assert findings_of(tmp_path) == []
