"""``cachedoctor repair --config X --encoder ...`` where X names a SimpleTuner ``aws`` dataset:
entries of a cache in a bucket recomputed from the dataset's images in that bucket.

A small SimpleTuner dataset whose cache the encoder really made (``repair_factories``) is
uploaded to a bucket of moto's S3 server as SimpleTuner keeps an ``aws`` dataset (images and
bucket metadata under ``aws_data_prefix``, keyed by object key; latents under ``cache_dir_vae``),
defects are planted there, and the CLI repairs it in process. The recover test kills a real
subprocess between the image's GET and the PUT.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from cli_run import cli
from factories import save_pt
from repair_factories import POOL, Dataset, simpletuner
from s3_repair_helpers import Bucket, kinds
from tiny_models import build_tiny_vae

TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture
def bucket(s3_server: object, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Bucket:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))  # journal, scan state, templates
    return Bucket(s3_server.client(), s3_bucket, prefix="cache/vae/photos")  # type: ignore[attr-defined]


def upload(ds: Dataset, bucket: Bucket, s3_server: Any, skip: tuple[Path, ...] = ()) -> Path:
    """The dataset as an ``aws`` dataset in ``bucket`` (without the latents of ``skip``); its config."""
    for path in sorted(ds.data.iterdir()):
        body = path.read_bytes()
        if path.name.startswith("aspect_ratio_bucket_"):  # keyed by object key in a bucket
            body = body.replace(f"{ds.data}/".encode(), b"photos/")
        bucket.client.put_object(Bucket=bucket.name, Key=f"photos/{path.name}", Body=body)
    for image in ds.images:
        if image not in skip:
            latent = ds.latent_path(image)
            bucket.put(latent.name, latent.read_bytes())
    backend = {
        "id": "photos",
        "type": "aws",
        "aws_bucket_name": bucket.name,
        "aws_endpoint_url": s3_server.url,
        "aws_region_name": "us-east-1",
        "aws_data_prefix": "photos",
        "cache_dir_vae": "cache/vae/photos",
        "caption_strategy": "filename",
    }
    config = ds.root / "aws" / "multidatabackend.json"
    config.parent.mkdir()
    config.write_text(json.dumps([backend]))
    return config


def run_id_of(out: str) -> str:
    return next(line.split()[4] for line in out.splitlines() if line.startswith("undo: "))


@pytest.mark.slow  # a real diffusers VAE, three repairs' worth of encoding
def test_an_entry_recomputed_from_the_bucket_is_the_bytes_of_the_local_recompute(
    s3_server: Any, bucket: Bucket, tmp_path: Path
) -> None:
    """Faithfulness: the same missing entry, recomputed by the tiny real diffusers VAE from the
    dataset on disk and from the same dataset in a bucket, gives the same file, byte for byte
    (and the latent the cache held before it went missing)."""
    vae = build_tiny_vae(tmp_path / "vae", scaling_factor=0.5, shift_factor=0.25)
    spec = f"diffusers-vae:{vae}"
    ds = simpletuner(tmp_path / "st", 3, encoder=spec, size=(80, 48), target=(64, 48))
    victim = ds.latent_path(ds.images[0])
    original = torch.load(victim, weights_only=True)
    config = upload(ds, bucket, s3_server, skip=(ds.images[0],))
    victim.unlink()

    mode = ("--posterior", "mode")  # the factory cached the mean
    code, out, err = cli("repair", "--config", str(ds.config), "--encoder", spec, "--yes", *mode)
    assert (code, err) == (0, ""), out
    local = victim.read_bytes()

    code, out, err = cli("repair", "--config", str(config), "--encoder", spec, "--yes", *mode, columns=400)
    assert (code, err) == (0, ""), out
    assert "recompute      1 file(s)" in out and "done: 1 verified, 0 skipped, 0 blocked, 0 failed" in out
    remote = bucket.get(bucket.url(victim.name))
    assert remote == local
    got = torch.load(victim, weights_only=True)
    assert torch.equal(got.view(torch.int16), original.view(torch.int16))
    assert bucket.keys(".cachedoctor/") == []  # a missing entry has no old version to keep; the lock is gone


def test_a_missing_and_a_nan_latent_recomputed_in_the_bucket_the_old_one_restorable(
    s3_server: Any, bucket: Bucket, tmp_path: Path
) -> None:
    ds = simpletuner(tmp_path / "st", 4, dtype="float32")  # not SimpleTuner's default: the peers are the template
    missing, nan = ds.images[:2]
    healthy = {p: ds.latent_path(p).read_bytes() for p in ds.images}
    broken = torch.load(ds.latent_path(nan), weights_only=True).clone()
    broken[0, 0, 0] = float("nan")
    save_pt(ds.latent_path(nan), broken)
    nan_bytes = ds.latent_path(nan).read_bytes()
    config = upload(ds, bucket, s3_server, skip=(missing,))

    code, out, err = cli("repair", "--dry-run", "--config", str(config), "--encoder", POOL, columns=400)
    assert code == 1 and "recompute      2 file(s)" in out, out + err
    assert bucket.keys(".cachedoctor/") == []

    code, out, err = cli("repair", "--config", str(config), "--encoder", POOL, "--yes", columns=400)
    assert (code, err) == (0, ""), out
    assert "done: 2 verified, 0 skipped, 0 blocked, 0 failed" in out
    run = run_id_of(out)
    for image in (missing, nan):
        name = ds.latent_path(image).name
        assert kinds(bucket, name) == []
        got = torch.load(io.BytesIO(bucket.get(bucket.url(name)) or b""), weights_only=True)
        want = torch.load(io.BytesIO(healthy[image]), weights_only=True)
        assert got.dtype == torch.float32 and torch.equal(got, want), name
    nan_name = ds.latent_path(nan).name
    assert bucket.keys(".cachedoctor/") == [
        f".cachedoctor/quarantine/{run}/.records.jsonl",
        f".cachedoctor/quarantine/{run}/{nan_name}",
    ]
    assert [r["action"] for r in bucket.records(run)] == ["recompute"]
    assert cli("scan", "--deep", "--config", str(config), "--no-state")[0] == 0

    code, out, err = cli("quarantine", "restore", run, bucket.url(), "--yes", columns=400)
    assert (code, err) == (0, ""), out
    assert bucket.get(bucket.url(nan_name)) == nan_bytes


@pytest.mark.slow  # two real diffusers VAEs, 22 latents in the bucket
def test_a_wrong_vae_is_refused_before_its_put_as_on_disk(s3_server: Any, bucket: Bucket, tmp_path: Path) -> None:
    """The write-time check is the local one (``verify.problems_of``, ``peer_scale.py``): a
    recompute through another VAE, off its peers' scale, is refused with the one line naming the
    encoder, and nothing in the bucket changes."""
    right = f"diffusers-vae:{build_tiny_vae(tmp_path / 'vae')}"
    wrong = f"diffusers-vae:{build_tiny_vae(tmp_path / 'other-vae', seed=1, scaling_factor=1.0)}"
    ds = simpletuner(tmp_path / "st", 22, encoder=right)
    victim = ds.images[0]
    config = upload(ds, bucket, s3_server, skip=(victim,))
    before = {key: bucket.get(bucket.url(key)) for key in bucket.keys("")}

    code, out, err = cli("repair", "--config", str(config), "--encoder", wrong, "--yes", columns=400)
    assert (code, err) == (1, ""), out
    assert "done: 0 verified, 0 skipped, 0 blocked, 1 failed" in out
    assert (
        f"  failed: refused: recomputed latent for {victim.name} is off its peers' scale (std " in out
        and f"the encoder {wrong} may be the wrong VAE or scaling for this cache; nothing replaced" in out
    )
    assert {
        key: bucket.get(bucket.url(key)) for key in bucket.keys("") if not key.startswith(".cachedoctor/")
    } == before


def test_without_a_dataset_a_recompute_is_blocked_as_on_disk(bucket: Bucket, tmp_path: Path) -> None:
    """``repair s3://prefix --encoder``: no dataset names the entry's image, so, as a local
    repair of a folder, the recompute is blocked with one line and nothing changes."""
    ds = simpletuner(tmp_path / "st", 2)
    broken = torch.load(ds.latent_path(ds.images[0]), weights_only=True).clone()
    broken[0, 0, 0] = float("nan")
    save_pt(ds.latent_path(ds.images[0]), broken)
    old = ds.latent_path(ds.images[0]).read_bytes()
    name = bucket.put(ds.latent_path(ds.images[0]).name, old)

    code, out, err = cli("repair", bucket.url(), "--encoder", POOL, "--yes", columns=400)
    assert code == 1 and err == "", out
    assert "its source is unknown: repair with the dataset (--config" in out
    assert bucket.get(name) == old and bucket.keys(".cachedoctor/") == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("victim", "point"),
    [("nan", "remote-before-put"), ("missing", "remote-before-put"), ("missing", "remote-after-put")],
)
def test_recover_finishes_a_recompute_killed_around_its_put(
    s3_server: Any, bucket: Bucket, tmp_path: Path, victim: str, point: str
) -> None:
    """Killed between the image's GET and the PUT (the old object, or the gap, still there), or
    after a missing entry's PUT before the journal heard of it: ``recover --apply`` finishes."""
    ds = simpletuner(tmp_path / "st", 3)
    image = ds.images[1]
    name = ds.latent_path(image).name
    healthy = ds.latent_path(image).read_bytes()
    before: bytes | None = None
    if victim == "nan":
        broken = torch.load(ds.latent_path(image), weights_only=True).clone()
        broken[0, 0, 0] = float("nan")
        save_pt(ds.latent_path(image), broken)
        before = ds.latent_path(image).read_bytes()
    config = upload(ds, bucket, s3_server, skip=(image,) if victim == "missing" else ())

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent)]))
    env["CACHEDOCTOR_TEST_KILL_AT_POINT"] = point
    argv = [sys.executable, "-m", "cachedoctor", "repair", "--config", str(config), "--encoder", POOL, "--yes"]
    killed = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    if point == "remote-before-put":
        assert bucket.get(bucket.url(name)) == before  # nothing a reader sees has changed
    assert ".cachedoctor/lock" in bucket.keys(".cachedoctor/")

    code, out, err = cli("recover", "--config", str(config), columns=400)
    assert (code, err) == (1, ""), out
    assert "interrupted repair in " + bucket.url() in out and "1 not; encoder(s): " + POOL in out

    code, out, err = cli("recover", "--apply", "--yes", "--config", str(config), columns=400)
    assert (code, err) == (0, ""), out
    assert "done: 1 verified, 0 skipped, 0 blocked, 0 failed" in out
    got = torch.load(io.BytesIO(bucket.get(bucket.url(name)) or b""), weights_only=True)
    want = torch.load(io.BytesIO(healthy), weights_only=True)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    kept = [k for k in bucket.keys(".cachedoctor/") if k.endswith(name)]
    assert [bucket.get(bucket.url(k)) for k in kept] == ([before] if before else [])  # kept once, if at all
    assert ".cachedoctor/lock" not in bucket.keys(".cachedoctor/")
