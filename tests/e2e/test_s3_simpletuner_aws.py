"""A SimpleTuner ``aws`` dataset scanned end to end through ``scan --config``: the shipped
SimpleTuner fixture's ``photos`` dataset (images, captions, bucket metadata, and its VAE cache
with the defects planted there) uploaded to a bucket of the real S3 protocol server, then
scanned as the trainer would find it. Its findings must be the local scan's, path for path
(the cache objects' ``s3://`` URLs for the local cache files), but for staleness, which is
left out of the comparison: uploading gives every image and caption today's LastModified, newer
than the local text cache, and every latent the same time as its image.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from cli_run import cli

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "datasets" / "simpletuner"
PHOTOS = FIXTURE / "datasets" / "photos"
VAE = FIXTURE / "output" / "cache" / "vae" / "sdxl" / "photos"
TEXT = FIXTURE / "output" / "cache" / "text" / "sdxl"


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and ".cachedoctor" not in p.parts)


def _findings(out: str) -> set[tuple[str, str, str | None]]:
    report = json.loads(out)
    return {(f["kind"], f["path"], f.get("source")) for f in report["findings"]}


def test_an_aws_dataset_is_judged_as_the_same_dataset_on_disk(s3_server: Any, s3_bucket: str, tmp_path: Path) -> None:
    client = s3_server.client()
    for path in _files(PHOTOS):
        body = path.read_bytes()
        if path.name.startswith("aspect_ratio_bucket_"):  # SimpleTuner keys an aws dataset's metadata by object key
            body = body.replace(b"/workspace/SimpleTuner/datasets/photos/", b"photos/")
        client.put_object(Bucket=s3_bucket, Key=f"photos/{path.relative_to(PHOTOS)}", Body=body)
    for path in _files(VAE):
        client.put_object(Bucket=s3_bucket, Key=f"cache/vae/photos/{path.relative_to(VAE)}", Body=path.read_bytes())
    local_backends = json.loads((FIXTURE / "config" / "multidatabackend.json").read_text())
    photos = next(b for b in local_backends if b["id"] == "photos")
    aws = {k: v for k, v in photos.items() if k not in ("instance_data_dir", "cache_dir_vae")}
    aws.update(
        type="aws",
        aws_bucket_name=s3_bucket,
        aws_endpoint_url=s3_server.url,
        aws_region_name="us-east-1",
        aws_data_prefix="photos",
        cache_dir_vae="cache/vae/photos",
    )
    text = {"id": "captions", "type": "local", "dataset_type": "text_embeds", "default": True, "cache_dir": str(TEXT)}
    config = tmp_path / "config"
    config.mkdir()
    (config / "multidatabackend.json").write_text(json.dumps([aws, text]))
    (config / "config.json").write_text(json.dumps({"model_family": "sdxl", "output_dir": str(tmp_path / "out")}))

    code, out, err = cli("scan", "--config", str(config / "multidatabackend.json"), "--no-state", "--format", "json")
    remote = {f for f in _findings(out) if f[0] != "stale-entry"}  # every uploaded caption is newer than its embed

    # The same dataset on disk, scanned with only its photos dataset and the same text cache.
    local_config = tmp_path / "local"
    local_config.mkdir()
    photos_local = dict(photos, instance_data_dir=str(PHOTOS), cache_dir_vae=str(VAE))
    (local_config / "multidatabackend.json").write_text(json.dumps([photos_local, text]))
    (local_config / "config.json").write_text(json.dumps({"model_family": "sdxl", "output_dir": str(tmp_path / "out")}))
    _, local_out, _ = cli(
        "scan", "--config", str(local_config / "multidatabackend.json"), "--no-state", "--format", "json"
    )

    def as_remote(finding: tuple[str, str, str | None]) -> tuple[str, str, str | None]:
        kind, path, source = finding
        if path.startswith(str(VAE)):
            path = f"s3://{s3_bucket}/cache/vae/photos/{os.path.relpath(path, VAE)}"
        if source and source.startswith(str(PHOTOS)):
            source = f"s3://{s3_bucket}/photos/{os.path.relpath(source, PHOTOS)}"
        return kind, path, source

    expected = {as_remote(f) for f in _findings(local_out) if f[0] != "stale-entry"}
    kinds = {k for k, _, _ in expected}
    assert {"missing-entry", "name-collision", "shape-mismatch", "orphan-entry"} <= kinds  # the planted defects
    assert remote == expected, err
    assert code == 1, err
