"""SimpleTuner's image preparation and recompute rules (``layouts/prepare/simpletuner.py``,
``layouts/simpletuner.py``), checked against what its code does at commit bc8e6ab."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from cachedoctor.layouts import LAYOUTS
from cachedoctor.layouts._simpletuner_buckets import _squashed
from cachedoctor.layouts.interface import Expected, LayoutOptions, RecomputeSpec
from cachedoctor.layouts.prepare.simpletuner import prepare, resize_linear
from cachedoctor.layouts.simpletuner import MULTI_ENCODER_EMBEDS

RESIZES = Path(__file__).resolve().parents[3] / "fixtures" / "trainers" / "simpletuner" / "trainingsample_resize.npz"


def test_resize_linear_equals_trainingsample_bit_for_bit() -> None:
    """Outputs of ``trainingsample.batch_resize_images`` 0.3.2 (what SimpleTuner resizes with),
    stored: shrinking, enlarging, exactly half (OpenCV's area path) and mixed."""
    data = np.load(RESIZES)
    source = data["src"]
    names = [n for n in data.files if n.startswith("out_")]
    assert len(names) == 5
    for name in names:
        h, w, dh, dw = map(int, re.findall(r"\d+", name)[1:])
        got = resize_linear(np.ascontiguousarray(source[:h, :w]), dw, dh)
        assert got.dtype == np.uint8 and np.array_equal(got, data[name]), name


def test_resize_linear_is_not_pil() -> None:
    """The trap the old preparer fell into: PIL's antialiased filters differ when shrinking."""
    source = np.load(RESIZES)["src"]
    pil = np.asarray(Image.fromarray(source).resize((40, 24), Image.Resampling.BILINEAR))
    assert not np.array_equal(resize_linear(source, 40, 24), pil)


def meta(original: list[int], target: list[int], aspect: float) -> dict:
    return {"original_size": original, "target_size": target, "intermediary_size": target, "aspect_ratio": aspect}


def test_squashed_are_buckets_with_two_or_more_images_to_resize() -> None:
    metadata = {
        "/d/a.png": meta([200, 150], [192, 128], 1.5),
        "/d/b.png": meta([190, 140], [192, 128], 1.5),
        "/d/c.png": meta([150, 210], [128, 192], 0.67),  # alone in its bucket
        "/d/d.png": meta([128, 128], [128, 128], 1.0),  # already at the target size
        "/d/e.png": meta([170, 170], [128, 128], 1.0),  # the only one of its bucket to resize
    }
    assert _squashed(metadata) == {"/d/a.png", "/d/b.png"}


def test_prepare_resizes_with_lanczos_and_squashes_first_when_the_layout_says_so(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    path = tmp_path / "x.png"
    Image.fromarray(rng.integers(0, 256, (150, 200, 3), dtype=np.uint8)).save(path)
    base = RecomputeSpec("latent", str(path), "bare-tensor", latent_hw=(16, 24), resize=(192, 144), crop=(8, 0))

    def uint8(spec: RecomputeSpec) -> np.ndarray:
        pixels = prepare(spec, 8).pixels
        assert pixels.shape == (3, 128, 192)
        return ((pixels.permute(1, 2, 0).numpy() + 1) * 127.5).round().astype(np.uint8)

    with Image.open(path) as image:
        rgb = image.convert("RGB")
    direct = rgb.resize((192, 144), Image.Resampling.LANCZOS).crop((0, 8, 192, 136))
    assert np.array_equal(uint8(base), np.asarray(direct))
    first = Image.fromarray(resize_linear(np.asarray(rgb), 192, 128))
    squashed = first.resize((192, 144), Image.Resampling.LANCZOS).crop((0, 8, 192, 136))
    assert np.array_equal(uint8(replace(base, pre_resize=(192, 128))), np.asarray(squashed))
    assert not np.array_equal(np.asarray(direct), np.asarray(squashed))


@pytest.mark.parametrize("family", ["sdxl", "flux", "sd3"])
def test_text_recompute_is_blocked_for_multi_encoder_families(family: str, tmp_path: Path) -> None:
    entry = Expected(
        str(tmp_path / f"0cc175b9c0f1b6a831c399e269772661-{family}.pt"), str(tmp_path / "a.txt"), "text", text="a"
    )
    spec, why = LAYOUTS["simpletuner"].recompute_spec(entry.path, entry, None)
    assert spec is None and why == MULTI_ENCODER_EMBEDS[family]
    assert "transformers-text adapter runs one text encoder" in why


def test_latents_without_peers_take_the_vae_dtype_of_config_json(tmp_path: Path) -> None:
    data, vae = tmp_path / "images", tmp_path / "vae"
    data.mkdir()
    vae.mkdir()
    Image.new("RGB", (64, 64)).save(data / "a.png")
    config = tmp_path / "multidatabackend.json"
    config.write_text(json.dumps([{"id": "d", "instance_data_dir": str(data), "cache_dir_vae": str(vae)}]))
    layout = LAYOUTS["simpletuner"]
    entry = Expected(str(vae / "a.pt"), str(data / "a.png"), latent_hw=(8, 8))
    dtypes = []
    for trainer in ({}, {"vae_dtype": "bf16"}, {"vae_dtype": "fp32"}):
        (tmp_path / "config.json").write_text(json.dumps(trainer))
        layout.plan([str(tmp_path)], LayoutOptions(config=str(config)))
        spec, why = layout.recompute_spec(entry.path, entry, None)
        assert why is None and spec is not None
        dtypes.append(spec.dtype)
    assert dtypes == ["bfloat16", "bfloat16", "float32"]
