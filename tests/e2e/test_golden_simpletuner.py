"""Golden SimpleTuner caches: written by SimpleTuner's own VAECache (commit bc8e6ab) with the tiny
VAEs in ``fixtures/trainers/models/``; see ``fixtures/trainers/README.md``.

The committed configs and bucket files name the dataset folder ``{ROOT}`` (SimpleTuner writes
absolute paths); each test copies a golden folder to tmp and writes the real folder in its place.
Images are PNG. The SDXL bucket 1.5 holds two images, which SimpleTuner squashes to the target size
before the resize to ``intermediary_size``; the others are cropped from a LANCZOS resize.
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
from pathlib import Path

import pytest
import torch

from cachedoctor.cli import run
from cachedoctor.cli.environment import Environment

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "fixtures" / "trainers" / "simpletuner"
MODELS = REPO / "fixtures" / "trainers" / "models"
#: golden folder -> model family. ``sdxl_gzip`` was written with ``--compress_disk_cache``.
GOLDENS = {"sdxl": "sdxl", "flux": "flux", "sdxl_gzip": "sdxl"}
TOLERANCE = 1e-4


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdout_isatty=False, stderr_isatty=False, stdin_isatty=False, cwd="/")
    return run(list(argv), env), out.getvalue(), err.getvalue()


def golden_copy(name: str, tmp_path: Path) -> Path:
    root = tmp_path / name
    shutil.copytree(GOLDEN / name, root)
    for path in [root / "multidatabackend.json", *(root / "images").glob("*.json")]:
        path.write_text(path.read_text().replace("{ROOT}", str(root)))
    return root


def latents(root: Path) -> list[Path]:
    return sorted((root / "vae").glob("*.pt"))


def scan_findings(config: Path) -> list:
    code, out, err = cli("scan", "--deep", "--format", "json", "--config", str(config))
    assert err == "", err
    return json.loads(out)["findings"]


def repair(root: Path, name: str) -> str:
    encoder = f"diffusers-vae:{MODELS / GOLDENS[name]}"
    code, out, err = cli("repair", "--config", str(root / "multidatabackend.json"), "--encoder", encoder, "--yes")
    assert (code, err) == (0, ""), out
    return out


def load(path: Path) -> tuple[bool, torch.Tensor]:
    """(gzip-wrapped?, the tensor): SimpleTuner's reader gunzips first when it can."""
    data = path.read_bytes()
    zipped = data[:2] == b"\x1f\x8b"
    return zipped, torch.load(io.BytesIO(gzip.decompress(data) if zipped else data), weights_only=True)


def max_difference(root: Path, golden_name: str, names: list[str]) -> float:
    """Every named file equals the golden one: same container (gzip or not, a bare tensor),
    dtype and shape, values within TOLERANCE. Returns the largest difference seen."""
    worst = 0.0
    for name in names:
        golden_zipped, golden = load(GOLDEN / golden_name / "vae" / name)
        zipped, got = load(root / "vae" / name)
        assert isinstance(got, torch.Tensor) and isinstance(golden, torch.Tensor)
        assert (zipped, got.dtype, got.shape) == (golden_zipped, golden.dtype, golden.shape), name
        difference = (got.float() - golden.float()).abs().max().item()
        assert difference <= TOLERANCE, (name, difference)
        worst = max(worst, difference)
    return worst


@pytest.mark.parametrize("name", GOLDENS)
def test_golden_cache_scans_clean(name: str, tmp_path: Path) -> None:
    root = golden_copy(name, tmp_path)
    assert len(latents(root)) == 5
    assert scan_findings(root / "multidatabackend.json") == []


@pytest.mark.parametrize("name", GOLDENS)
def test_every_latent_deleted_is_recomputed_to_the_golden(name: str, tmp_path: Path) -> None:
    root = golden_copy(name, tmp_path)
    names = [p.name for p in latents(root)]
    for path in latents(root):
        path.unlink()
    assert {f["kind"] for f in scan_findings(root / "multidatabackend.json")} == {"missing-entry"}
    out = repair(root, name)
    assert "recompute      5 file(s)" in out and "missing-entry 5 -> 0" in out, out
    print(f"{name}: max abs difference {max_difference(root, name, names):.2e}")
    assert scan_findings(root / "multidatabackend.json") == []


@pytest.mark.parametrize("name", ["sdxl", "flux"])
def test_truncated_and_empty_latents_are_recomputed_to_the_golden(name: str, tmp_path: Path) -> None:
    root = golden_copy(name, tmp_path)
    truncated, empty = latents(root)[:2]
    truncated.write_bytes(truncated.read_bytes()[:200])
    empty.write_bytes(b"")
    kinds = sorted(f["kind"] for f in scan_findings(root / "multidatabackend.json"))
    assert len(kinds) == 2, kinds
    out = repair(root, name)
    assert "recompute      2 file(s)" in out, out
    max_difference(root, name, [truncated.name, empty.name])
    assert scan_findings(root / "multidatabackend.json") == []
