"""``cachedoctor repair|recover|quarantine s3://...`` end to end against moto's S3 server: the
CLI in process (``cli_run.cli``), one real subprocess killed mid-repair for recover."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_run import cli
from factories import latent, pt_bytes, saved_on
from s3_repair_helpers import Bucket, kinds

from cachedoctor.repair.prefix_lock import PrefixLock
from cachedoctor.repair.store_dataset import LOCAL_BESIDE


@pytest.fixture
def bucket(s3_server: object, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Bucket:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))  # journal and scan state
    return Bucket(s3_server.client(), s3_bucket)  # type: ignore[attr-defined]


def cuda_tagged(seed: int = 1) -> bytes:
    with saved_on("cuda:0"):
        return pt_bytes(latent(seed=seed))


def run_id_of(out: str) -> str:
    return next(line.split()[4] for line in out.splitlines() if line.startswith("undo: "))


def test_repair_quarantine_list_and_restore_of_a_prefix(s3_server: Any, bucket: Bucket) -> None:
    tagged, torn, healthy = cuda_tagged(), pt_bytes(latent(seed=3))[:-40], pt_bytes(latent(seed=2))
    bucket.put("a.pt", tagged)
    bucket.put("t.pt", torn)
    bucket.put("b.pt", healthy)

    code, out, err = cli("repair", "--yes", bucket.url(), columns=400)
    assert (code, err) == (0, "")
    assert "done: 2 verified, 0 skipped, 0 blocked, 0 failed" in out
    assert "repaired: the rescan is clean of what was repaired" in out
    run = run_id_of(out)
    assert f"undo: cachedoctor quarantine restore {run} {bucket.url()}" in out
    assert kinds(bucket, "a.pt") == [] and bucket.get(bucket.url("t.pt")) is None
    assert bucket.get(bucket.url("b.pt")) == healthy
    assert cli("scan", "--deep", bucket.url())[0] == 0

    code, out, err = cli("quarantine", "list", "--all", "--s3-endpoint-url", s3_server.url, bucket.url(), columns=400)
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"{run}: 2 file(s), {out.split(', ')[1].splitlines()[0]}",
        "  a.pt  [rewrite-cpu: device-tagged]",
        "  t.pt  [quarantine: corrupt-archive]",
    ]
    code, summary, err = cli("quarantine", "list", bucket.url(), columns=400)  # a summary per run
    assert (code, err) == (0, "")
    assert summary.splitlines()[0].startswith(f"{run} (") and summary.splitlines()[1:2] == [
        "  why: corrupt-archive 1, device-tagged 1"
    ]
    assert cli("quarantine", "list", run[:8], bucket.url(), columns=400)[1] == out  # one run by a prefix
    code, out, err = cli("quarantine", "restore", "1999", bucket.url())
    assert (code, out) == (2, "")
    assert (
        err
        == f"cachedoctor: error: {bucket.url()}: no quarantine run '1999' here or below; see `cachedoctor quarantine list`\n"
    )

    code, out, err = cli("quarantine", "restore", "latest", bucket.url(), "--yes", columns=400)
    assert (code, err) == (0, "")
    assert out.startswith(f"restored 2 file(s) from {run} in {bucket.url()}; the objects they replaced")
    assert (bucket.get(bucket.url("a.pt")), bucket.get(bucket.url("t.pt"))) == (tagged, torn)


def test_a_dry_run_takes_no_lock_and_writes_nothing(bucket: Bucket) -> None:
    bucket.put("a.pt", cuda_tagged())
    code, out, _ = cli("repair", "--dry-run", bucket.url())
    assert code == 1 and "dry run: nothing was changed" in out
    assert bucket.keys() == ["a.pt"]
    assert (
        list((Path(os.environ["XDG_CACHE_HOME"]) / "cachedoctor" / "remote" / "s3" / bucket.name).glob("*.repair"))
        == []
    )


def test_a_repair_of_a_locked_prefix_exits_2_with_one_line(bucket: Bucket) -> None:
    old = cuda_tagged()
    bucket.put("a.pt", old)
    with PrefixLock(bucket.store, bucket.location, "run-of-another-repair"):
        code, out, err = cli("repair", "--yes", bucket.url())
    assert code == 2 and out == ""
    lock = bucket.url(".cachedoctor/lock")
    assert err.count("\n") == 1 and err.startswith(f"cachedoctor: error: {lock}: another repair holds this prefix")
    assert "run run-of-another-repair" in err
    assert bucket.get(bucket.url("a.pt")) == old


@pytest.mark.slow
def test_recover_apply_finishes_a_repair_killed_between_its_copy_and_its_put(bucket: Bucket) -> None:
    old = cuda_tagged()
    bucket.put("a.pt", old)
    env = dict(os.environ, CACHEDOCTOR_TEST_KILL_AT_POINT="remote-after-copy")
    killed = subprocess.run(
        [sys.executable, "-m", "cachedoctor", "repair", "--yes", bucket.url()],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL

    code, out, err = cli("recover", bucket.url(), columns=400)
    assert (code, err) == (1, "")  # something to recover
    assert f"lock left by a repair whose process is gone (--apply clears it): {bucket.url('.cachedoctor/lock')}" in out
    assert "0 item(s) finished, 1 not" in out

    code, out, err = cli("recover", "--apply", "--yes", bucket.url(), columns=400)
    assert (code, err) == (0, ""), out
    assert kinds(bucket, "a.pt") == []
    (kept,) = [k for k in bucket.keys(".cachedoctor/") if k.endswith("a.pt")]
    assert bucket.get(bucket.url(kept)) == old
    assert bucket.keys(".cachedoctor/lock") == []
    assert "nothing to recover" in cli("recover", bucket.url())[1]


def test_a_dataset_whose_cache_is_in_a_bucket_is_repaired_in_the_bucket(
    s3_server: Any, bucket: Bucket, tmp_path: Path
) -> None:
    photos = Path(__file__).resolve().parents[2] / "fixtures" / "datasets" / "simpletuner" / "datasets" / "photos"
    image = next(p for p in sorted(photos.iterdir()) if p.suffix in (".png", ".jpg"))
    bucket.client.put_object(Bucket=bucket.name, Key=f"photos/{image.name}", Body=image.read_bytes())
    bucket.put("vae/photos/x.pt", cuda_tagged())
    backend = {
        "id": "photos",
        "type": "aws",
        "aws_bucket_name": bucket.name,
        "aws_endpoint_url": s3_server.url,
        "aws_region_name": "us-east-1",
        "aws_data_prefix": "photos",
        "cache_dir_vae": "cache/vae/photos",
        "resolution": 64,
        "resolution_type": "pixel",
    }
    text = {
        "id": "text",
        "type": "local",
        "dataset_type": "text_embeds",
        "default": True,
        "cache_dir": str(tmp_path / "t"),
    }
    config = tmp_path / "multidatabackend.json"
    config.write_text(json.dumps([backend, text]))
    (tmp_path / "config.json").write_text(json.dumps({"model_family": "sdxl", "output_dir": str(tmp_path / "out")}))
    (tmp_path / "t").mkdir()
    orphan = tmp_path / "t" / f"{'0' * 32}-sdxl.pt"  # a local cache beside the bucket's: not this run's
    orphan.write_bytes(pt_bytes(latent(seed=4)))

    code, out, err = cli("repair", "--yes", "--config", str(config), columns=400)
    assert (code, err) == (1, ""), out  # repaired in the bucket: what needs an encoder or metadata stays
    assert "done: 1 verified, 0 skipped, 3 blocked, 0 failed" in out
    assert "no bucket metadata for it" in out
    assert f"cannot fix     1 file(s): {LOCAL_BESIDE}" in out and orphan.exists()
    assert bucket.get(bucket.url("vae/photos/x.pt")) is None  # the orphan moved into that prefix's quarantine
    (kept,) = [k for k in bucket.keys("vae/photos/.cachedoctor/") if k.endswith("/x.pt")]
    assert bucket.get(bucket.url(kept)) == cuda_tagged()
