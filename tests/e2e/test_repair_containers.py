"""A recomputed entry keeps its container, keys and metadata, and is never written in another.

Rebuilt from the reported cases: repair through a manifest wrote torch zip pickles under
``.safetensors`` names when no healthy latent was left (ai-toolkit's ``load_file`` then failed on
all of them, "header too large") and called them verified; and it dropped the safetensors
metadata the trainer writes (musubi-tuner's ``architecture``, ``width``, ``height``,
``format_version``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from cli_run import cli
from PIL import Image
from safetensors import safe_open
from safetensors.torch import save_file
from tiny_models import build_tiny_vae

SIZES = [(64, 48), (48, 64), (64, 64), (56, 40)]


def dataset(root: Path, *, metadata: list[dict[str, str]] | None = None, key: str | None = "latent") -> Path:
    """Images, one safetensors latent each (``latent``, raw, with ``metadata``), a manifest."""
    images, cache = root / "images", root / "cache"
    images.mkdir(parents=True)
    cache.mkdir()
    rows = []
    for i, (w, h) in enumerate(SIZES):
        rng = np.random.default_rng(i)
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(images / f"im{i}.png")
        latent = torch.randn(4, h // 8, w // 8, generator=torch.Generator().manual_seed(i))
        meta = metadata[i] if metadata else None
        save_file({"latent": latent}, str(cache / f"im{i}.safetensors"), metadata=meta)
        row = {
            "source": f"images/im{i}.png",
            "cache": f"cache/im{i}.safetensors",
            "latent_hw": [h // 8, w // 8],
            "scaling": "raw",
        }
        if key is not None:
            row["key"] = key
        rows.append(row)
    manifest = root / "items.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return manifest


def repair(root: Path, manifest: Path, vae: Path) -> tuple[int, str, str]:
    return cli("repair", str(root / "cache"), "--manifest", str(manifest), "--encoder", f"diffusers-vae:{vae}", "--yes")


def test_a_recompute_keeps_the_metadata_every_peer_shares(tmp_path: Path) -> None:
    vae = build_tiny_vae(tmp_path / "vae")
    shared = {"architecture": "demo", "format_version": "1.0.1"}
    manifest = dataset(tmp_path / "ds", metadata=[shared] * len(SIZES))
    victim = tmp_path / "ds" / "cache" / "im1.safetensors"
    victim.unlink()
    code, out, err = repair(tmp_path / "ds", manifest, vae)
    assert (code, err) == (0, ""), out
    with safe_open(str(victim), "pt") as f:
        assert (list(f.keys()), f.metadata()) == (["latent"], shared)
        assert f.get_tensor("latent").shape == (4, 8, 6)


def test_metadata_that_differs_per_entry_is_not_guessed_from_a_peer(tmp_path: Path) -> None:
    vae = build_tiny_vae(tmp_path / "vae")
    metadata = [{"architecture": "z_image", "width": str(w), "height": str(h)} for w, h in SIZES]
    manifest = dataset(tmp_path / "ds", metadata=metadata)
    victim = tmp_path / "ds" / "cache" / "im1.safetensors"
    victim.unlink()
    code, out, err = repair(tmp_path / "ds", manifest, vae)
    assert code == 1 and not victim.exists()
    assert "safetensors metadata differs per entry (height, width)" in " ".join(out.split())


def test_with_no_healthy_peer_left_a_safetensors_entry_is_still_safetensors(tmp_path: Path) -> None:
    vae = build_tiny_vae(tmp_path / "vae")
    manifest = dataset(tmp_path / "ds")
    for path in (tmp_path / "ds" / "cache").iterdir():
        path.unlink()
    code, out, err = repair(tmp_path / "ds", manifest, vae)
    assert (code, err) == (0, ""), out
    for i in range(len(SIZES)):
        path = tmp_path / "ds" / "cache" / f"im{i}.safetensors"
        assert not path.read_bytes().startswith(b"PK")  # not a torch zip
        with safe_open(str(path), "pt") as f:  # what ai-toolkit and musubi-tuner load it with
            assert list(f.keys()) == ["latent"]
    code, out, err = cli("scan", "--deep", str(tmp_path / "ds" / "cache"), "--manifest", str(manifest))
    assert code == 0, out


def test_a_safetensors_entry_whose_key_nobody_names_is_refused_in_one_line(tmp_path: Path) -> None:
    vae = build_tiny_vae(tmp_path / "vae")
    manifest = dataset(tmp_path / "ds", key=None)
    for path in (tmp_path / "ds" / "cache").iterdir():
        path.unlink()
    code, out, err = repair(tmp_path / "ds", manifest, vae)
    assert code == 1 and list((tmp_path / "ds" / "cache").glob("*.safetensors")) == []
    assert "neither the layout nor a healthy peer names the key of its latent" in " ".join(out.split())


def _set_scaling(manifest: Path, scaling: str | None) -> None:
    rows = [json.loads(line) for line in manifest.read_text().splitlines()]
    for row in rows:
        row.pop("scaling", None)
        if scaling is not None:
            row["scaling"] = scaling
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_manifest_that_does_not_say_how_latents_are_scaled_is_not_guessed(tmp_path: Path) -> None:
    """The reported case: recomputed through a manifest, ai-toolkit's latents came out unscaled (5.5x)."""
    vae = build_tiny_vae(tmp_path / "vae")
    manifest = dataset(tmp_path / "ds")
    _set_scaling(manifest, None)
    victim = tmp_path / "ds" / "cache" / "im1.safetensors"
    victim.unlink()
    code, out, err = repair(tmp_path / "ds", manifest, vae)
    assert code == 1 and not victim.exists()
    assert "the manifest does not say how its latents are scaled; add a scaling column" in " ".join(out.split())


def test_a_manifest_scaling_is_applied_as_written(tmp_path: Path) -> None:
    vae = build_tiny_vae(tmp_path / "vae")
    made = {}
    for scaling in ("raw", "2.0,0.5"):
        root = tmp_path / scaling.replace(",", "_")
        manifest = dataset(root)
        _set_scaling(manifest, scaling)
        (root / "cache" / "im1.safetensors").unlink()
        code, out, err = repair(root, manifest, vae)
        assert (code, err) == (0, ""), out
        with safe_open(str(root / "cache" / "im1.safetensors"), "pt") as f:
            made[scaling] = f.get_tensor("latent")
    assert torch.allclose(made["2.0,0.5"], (made["raw"] - 0.5) * 2.0, atol=1e-6)
