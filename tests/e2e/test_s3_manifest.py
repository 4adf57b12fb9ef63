"""``manifest build --config`` for a SimpleTuner ``aws`` dataset, then ``scan --manifest``, against
moto's S3 server: the rows a build writes (s3:// source and cache, the source's ETag) and what
the build costs in requests (LISTs only); then one planted defect per test, found through the
manifest, and the clean case.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from cli_run import cli
from factories import latent, pt_bytes

from cachedoctor.stores.connect import forget

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

IMAGES = ("photos/cat.png", "photos/sub/dog.png", "photos/teapot.png")
VAE = "cache/vae/photos"


def latent_key(image_key: str) -> str:
    """SimpleTuner's VAE cache key for an image under aws_data_prefix "photos" (vae.py:678-703)."""
    folder, _, name = image_key.removeprefix("photos/").rpartition("/")
    stem = name.rsplit(".", 1)[0]
    return "/".join(p for p in (VAE, folder, hashlib.sha256(stem.encode()).hexdigest() + ".pt") if p)


@pytest.fixture
def built(s3_server: Any, s3_bucket: str, tmp_path: Path) -> tuple[str, Path]:
    """A bucket with three images and their latents, and the manifest ``manifest build`` wrote
    for it from an aws config (its URL prefix and path)."""
    client = s3_server.client()
    for i, key in enumerate(IMAGES):
        client.put_object(Bucket=s3_bucket, Key=key, Body=b"\x89PNG image %d" % i)
        client.put_object(Bucket=s3_bucket, Key=latent_key(key), Body=pt_bytes(latent(seed=i)))
    dataset = {
        "id": "photos",
        "type": "aws",
        "aws_bucket_name": s3_bucket,
        "aws_data_prefix": "photos",
        "aws_endpoint_url": s3_server.url,
        "aws_region_name": "us-east-1",
        "cache_dir_vae": VAE,
    }
    (tmp_path / "multidatabackend.json").write_text(json.dumps([dataset]))
    (tmp_path / "config.json").write_text(json.dumps({"model_family": "sdxl"}))
    manifest = tmp_path / "manifest.jsonl"
    forget()
    code, out, err = cli("manifest", "build", "--config", str(tmp_path / "multidatabackend.json"), "-o", str(manifest))
    assert (code, err) == (0, ""), err
    assert "wrote 3 rows for 3 items" in out
    return f"s3://{s3_bucket}", manifest


def scan(manifest: Path, *targets: str) -> tuple[int, list[tuple[str, str, str | None]], str]:
    code, out, err = cli("scan", *targets, "--manifest", str(manifest), "--no-state", "--format", "json")
    findings = json.loads(out)["findings"] if out else []
    return code, sorted((f["kind"], f["path"], f.get("source")) for f in findings), err


def test_build_writes_urls_and_etags_from_lists_only(s3_server: Any, built: tuple[str, Path]) -> None:
    url, manifest = built
    rows = [json.loads(line) for line in manifest.read_text().splitlines()]
    client = s3_server.client()
    bucket = url.removeprefix("s3://")
    expected = []
    for key in sorted(IMAGES):
        head = client.head_object(Bucket=bucket, Key=key)
        expected.append(
            {
                "source": f"{url}/{key}",
                "cache": f"{url}/{latent_key(key)}",
                "role": "latent",
                "scaling": "vae",  # SimpleTuner caches (z - shift) * factor: a recompute from the manifest does too
                "size": head["ContentLength"],
                "mtime_ns": int(head["LastModified"].timestamp()) * 10**9,
                "etag": head["ETag"].strip('"'),
            }
        )
    assert sorted(rows, key=lambda r: r["source"]) == expected
    from cachedoctor.stores.connect import _stores

    # the plan's LIST of the bucket, whose ETags the rows take: no image is read, nothing listed twice
    assert [(s.requests, s.retries) for s in _stores.values()] == [(1, 0)]  # type: ignore[attr-defined]


def test_clean_through_the_manifest(built: tuple[str, Path]) -> None:
    _, manifest = built
    code, findings, err = scan(manifest)
    assert (code, findings, err) == (0, [], "")


def test_rewritten_source_is_stale_by_its_etag(s3_server: Any, built: tuple[str, Path]) -> None:
    url, manifest = built
    s3_server.client().put_object(Bucket=url.removeprefix("s3://"), Key="photos/sub/dog.png", Body=b"\x89PNG edited")
    code, findings, _ = scan(manifest)  # within the same second as the build: LastModified alone could not tell
    assert (code, findings) == (  # a warning: exit 0 under the default --fail-on error
        0,
        [("stale-entry", f"{url}/{latent_key('photos/sub/dog.png')}", f"{url}/photos/sub/dog.png")],
    )


def test_deleted_cache_object_is_missing(s3_server: Any, built: tuple[str, Path]) -> None:
    url, manifest = built
    s3_server.client().delete_object(Bucket=url.removeprefix("s3://"), Key=latent_key("photos/cat.png"))
    code, findings, _ = scan(manifest)
    assert (code, findings) == (
        1,
        [("missing-entry", f"{url}/{latent_key('photos/cat.png')}", f"{url}/photos/cat.png")],
    )


def test_orphan_in_a_cache_prefix_also_named_on_the_command_line(s3_server: Any, built: tuple[str, Path]) -> None:
    url, manifest = built
    stray = f"{VAE}/{hashlib.sha256(b'deleted').hexdigest()}.pt"
    s3_server.client().put_object(Bucket=url.removeprefix("s3://"), Key=stray, Body=pt_bytes(latent(seed=9)))
    # s3://bucket/cache contains the manifest's cache folder: listed and read once, not twice
    code, findings, _ = scan(manifest, f"{url}/cache")
    assert (code, findings) == (0, [("orphan-entry", f"{url}/{stray}", None)])


def test_deleted_source_makes_its_entry_an_orphan(s3_server: Any, built: tuple[str, Path]) -> None:
    url, manifest = built
    s3_server.client().delete_object(Bucket=url.removeprefix("s3://"), Key="photos/teapot.png")
    code, findings, _ = scan(manifest)
    assert (code, findings) == (0, [("orphan-entry", f"{url}/{latent_key('photos/teapot.png')}", None)])


def test_repair_through_a_manifest_with_s3_caches_says_to_repair_the_prefix(built: tuple[str, Path]) -> None:
    url, manifest = built
    code, out, err = cli("repair", "--manifest", str(manifest), "--dry-run")
    assert (code, out) == (2, "")
    assert err.startswith(f"cachedoctor: error: {url}/{VAE}: this dataset's cache is in a bucket; repair it on its own")
    assert err.count("\n") == 1
