"""Edges an independent review of issue 14's repair found: contradicting dataset options, an
empty dataset TOML, a quarantined entry counted as "worse", a run stopped before its first
recompute blocking the next one, a dry run writing the state database, and a kohya subset with
``flip_aug`` whose files lack the flipped latent."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest
from cli_run import cli

KOHYA = Path(__file__).resolve().parents[2] / "fixtures" / "trainers" / "kohya"
MODELS = Path(__file__).resolve().parents[2] / "fixtures" / "trainers" / "models"


@pytest.fixture
def golden(tmp_path: Path) -> Path:
    shutil.copytree(KOHYA, tmp_path / "kohya")
    return tmp_path / "kohya"


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--layout", "onetrainer"], "--kohya-config is for --layout kohya, not --layout onetrainer"),
        (["--manifest", "x.jsonl"], "--manifest and --kohya-config describe different trainers' datasets"),
    ],
)
def test_contradicting_dataset_options_stop_in_one_line(golden: Path, extra: list[str], message: str) -> None:
    for command in ("scan", "repair"):
        code, out, err = cli(
            command,
            "--kohya-config",
            str(golden / "sdxl.toml"),
            *extra,
            "--dry-run" if command == "repair" else "--no-state",
        )
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (out, err)


def test_a_toml_with_no_image_folder_is_an_error_not_a_clean_scan(tmp_path: Path) -> None:
    toml = tmp_path / "empty.toml"
    toml.write_text("[general]\nresolution = 128\n")
    code, out, err = cli("scan", "--kohya-config", str(toml))
    assert code == 2 and f"{toml}: names no image folder" in err, (out, err)


def test_an_unreadable_entry_quarantined_instead_of_recomputed_is_not_worse(golden: Path) -> None:
    victim = golden / "sdxl" / "flip" / "b_0100x0150_sdxl.npz"
    victim.write_bytes(victim.read_bytes()[:500])
    code, out, err = cli("repair", str(golden / "sdxl" / "flip"), "--layout", "kohya", "--yes")
    assert err == "" and "worse:" not in out and not victim.exists(), out
    assert "the trainer re-caches them" in " ".join(out.split())  # the plan said so (wrapped at 80 columns)
    assert "left to the trainer: moved to the quarantine, not recomputed" in " ".join(out.split())


def test_a_run_that_stopped_before_its_first_recompute_does_not_pin_its_encoder(golden: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken-vae"
    shutil.copytree(MODELS / "sdxl", broken)
    weights = broken / "diffusion_pytorch_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # fails to load in the worker
    (golden / "sdxl" / "flip" / "a_0150x0100_sdxl.npz").unlink()
    toml = str(golden / "sdxl.toml")
    first = cli("repair", "--kohya-config", toml, "--encoder", f"diffusers-vae:{broken}", "--yes")
    assert first[0] == 2, first
    code, out, err = cli("repair", "--kohya-config", toml, "--encoder", f"diffusers-vae:{MODELS / 'sdxl'}", "--yes")
    assert (code, err) == (0, ""), out
    assert (golden / "sdxl" / "flip" / "a_0150x0100_sdxl.npz").is_file()


def test_a_dry_run_leaves_the_state_database_as_it_was(golden: Path) -> None:
    toml = str(golden / "sdxl.toml")
    assert cli("scan", "--kohya-config", toml)[0] == 0  # makes the per-folder state databases
    (golden / "sdxl" / "plain" / "d_0128x0128_sdxl.npz").unlink()
    before = _tree(golden)
    code, out, _err = cli("repair", "--kohya-config", toml, "--dry-run")
    assert code == 1 and "dry run: nothing was changed" in out
    assert _tree(golden) == before


def test_flip_aug_in_the_toml_adds_the_flipped_latent_its_peers_lack(golden: Path) -> None:
    toml = golden / "sdxl.toml"
    toml.write_text(toml.read_text().replace('image_dir = "sdxl/plain"', 'image_dir = "sdxl/plain"\n  flip_aug = true'))
    victim = golden / "sdxl" / "plain" / "f_0090x0190_sdxl.npz"
    victim.unlink()
    code, out, err = cli(
        "repair", "--kohya-config", str(toml), "--encoder", f"diffusers-vae:{MODELS / 'sdxl'}", "--yes"
    )
    assert err == "", out
    with np.load(victim) as data:
        assert "latents_flipped" in data.files and data["latents_flipped"].shape == data["latents"].shape, data.files
