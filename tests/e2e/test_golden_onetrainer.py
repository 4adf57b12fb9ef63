"""Golden OneTrainer caches: written by OneTrainer 23df383's own data loaders with mgds 3a6994a
(``fixtures/trainers/onetrainer/make_golden.py``), compared here with what ``cachedoctor repair``
recomputes. Only committed files are used, never the trainer's code.

``cache/``: SDXL, centred crop, image and text caches; ``cache-flux/``: Flux's 16-channel VAE;
``cache-jitter/``: SDXL with crop jitter on (OneTrainer's default), whose offsets came from mgds'
RNG. Six PNGs in five buckets (128 px target, quantization 64): downscales and upscales, cropped
in height and in width.
"""

from __future__ import annotations

import glob
import io
import json
import shutil
from pathlib import Path

import pytest
import torch

from cachedoctor.cli import run
from cachedoctor.cli.environment import Environment
from cachedoctor.layouts.onetrainer import TEXT_WHY

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "fixtures" / "trainers" / "onetrainer"
MODELS = REPO / "fixtures" / "trainers" / "models"
CACHES = ("cache", "cache-jitter", "cache-flux")
TOLERANCE = 1e-4


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdout_isatty=False, stderr_isatty=False, stdin_isatty=False, cwd="/")
    return run(list(argv), env), out.getvalue(), err.getvalue()


@pytest.fixture
def golden(tmp_path: Path) -> Path:
    """A copy of the golden folder (images beside the caches: the aggregates list ``images/<name>``)."""
    root = tmp_path / "onetrainer"
    shutil.copytree(GOLDEN / "images", root / "images")
    for cache in CACHES:
        shutil.copytree(GOLDEN / cache, root / cache)
    return root


def variation(root: Path, cache: str, kind: str = "image") -> Path:
    (found,) = glob.glob(str(root / cache / kind / "*" / "variation-0"))
    return Path(found)


def assert_equals_golden(got_path: Path, golden_path: Path) -> float:
    """Same keys in the same order, same value types; tensors of the same dtype and shape within
    ``TOLERANCE``; the side values (tuples of ints) exactly. Returns the largest difference."""
    got = torch.load(got_path, weights_only=True)
    want = torch.load(golden_path, weights_only=True)
    assert list(got) == list(want), got_path
    worst = 0.0
    for key, value in want.items():
        assert type(got[key]) is type(value), (got_path, key)
        if isinstance(value, torch.Tensor):
            assert (got[key].dtype, got[key].shape) == (value.dtype, value.shape), (got_path, key)
            worst = max(worst, float((got[key] - value).abs().max()))
        else:
            assert got[key] == value, (got_path, key)
    assert worst <= TOLERANCE, (got_path, worst)
    return worst


@pytest.mark.parametrize("cache", CACHES)
def test_scan_of_the_golden_cache_finds_nothing(cache: str) -> None:
    code, out, err = cli("scan", "--deep", "--format", "json", str(GOLDEN / cache))
    doc = json.loads(out)
    assert (code, err, doc["findings"]) == (0, "", [])
    assert doc["summary"]["files_read"] == len(list((GOLDEN / cache).rglob("*.pt")))


@pytest.mark.parametrize(("cache", "family"), [("cache", "sdxl"), ("cache-flux", "flux")])
def test_every_deleted_latent_recomputed_equals_golden(golden: Path, cache: str, family: str) -> None:
    folder = variation(golden, cache)
    entries = sorted(folder.glob("[0-9]*.pt"))
    assert len(entries) == 6
    for entry in entries:
        entry.unlink()
    code, out, err = cli("repair", str(golden / cache), "--encoder", f"diffusers-vae:{MODELS / family}", "--yes")
    assert (code, err) == (0, ""), out
    assert "recompute      6 file(s)" in out and "missing-entry 6 -> 0" in out
    golden_folder = variation(GOLDEN, cache)
    for entry in entries:
        assert_equals_golden(entry, golden_folder / entry.name)


def test_truncated_and_zero_byte_latents_recomputed_equal_golden(golden: Path) -> None:
    folder = variation(golden, "cache")
    truncated, empty = folder / "1.pt", folder / "4.pt"
    truncated.write_bytes(truncated.read_bytes()[:3000])
    empty.write_bytes(b"")
    untouched = {p.name: p.read_bytes() for p in folder.glob("*.pt") if p not in (truncated, empty)}
    code, out, err = cli("repair", str(golden / "cache"), "--encoder", f"diffusers-vae:{MODELS / 'sdxl'}", "--yes")
    assert (code, err) == (0, ""), out
    golden_folder = variation(GOLDEN, "cache")
    for entry in (truncated, empty):
        assert_equals_golden(entry, golden_folder / entry.name)
    assert {name: (folder / name).read_bytes() for name in untouched} == untouched


def test_jittered_group_is_not_recomputed(golden: Path) -> None:
    """With crop jitter on, a centred recompute would not be what OneTrainer cached: refused,
    with the peer that shows it."""
    missing = variation(golden, "cache-jitter") / "2.pt"
    missing.unlink()
    code, out, _ = cli("repair", str(golden / "cache-jitter"), "--encoder", f"diffusers-vae:{MODELS / 'sdxl'}", "--yes")
    assert code == 1 and not missing.exists()
    assert (
        "cannot fix 1 file(s): this group was cached with crop jitter (0.pt: crop_offset (15, 0), centred (8, 0))"
        in (
            " ".join(out.split())  # wrapped at 80 columns
        )
    )


def test_text_entry_is_not_recomputed_with_the_reason(golden: Path) -> None:
    missing = variation(golden, "cache", "text") / "1.pt"
    missing.unlink()
    code, out, _ = cli("repair", str(golden / "cache"), "--encoder", f"diffusers-vae:{MODELS / 'sdxl'}", "--yes")
    assert code == 1 and not missing.exists()
    assert f"cannot fix 1 file(s): {TEXT_WHY}" in " ".join(out.split())  # wrapped at 80 columns
