"""repair's recompute: entries made again from their source, in the layout's own format.

The SimpleTuner tests use a real dataset (PNG images, bucket metadata, multidatabackend.json)
whose cache the encoder really made, plant one defect, repair, and compare the new file with
what the encoder gives for that image: for the tiny diffusers VAE, computed independently here
with diffusers and PIL, bitwise.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from factories import save_pt, saved_on
from PIL import Image
from repair_factories import POOL, image, simpletuner, tree_bytes
from tiny_models import build_tiny_clip, build_tiny_vae

from cachedoctor.cli import run
from cachedoctor.cli.environment import Environment
from cachedoctor.repair.pool import cpu_threads


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdout_isatty=False, stderr_isatty=False, stdin_isatty=False, cwd="/")
    return run(list(argv), env), out.getvalue(), err.getvalue()


def scan_json(*argv: str) -> dict:
    code, out, err = cli("scan", "--deep", "--format", "json", *argv)
    assert err == ""
    return json.loads(out)


def load(path: Path) -> torch.Tensor:
    return torch.load(path, weights_only=True)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16) if t.dtype == torch.bfloat16 else t


def test_vae_recompute_equals_diffusers_bitwise(tmp_path: Path) -> None:
    """The missing latent, recomputed through the diffusers-vae adapter, equals what the VAE
    itself gives for SimpleTuner's resize-and-crop of the image, scaled, in bf16."""
    from diffusers import AutoencoderKL

    vae = build_tiny_vae(tmp_path / "vae", scaling_factor=0.5, shift_factor=0.25)
    spec = f"diffusers-vae:{vae}"
    # one image: SimpleTuner squashes images to target_size first only in buckets with several to resize
    ds = simpletuner(tmp_path / "st", 1, encoder=spec, size=(80, 48), target=(64, 48))
    victim = ds.latent_path(ds.images[0])
    victim.unlink()
    mode = ("--posterior", "mode")  # the factory cached the mean
    code, out, err = cli("repair", "--config", str(ds.config), "--encoder", spec, "--yes", *mode)
    assert (code, err) == (0, ""), out
    assert "recompute      1 file(s)" in out and "missing-entry 1 -> 0" in out
    # Independently: SimpleTuner's recorded resize to intermediary_size, crop at (top, left).
    meta = json.loads((ds.data / "aspect_ratio_bucket_metadata_photos.json").read_text())[str(ds.images[0])]
    (rw, rh), (top, left), (tw, th) = meta["intermediary_size"], meta["crop_coordinates"], meta["target_size"]
    with Image.open(ds.images[0]) as im:
        im = im.convert("RGB").resize((rw, rh), Image.Resampling.LANCZOS).crop((left, top, left + tw, top + th))
        im = im.resize((tw // 4, th // 4), Image.Resampling.LANCZOS)  # latent (th/8, tw/8) x the VAE's downscale 2
    x = torch.from_numpy(np.asarray(im, dtype=np.uint8).copy()).permute(2, 0, 1).float()[None] / 127.5 - 1.0
    model = AutoencoderKL.from_pretrained(vae)
    threads = torch.get_num_threads()
    torch.set_num_threads(cpu_threads(1))  # the threads repair's one CPU worker uses: convolutions round by it
    try:
        with torch.no_grad():
            expected = ((model.encode(x).latent_dist.mode()[0] - 0.25) * 0.5).to(torch.bfloat16)
    finally:
        torch.set_num_threads(threads)
    got = load(victim)
    assert got.shape == (4, th // 8, tw // 8) and got.dtype == torch.bfloat16
    assert torch.equal(bits(got), bits(expected))


def test_each_defect_is_recomputed_to_the_original(tmp_path: Path) -> None:
    """Missing, truncated, NaN, stale, wrong dtype and wrong size: each comes back equal to
    the latent the cache held when it was healthy (the encoder is deterministic)."""
    ds = simpletuner(tmp_path, 8)
    healthy = {p: load(ds.latent_path(p)) for p in ds.images}
    missing, trunc, nan, stale, dtype, shape = ds.images[:6]
    ds.latent_path(missing).unlink()
    path = ds.latent_path(trunc)
    path.write_bytes(path.read_bytes()[:300])
    broken = healthy[nan].clone()
    broken[0, 0, 0] = float("nan")
    save_pt(ds.latent_path(nan), broken)
    past = time.time() - 3600  # the image was edited after its latent was written
    os.utime(ds.latent_path(stale), (past, past))
    save_pt(ds.latent_path(dtype), healthy[dtype].float())
    save_pt(ds.latent_path(shape), torch.zeros(3, 5, 5, dtype=torch.bfloat16))
    sources = ds.source_bytes()
    code, out, err = cli("repair", "--deep", "--config", str(ds.config), "--encoder", POOL, "--yes")
    assert (code, err) == (0, ""), out
    assert "recompute      6 file(s)" in out and "done: 6 verified" in out
    for victim in (missing, trunc, nan, stale, dtype, shape):
        got = load(ds.latent_path(victim))
        assert got.dtype == torch.bfloat16 and torch.equal(bits(got), bits(healthy[victim])), victim
    assert ds.source_bytes() == sources
    assert scan_json("--config", str(ds.config))["findings"] == []
    (run_folder,) = (ds.vae / ".cachedoctor" / "quarantine").iterdir()
    assert sorted(p.name for p in run_folder.iterdir() if p.suffix == ".pt") == sorted(
        ds.latent_path(p).name for p in (trunc, nan, stale, dtype, shape)
    )


def test_recompute_without_encoder_is_blocked_and_changes_nothing(tmp_path: Path) -> None:
    ds = simpletuner(tmp_path, 4)
    ds.latent_path(ds.images[0]).unlink()
    before = tree_bytes(ds.root)
    code, out, _ = cli("repair", "--config", str(ds.config), "--yes")
    assert code == 1
    assert "cannot fix     1 file(s): needs an encoder for images (--encoder)" in out
    assert "not clean" in out and tree_bytes(ds.root) == before


def test_unknown_source_with_keep_blocked_is_left_in_place(tmp_path: Path) -> None:
    """Without the dataset a corrupt latent cannot be made again: --keep-blocked leaves it."""
    ds = simpletuner(tmp_path, 4)
    path = ds.latent_path(ds.images[0])
    path.write_bytes(path.read_bytes()[:100])
    code, out, _ = cli("repair", str(ds.vae), "--layout", "none", "--encoder", POOL, "--keep-blocked", "--yes")
    assert code == 1 and "its source is unknown: repair with the dataset" in out
    assert path.stat().st_size == 100


def test_unreadable_entry_that_cannot_be_recomputed_is_quarantined(tmp_path: Path) -> None:
    """Left in place, a truncated file stops the trainer that loads it; moved to the quarantine,
    the trainer re-caches the item (and the old bytes can be restored)."""
    ds = simpletuner(tmp_path, 4)
    path = ds.latent_path(ds.images[0])
    path.write_bytes(path.read_bytes()[:100])
    code, out, _ = cli("repair", str(ds.vae), "--layout", "none", "--encoder", POOL, "--yes")
    assert code == 0 and not path.exists(), out
    assert "1 of them not recomputed (its source is unknown: repair with the dataset" in out, out
    (kept,) = (ds.vae / ".cachedoctor" / "quarantine").rglob(path.name)
    assert kept.stat().st_size == 100


def test_name_collision_needs_a_person(tmp_path: Path) -> None:
    ds = simpletuner(tmp_path, 3)
    image(ds.data / "img000.jpg", (48, 32), seed=99)  # same stem as img000.png: one cache file
    before = tree_bytes(ds.root)
    code, out, _ = cli("repair", "--config", str(ds.config), "--encoder", POOL, "--yes")
    assert code == 1 and "needs a person   1 file(s)" not in out and "needs a person 1 file(s)" in out
    assert tree_bytes(ds.root) == before


def test_text_embeds_recomputed_with_clip(tmp_path: Path) -> None:
    clip = build_tiny_clip(tmp_path / "clip")
    te = f"transformers-text:{clip}"
    ds = simpletuner(tmp_path / "st", 3, text_encoder=te)
    caption = ds.images[1].stem.replace("_", " ")
    victim = ds.embed_path(caption)
    healthy = torch.load(victim, weights_only=True)
    victim.write_bytes(victim.read_bytes()[:500])
    code, out, err = cli(
        "repair", "--config", str(ds.config), "--encoder", POOL, "--encoder", te, "--batch-size", "1", "--yes"
    )  # as the cache was built: batch size changes rounding
    assert (code, err) == (0, ""), out
    got = torch.load(victim, weights_only=True)
    assert list(got) == ["prompt_embeds", "pooled_prompt_embeds"]
    assert got["prompt_embeds"].shape == healthy["prompt_embeds"].shape == (1, 16, 32)
    assert all(torch.equal(got[k], healthy[k]) for k in healthy)


def _kohya(folder: Path, n: int) -> list[Path]:
    """kohya sd-scripts latents: ``<stem>_<W>x<H>_sdxl.npz`` with ``latents_<h>x<w>``,
    ``original_size_<h>x<w>`` and ``crop_ltrb_<h>x<w>``, made with the pool encoder."""
    from cachedoctor.encoders import load_encoder
    from cachedoctor.layouts.prepare import prepare_image
    from cachedoctor.repair.model import RecomputeSpec

    enc = load_encoder(POOL)
    enc.load("cpu")
    folder.mkdir(parents=True, exist_ok=True)
    images = []
    for i in range(n):
        img = image(folder / f"pic{i}.png", (40, 24), seed=i)
        prep = prepare_image(RecomputeSpec("latent", str(img), "kohya-npz", latent_hw=(3, 4), prepare="kohya"), 8)
        lat = enc.encode(prep.pixels[None])["latent"][0].numpy()
        np.savez(
            folder / f"pic{i}_0040x0024_sdxl.npz",
            latents_3x4=lat,
            original_size_3x4=np.array([40, 24]),
            crop_ltrb_3x4=np.array(prep.recorded["crop_ltrb"]),
        )
        images.append(img)
    return images


def test_kohya_npz_recomputed_with_its_keys(tmp_path: Path) -> None:
    _kohya(tmp_path, 5)
    victim = tmp_path / "pic2_0040x0024_sdxl.npz"
    with np.load(victim) as data:
        healthy = {k: data[k] for k in data.files}
    broken = dict(healthy, latents_3x4=np.full_like(healthy["latents_3x4"], np.nan))
    np.savez(victim, **broken)
    past = time.time() - 3600
    os.utime(tmp_path / "pic3_0040x0024_sdxl.npz", (past, past))  # stale: the image changed after caching
    code, out, err = cli("repair", "--deep", str(tmp_path), "--layout", "kohya", "--encoder", POOL, "--yes")
    assert (code, err) == (0, ""), out
    with np.load(victim) as data:
        assert data.files == ["latents_3x4", "original_size_3x4", "crop_ltrb_3x4"]
        for key in data.files:
            assert data[key].dtype == healthy[key].dtype and np.array_equal(data[key], healthy[key]), key
    assert scan_json(str(tmp_path), "--layout", "kohya")["findings"] == []


def test_kohya_missing_entry_is_blocked_with_the_reason(tmp_path: Path) -> None:
    _kohya(tmp_path, 3)
    (tmp_path / "pic1_0040x0024_sdxl.npz").unlink()
    code, out, _ = cli("repair", str(tmp_path), "--layout", "kohya", "--encoder", POOL, "--yes")
    assert code == 1 and "kohya records an entry's bucket only inside the entry" in out


def test_onetrainer_dict_recomputed(tmp_path: Path) -> None:
    """A OneTrainer variation folder: ``<i>.pt`` dicts indexed by ``aggregate.pt``; the missing
    entry comes back with the same keys and value types as its peers."""
    from cachedoctor.encoders import load_encoder
    from cachedoctor.layouts.prepare import prepare_image
    from cachedoctor.repair.model import RecomputeSpec

    enc = load_encoder(POOL)
    enc.load("cpu")
    images_dir = tmp_path / "images"
    images_dir.mkdir()
    variation = tmp_path / "cache" / "image" / ("ab" * 32) / "variation-0"
    variation.mkdir(parents=True)
    aggregate, healthy = [], {}
    for i in range(4):
        img = image(images_dir / f"{i}.png", (40, 40), seed=i)
        prep = prepare_image(RecomputeSpec("latent", str(img), "dict", latent_hw=(4, 4), prepare="mgds"), 8)
        entry = {
            "latent_image": enc.encode(prep.pixels[None])["latent"][0].clone(),
            "original_resolution": (40, 40),
            "crop_offset": tuple(prep.recorded["crop_offset"]),
        }
        healthy[i] = entry
        save_pt(variation / f"{i}.pt", entry, fileobj=False)
        aggregate.append({"crop_resolution": (32, 32), "image_path": str(img)})
    save_pt(variation / "aggregate.pt", aggregate, fileobj=False)
    (variation / "2.pt").unlink()
    with saved_on("cuda:0"):
        save_pt(variation / "3.pt", healthy[3], fileobj=False)
    code, out, err = cli("repair", str(tmp_path / "cache"), "--encoder", POOL, "--yes")
    assert (code, err) == (0, ""), out
    assert "recompute      1 file(s)" in out and "rewrite-cpu    1 file(s)" in out
    got = torch.load(variation / "2.pt", weights_only=True)
    assert list(got) == ["latent_image", "original_resolution", "crop_offset"]
    assert torch.equal(got["latent_image"], healthy[2]["latent_image"])
    assert got["original_resolution"] == (40, 40) and got["crop_offset"] == healthy[2]["crop_offset"]


@pytest.mark.slow
def test_two_cpu_workers_write_what_one_writes(tmp_path: Path) -> None:
    """--device cpu --workers 2 runs the same pipeline in two spawned processes."""
    one, two = simpletuner(tmp_path / "one", 6), simpletuner(tmp_path / "two", 6)
    for ds in (one, two):
        for p in ds.images[:4]:
            ds.latent_path(p).unlink()
    assert cli("repair", "--config", str(one.config), "--encoder", POOL, "--yes")[0] == 0
    code, out, _ = cli(
        "repair", "--config", str(two.config), "--encoder", POOL, "--workers", "2", "--batch-size", "1", "--yes"
    )
    assert code == 0, out
    assert {k: v for k, v in tree_bytes(one.vae).items()} == tree_bytes(two.vae)


@pytest.mark.slow
def test_torchrun_two_ranks(tmp_path: Path) -> None:
    """Under torchrun every rank plans the same work, does its share, keeps its own journal;
    rank 0 gathers and reports once."""
    ds = simpletuner(tmp_path, 8)
    for p in ds.images[:5]:
        ds.latent_path(p).unlink()
    with saved_on("cuda:1"):
        save_pt(ds.latent_path(ds.images[6]), load(ds.latent_path(ds.images[6])))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            "-m",
            "cachedoctor",
            "repair",
            "--config",
            str(ds.config),
            "--encoder",
            POOL,
            "--yes",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("done: 6 verified") == 1 and proc.stdout.count("plan:") == 1
    state = ds.vae / ".cachedoctor"
    assert sorted(p.name for p in state.glob("journal-rank*.sqlite")) == [
        "journal-rank0.sqlite",
        "journal-rank1.sqlite",
    ]
    assert len(list((state / "quarantine").iterdir())) == 1
    assert scan_json("--config", str(ds.config))["findings"] == []


def test_orphan_with_another_dtype_is_quarantined(tmp_path: Path) -> None:
    """An orphan is also a dtype-mismatch; nothing can recompute it (no item wants it), so it
    is quarantined rather than left blocked."""
    ds = simpletuner(tmp_path, 4)
    orphan = ds.vae / ("0" * 64 + ".pt")
    save_pt(orphan, torch.zeros(3, 3, 4))
    code, out, _ = cli("repair", "--config", str(ds.config), "--yes")
    assert code == 0 and "quarantine     1 file(s)" in out and "cannot fix" not in out
    assert not orphan.exists()


def test_encoder_that_fails_to_load_is_one_line_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model that cannot be loaded (here: out of memory) stops the run before any write."""
    (tmp_path / "oom_adapter.py").write_text(
        "from cachedoctor.encoders.example_adapter import PoolEncoder\n"
        "class Oom(PoolEncoder):\n"
        "    def load(self, device):\n"
        "        raise RuntimeError('CUDA out of memory. Tried to allocate 20.00 GiB')\n"
        "def factory(arg):\n"
        "    return Oom(8)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    ds = simpletuner(tmp_path / "st", 3)
    ds.latent_path(ds.images[0]).unlink()
    before = tree_bytes(ds.vae)
    code, out, err = cli("repair", "--config", str(ds.config), "--encoder", "oom_adapter:factory", "--yes")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "oom_adapter:factory: cannot load it on cpu (RuntimeError: CUDA out of memory" in err
    assert tree_bytes(ds.vae) == before
