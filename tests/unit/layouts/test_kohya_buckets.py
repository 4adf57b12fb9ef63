"""kohya buckets (``layouts/_kohya_buckets.py``, ``_kohya_config.py``) against what sd-scripts'
own BucketManager chose for the golden images (``fixtures/trainers/kohya/golden_buckets.json``,
recorded by make_golden.py from sd-scripts 48d368f's dataset objects), and the plan's use of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cachedoctor.layouts import LayoutError, LayoutOptions
from cachedoctor.layouts import _kohya_config as config
from cachedoctor.layouts._images import image_size
from cachedoctor.layouts._kohya_buckets import Bucketer, BucketRules, bucket_resolutions, crop_ltrb
from cachedoctor.layouts.kohya import KohyaLayout

GOLD = Path(__file__).resolve().parents[3] / "fixtures" / "trainers" / "kohya"
RECORDED = json.loads((GOLD / "golden_buckets.json").read_text())
CASES = [(toml, image) for toml in sorted(RECORDED) if toml.endswith(".toml") for image in sorted(RECORDED[toml])]


@pytest.mark.parametrize(("toml", "image"), CASES)
def test_bucket_equals_sd_scripts(toml: str, image: str) -> None:
    cfg = config.load(str(GOLD / toml))
    subset = cfg.for_folder(str(GOLD / Path(image).parent))
    assert subset is not None
    size = image_size(str(GOLD / image))
    assert size is not None and list(size) == RECORDED[toml][image]["image_size"]
    bucket, resized = subset.bucketer().select(*size)
    assert [list(bucket), list(resized)] == [RECORDED[toml][image]["bucket"], RECORDED[toml][image]["resized"]]


def test_predefined_buckets_equal_sd_scripts() -> None:
    """Values printed by sd-scripts 48d368f's own ``model_util.make_bucket_resolutions``."""
    small = [(64, 192), (64, 224), (64, 256), (96, 160), (128, 128), (160, 96), (192, 64), (224, 64), (256, 64)]
    assert bucket_resolutions((128, 128), 64, 256, 32) == small
    resos = bucket_resolutions((1024, 1024), 256, 2048, 64)
    assert len(resos) == 41
    assert resos[:3] == [(256, 2048), (320, 2048), (384, 2048)]
    assert resos[-3:] == [(2048, 384), (2048, 448), (2048, 512)]


def test_crop_ltrb_is_the_image_inside_the_bucket() -> None:
    """The issue's example: sd-scripts writes where the resized image sits in the bucket."""
    assert crop_ltrb((320, 192), (320, 160)) == (0.0, 16.0, 320.0, 176.0)
    left, top, right, bottom = crop_ltrb((96, 96), (80, 130))
    assert (left, top, bottom) == (18.0, 0.0, 96.0) and right == pytest.approx(77.0769230769)


def test_no_bucket_is_one_fixed_bucket() -> None:
    bucketer = Bucketer(BucketRules((96, 96)))
    assert bucketer.select(120, 80) == ((96, 96), (144, 96))


def test_min_bucket_reso_above_resolution_is_refused(tmp_path: Path) -> None:
    (tmp_path / "img").mkdir()
    toml = tmp_path / "d.toml"
    toml.write_text('[[datasets]]\nresolution = 128\nenable_bucket = true\n[[datasets.subsets]]\nimage_dir = "img"\n')
    with pytest.raises(LayoutError, match="min_bucket_reso 256"):
        config.load(str(toml))


def test_plan_sets_each_images_bucket_and_takes_the_tomls_folders() -> None:
    plan = KohyaLayout().plan([], LayoutOptions(kohya_config=str(GOLD / "sdxl.toml")))
    assert plan.roots == [str(GOLD / "sdxl" / "flip"), str(GOLD / "sdxl" / "plain")]
    entries = {
        e.source: e for folder in plan.expected.values() for v in folder.values() for e in v if e.role == "latent"
    }
    a = entries[str(GOLD / "sdxl" / "flip" / "a.png")]
    assert a.latent_hw == (12, 20) and a.latent_key == "latents"
    assert dict(a.hints)["flip_aug"] is True and dict(a.hints)["resized"] == (160, 107)


def test_cli_options_alone_give_the_bucket() -> None:
    args = (("resolution", "96"), ("enable_bucket", False))
    plan = KohyaLayout().plan([str(GOLD / "legacy" / "img")], LayoutOptions(kohya_args=args))
    entries = [e for folder in plan.expected.values() for v in folder.values() for e in v]
    assert {e.latent_hw for e in entries} == {(12, 12)}
