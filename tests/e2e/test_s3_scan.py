"""``cachedoctor scan s3://bucket/prefix`` against moto's S3 server: one planted defect per test,
the exact finding under its s3:// URL; what a scan costs in requests; the state database's
place; the one-line errors."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from factories import latent, leaked_view, malicious_torch_zip, pt_bytes, saved_on

from cachedoctor.stores.connect import forget, store_for
from tests.cli_run import cli

pytestmark = pytest.mark.usefixtures("s3_server")


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Remote state databases go to the user cache dir: a fresh one per test."""
    home = tmp_path / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    yield home
    forget()


def put(server: object, bucket: str, key: str, data: bytes) -> None:
    server.client().put_object(Bucket=bucket, Key=key, Body=data)  # type: ignore[attr-defined]


def healthy(server: object, bucket: str, n: int = 3, folder: str = "cache") -> None:
    for i in range(n):
        put(server, bucket, f"{folder}/{i}.pt", pt_bytes({"latents": latent(seed=i)}))


def scan(*argv: str) -> tuple[int, dict, str]:
    code, out, err = cli("scan", "--format", "json", *argv)
    return code, json.loads(out) if out else {}, err


def kinds(report: dict) -> list[tuple[str, str]]:
    return sorted((f["kind"], f["path"]) for f in report["findings"])


def requests(url: str) -> int:
    return store_for(url).requests  # type: ignore[attr-defined]


def test_clean_prefix_passes_and_costs_one_get_per_small_object(s3_server: object, s3_bucket: str) -> None:
    healthy(s3_server, s3_bucket, 4)
    url = f"s3://{s3_bucket}/cache"
    code, report, err = scan(url, "--no-state")
    assert (code, err, report["findings"]) == (0, "", [])
    assert report["summary"]["files_read"] == 4
    assert requests(url) == 1 + 4  # one LIST, one ranged GET per latent


def test_truncated_zip_is_corrupt_archive_under_its_url(s3_server: object, s3_bucket: str) -> None:
    healthy(s3_server, s3_bucket)
    put(s3_server, s3_bucket, "cache/torn.pt", pt_bytes({"latents": latent(seed=7)})[:300])
    code, report, _ = scan(f"s3://{s3_bucket}/cache", "--no-state")
    assert code == 1
    assert kinds(report) == [("corrupt-archive", f"s3://{s3_bucket}/cache/torn.pt")]


def test_view_of_batch_is_batch_leak(s3_server: object, s3_bucket: str) -> None:
    batch = torch.randn(4, 4, 8, 8)
    for i in range(3):
        put(s3_server, s3_bucket, f"c/{i}.pt", pt_bytes({"latents": batch[i].clone()}))
    put(s3_server, s3_bucket, "c/leak.pt", pt_bytes({"latents": leaked_view(batch, 3)}))
    _, report, _ = scan(f"s3://{s3_bucket}/c", "--no-state")
    assert kinds(report) == [("batch-leak", f"s3://{s3_bucket}/c/leak.pt")]


def test_pickle_exploit_is_unsafe_and_never_runs(s3_server: object, s3_bucket: str, marker: Path) -> None:
    healthy(s3_server, s3_bucket)
    put(s3_server, s3_bucket, "cache/evil.pt", malicious_torch_zip(marker))
    _, report, _ = scan(f"s3://{s3_bucket}/cache", "--no-state", "--deep")
    assert ("unsafe-pickle", f"s3://{s3_bucket}/cache/evil.pt") in kinds(report)


def test_cuda_tensor_is_device_tagged(s3_server: object, s3_bucket: str) -> None:
    healthy(s3_server, s3_bucket)
    with saved_on("cuda:0"):
        data = pt_bytes({"latents": latent(seed=5)})
    put(s3_server, s3_bucket, "cache/gpu.pt", data)
    _, report, _ = scan(f"s3://{s3_bucket}/cache", "--no-state")
    assert kinds(report) == [("device-tagged", f"s3://{s3_bucket}/cache/gpu.pt")]


def test_shape_outlier_among_peers(s3_server: object, s3_bucket: str) -> None:
    healthy(s3_server, s3_bucket, 4)
    put(s3_server, s3_bucket, "cache/odd.pt", pt_bytes({"latents": latent(c=16, seed=9)}))
    _, report, _ = scan(f"s3://{s3_bucket}/cache", "--no-state")
    assert kinds(report) == [("shape-mismatch", f"s3://{s3_bucket}/cache/odd.pt")]


def test_nan_latent_found_by_deep_scan_reading_each_object_once(s3_server: object, s3_bucket: str) -> None:
    healthy(s3_server, s3_bucket)
    bad = latent(seed=3)
    bad[0, 0, 0] = float("nan")
    put(s3_server, s3_bucket, "cache/nan.pt", pt_bytes({"latents": bad}))
    url = f"s3://{s3_bucket}/cache"
    _, quick, _ = scan(url, "--no-state")
    assert quick["findings"] == []
    before = requests(url)
    _, deep, _ = scan(url, "--no-state", "--deep")
    assert kinds(deep) == [("non-finite", f"s3://{s3_bucket}/cache/nan.pt")]
    assert requests(url) - before == 1 + 4  # one LIST, one whole GET per object


def test_rescan_of_unchanged_prefix_is_one_list(s3_server: object, s3_bucket: str, cache_home: Path) -> None:
    healthy(s3_server, s3_bucket, 3)
    url = f"s3://{s3_bucket}/cache"
    assert scan(url)[0] == 0
    first = requests(url)
    code, report, _ = scan(url)
    assert code == 0
    assert report["summary"]["files_reused"] == 3
    assert requests(url) - first == 1  # the LIST, and no GET
    databases = list((cache_home / "cachedoctor" / "remote" / "s3" / s3_bucket).glob("*.sqlite"))
    assert len(databases) == 1


def test_rescan_reads_only_the_rewritten_object(s3_server: object, s3_bucket: str) -> None:
    healthy(s3_server, s3_bucket, 3)
    url = f"s3://{s3_bucket}/cache"
    scan(url)
    put(s3_server, s3_bucket, "cache/1.pt", pt_bytes({"latents": latent(seed=1)})[:200])
    before = requests(url)
    _, report, _ = scan(url)
    assert kinds(report) == [("corrupt-archive", f"s3://{s3_bucket}/cache/1.pt")]
    assert requests(url) - before == 2


def test_one_object_named_alone(s3_server: object, s3_bucket: str) -> None:
    put(s3_server, s3_bucket, "x/torn.pt", pt_bytes({"latents": latent()})[:100])
    _, report, _ = scan(f"s3://{s3_bucket}/x/torn.pt")
    assert kinds(report) == [("corrupt-archive", f"s3://{s3_bucket}/x/torn.pt")]


def test_local_and_remote_targets_together(s3_server: object, s3_bucket: str, tmp_path: Path) -> None:
    healthy(s3_server, s3_bucket)
    (tmp_path / "torn.pt").write_bytes(pt_bytes({"latents": latent()})[:100])
    _, report, _ = scan(str(tmp_path), f"s3://{s3_bucket}/cache", "--no-state")
    assert kinds(report) == [("corrupt-archive", str(tmp_path / "torn.pt"))]
    assert report["summary"]["files_read"] == 4


def test_empty_prefix_is_nothing_to_check(s3_server: object, s3_bucket: str) -> None:
    code, out, err = cli("scan", f"s3://{s3_bucket}/nothing-here")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and f"s3://{s3_bucket}/nothing-here" in err


def test_state_dir_and_exclude_keys_are_skipped(s3_server: object, s3_bucket: str) -> None:
    healthy(s3_server, s3_bucket)
    put(s3_server, s3_bucket, "cache/.cachedoctor/quarantine/r1/0.pt", b"junk")
    put(s3_server, s3_bucket, "cache/old/0.pt", b"junk")
    code, report, _ = scan(f"s3://{s3_bucket}/cache", "--no-state", "--exclude", "old")
    assert (code, report["findings"], report["summary"]["files_read"]) == (0, [], 3)


def test_missing_bucket_is_one_line(s3_server: object) -> None:
    code, out, err = cli("scan", "s3://no-such-bucket-cachedoctor/x")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "s3://no-such-bucket-cachedoctor/x" in err and "no bucket" in err


def test_no_credentials_is_one_line(
    s3_server: object, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    empty = tmp_path / "empty"
    empty.write_text("")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    forget()
    code, out, err = cli("scan", f"s3://{s3_bucket}/cache")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and f"s3://{s3_bucket}" in err and "credentials" in err


@pytest.mark.slow  # the store's retries before it calls the endpoint unreachable
def test_unreachable_endpoint_option_is_one_line(s3_bucket: str) -> None:
    code, out, err = cli(
        "scan", f"s3://{s3_bucket}/cache", "--s3-endpoint-url", "http://127.0.0.1:9", "--file-timeout", "1"
    )
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and f"s3://{s3_bucket}" in err


def test_settings_show_lists_the_s3_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CACHEDOCTOR_S3_ENDPOINT_URL", "http://minio.local:9000")
    code, out, _ = cli("settings", "show", "--s3-region", "eu-west-1")
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("s3-endpoint-url"))
    assert row.split() == ["s3-endpoint-url", "http://minio.local:9000", "(environment", "CACHEDOCTOR_S3_ENDPOINT_URL)"]
    assert "eu-west-1" in out and "s3-profile" in out


@pytest.mark.slow  # a fresh process
def test_quick_remote_scan_imports_neither_torch_nor_numpy(s3_server: object, s3_bucket: str) -> None:
    import subprocess
    import sys

    healthy(s3_server, s3_bucket, 2)
    code = (
        "import io, sys; from cachedoctor.cli import run; from cachedoctor.cli.environment import Environment; "
        f"c = run(['scan', '--no-state', 's3://{s3_bucket}/cache'], Environment(stdout=io.StringIO())); "
        "print(c, sorted(m for m in ('torch', 'numpy') if m in sys.modules))"
    )
    env = {**os.environ}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "0 []", done.stderr


def test_sdxl_size_latent_is_one_get_and_read_whole(s3_server: object, s3_bucket: str) -> None:
    """A 258 KB SDXL fp32 latent: one GET, over the ~128 KB a single body read returns."""
    for i in range(2):
        put(s3_server, s3_bucket, f"sdxl/{i}.pt", pt_bytes({"latents": torch.randn(4, 128, 128)}))
    url = f"s3://{s3_bucket}/sdxl"
    code, report, err = scan(url, "--no-state")
    assert (code, err, report["summary"]["files_read"]) == (0, "", 2)
    assert requests(url) == 1 + 2


def test_a_deep_read_of_an_object_past_the_spill_size_goes_through_a_mapped_temp_file(
    s3_server: object, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Large objects are not held in memory whole: read by ranges into an unlinked temp file and
    mapped (the spill size lowered here so that a 1 MB latent takes that path)."""
    from cachedoctor.scan import deep_bytes

    monkeypatch.setattr(deep_bytes, "SPILL_OVER", 256 << 10)
    monkeypatch.setattr(deep_bytes, "SPILL_CHUNK", 300_000)  # not a divisor: the last chunk is short
    bad = torch.randn(4, 256, 256)
    bad[1, 2, 3] = float("nan")
    data = pt_bytes({"latents": bad})
    assert len(data) > 1 << 20
    put(s3_server, s3_bucket, "cache/big.pt", data)
    url = f"s3://{s3_bucket}/cache"
    code, report, err = scan(url, "--no-state", "--deep")
    assert kinds(report) == [("non-finite", f"s3://{s3_bucket}/cache/big.pt")], err
    assert requests(url) == 1 + -(-len(data) // 300_000)  # the LIST, then one ranged GET per chunk


def test_a_layout_named_for_a_bucket_alone_is_one_line(s3_server: object, s3_bucket: str) -> None:
    healthy(s3_server, s3_bucket, 1)
    code, out, err = cli("scan", f"s3://{s3_bucket}/cache", "--layout", "kohya", "--resolution", "512")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1
    assert err.startswith(
        f"cachedoctor: error: --layout kohya plans a dataset from its folders on disk, and s3://{s3_bucket}/cache is in a bucket"
    )


def test_an_empty_prefix_says_to_check_the_bucket_and_prefix(s3_server: object, s3_bucket: str) -> None:
    healthy(s3_server, s3_bucket, 1)
    code, report, err = scan(f"s3://{s3_bucket}/nothing-here", "--no-state")
    assert code == 2
    assert "check the bucket and prefix (an s3:// target names the objects under prefix/)" in err
    assert "disk is mounted" not in err
