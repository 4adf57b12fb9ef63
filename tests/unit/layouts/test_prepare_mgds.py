"""The mgds preparer against mgds itself: ``fixtures/trainers/onetrainer/pixels.pt`` holds the
pixels OneTrainer's SDXL data loader handed to ``EncodeVAE`` (mgds 3a6994a: torchvision
``read_image``, ``Resize(bilinear, antialias=True)``, centred crop, ``x * 2 - 1``), and the golden
entries hold the ``original_resolution`` and ``crop_offset`` it recorded."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest
import torch

from cachedoctor.layouts.interface import RecomputeSpec
from cachedoctor.layouts.prepare import prepare_image
from cachedoctor.layouts.prepare.mgds import scale_resolution

GOLDEN = Path(__file__).resolve().parents[3] / "fixtures" / "trainers" / "onetrainer"


def _golden() -> tuple[Path, list[dict]]:
    (folder,) = glob.glob(str(GOLDEN / "cache" / "image" / "*" / "variation-0"))
    return Path(folder), torch.load(Path(folder) / "aggregate.pt", weights_only=True)


@pytest.mark.parametrize("name", ["images/c_wide.png", "images/f_tall.png"])
def test_pixels_equal_mgds(name: str) -> None:
    want = torch.load(GOLDEN / "pixels.pt", weights_only=True)[name]
    _, aggregate = _golden()
    (ch, cw) = next(item["crop_resolution"] for item in aggregate if item["image_path"] == name)
    spec = RecomputeSpec("latent", str(GOLDEN / name), "dict", latent_hw=(ch // 8, cw // 8), prepare="mgds")
    got = prepare_image(spec, 8).pixels
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert float((got - want).abs().max()) <= 1e-5


def test_recorded_values_equal_what_mgds_recorded() -> None:
    folder, aggregate = _golden()
    for i, item in enumerate(aggregate):
        (ch, cw) = item["crop_resolution"]
        spec = RecomputeSpec(
            "latent", str(GOLDEN / item["image_path"]), "dict", latent_hw=(ch // 8, cw // 8), prepare="mgds"
        )
        entry = torch.load(folder / f"{i}.pt", weights_only=True)
        recorded = prepare_image(spec, 8).recorded
        assert recorded == {k: entry[k] for k in ("original_resolution", "crop_offset")}, item


def test_scale_resolution_covers_the_bucket_with_pythons_round() -> None:
    # 80x200 into a 64x192 bucket: H/W 0.4 > 1/3, so the width fits and H = round(80 * 0.96) = 77
    assert scale_resolution(80, 200, 64, 192) == (77, 192)
    # 180x70 into 192x64: H/W 2.57 < 3, so the height fits and W = round(70 * 192 / 180) = 75
    assert scale_resolution(180, 70, 192, 64) == (192, 75)
    # Python's round, half to even: 5 * 1/2 = 2.5 -> 2, 7 * 1/2 = 3.5 -> 4
    assert scale_resolution(5, 2, 1, 1) == (2, 1)
    assert scale_resolution(7, 2, 1, 1) == (4, 1)
