"""SimpleTuner ``aws`` datasets planned against a real S3 protocol server (moto, ``conftest.py``).

One bucket per module holds images, captions, bucket metadata and the caches as SimpleTuner
keeps them; each test looks at one planted defect. The pairing helper does what the scan's
dataset matcher does with a listed cache prefix (``scan/dataset.py``), on the real listing.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import uuid
from pathlib import Path
from typing import Any

import pytest
from cli_run import cli

from cachedoctor.checks import Found
from cachedoctor.layouts import _simpletuner_config as config
from cachedoctor.layouts._simpletuner_aws import settings_for
from cachedoctor.layouts.interface import DatasetPlan, LayoutOptions
from cachedoctor.layouts.simpletuner import SimpleTunerLayout
from cachedoctor.stores.interface import Location

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

FAMILY = "sdxl"
IMAGES = {  # key -> caption (in <stem>.txt), every image 1x1 bytes (the plan never reads pixels)
    "photos/cat.png": "a tabby cat",
    "photos/sub/dog.png": "a dog\na brown dog",
    "photos/ramen.png": "a bowl of ramen",  # missing latent
    "photos/twin.jpg": "two kittens",  # twin.jpg and twin.png: one cache name, a collision
    "photos/twin.png": "two kittens",
    "photos/teapot.png": "a teapot",
    "elsewhere/stray.png": "a stray",  # outside aws_data_prefix, still listed by SimpleTuner
}
ORPHAN = "deleted-photo"
VAE = "cache/vae/photos"


def sha(stem: str) -> str:
    return hashlib.sha256(stem.encode()).hexdigest()


def latent_key(image_key: str) -> str:
    """Where SimpleTuner's VAECache puts the image's latent (vae.py:678-703), prefix "photos"."""
    sub = posixpath.dirname(image_key).replace("photos", "").lstrip("/")
    stem = posixpath.splitext(posixpath.basename(image_key))[0]
    return posixpath.join(VAE, sub, sha(stem) + ".pt") if sub else posixpath.join(VAE, sha(stem) + ".pt")


def embed_key(caption: str) -> str:
    return f"text/{hashlib.md5(caption.encode()).hexdigest()}-{FAMILY}.pt"


@pytest.fixture(scope="module")
def bucket(s3_server: Any) -> str:
    name = f"st-aws-{uuid.uuid4().hex[:8]}"
    client = s3_server.client()
    client.create_bucket(Bucket=name)
    for key, caption in IMAGES.items():
        client.put_object(Bucket=name, Key=key, Body=b"\x89PNG")
        client.put_object(Bucket=name, Key=posixpath.splitext(key)[0] + ".txt", Body=caption.encode())
        if key != "photos/ramen.png":
            client.put_object(Bucket=name, Key=latent_key(key), Body=b"latent")
    client.put_object(Bucket=name, Key=posixpath.join(VAE, sha(ORPHAN) + ".pt"), Body=b"latent")
    metadata = {"photos/teapot.png": {"original_size": [96, 64], "target_size": [64, 48], "aspect_ratio": 1.5}}
    client.put_object(Bucket=name, Key="photos/aspect_ratio_bucket_metadata_photos.json", Body=json.dumps(metadata))
    for caption in ["a bowl of ramen", "a tabby cat", "a dog", "a brown dog", "two kittens", "a teapot", "a stray", ""]:
        client.put_object(Bucket=name, Key=embed_key(caption), Body=b"embed")
    from cachedoctor.stores.connect import forget

    forget()
    return name


def write_config(folder: Path, url: str, bucket: str, **extra: Any) -> str:
    image = {
        "id": "photos",
        "type": "aws",
        "aws_bucket_name": bucket,
        "aws_data_prefix": "photos",
        "aws_endpoint_url": url,
        "aws_region_name": "us-east-1",
        "cache_dir_vae": VAE,
        "caption_strategy": "textfile",
        "text_embeds": "s3-text",
        **extra,
    }
    text = {
        "id": "s3-text",
        "type": "aws",
        "dataset_type": "text_embeds",
        "aws_bucket_name": bucket,
        "aws_data_prefix": "text",
        "aws_endpoint_url": url,
    }
    (folder / "config.json").write_text(json.dumps({"model_family": FAMILY}))
    path = folder / "multidatabackend.json"
    path.write_text(json.dumps([image, text]))
    return str(path)


def plan_of(tmp_path: Path, s3_server: Any, bucket: str, **extra: Any) -> DatasetPlan:
    return SimpleTunerLayout().plan([], LayoutOptions(config=write_config(tmp_path, s3_server.url, bucket, **extra)))


def pair(plan: DatasetPlan, s3_server: Any) -> list[tuple[str, str, str | None]]:
    """(kind, path, source) of every dataset finding, pairing the plan with the listed roots."""
    from cachedoctor.scan.dataset import DatasetMatcher, judge_staleness
    from cachedoctor.stores.connect import store_for

    matcher = DatasetMatcher(plan)
    folders: dict[str, dict[str, Found]] = {}
    for root in plan.roots:
        for info in store_for(root).list(Location.parse(root)):
            folders.setdefault(posixpath.dirname(info.url), {})[info.url] = Found(info.url, info.mtime_ns)
    for folder, found in sorted(folders.items()):
        matcher.close_folder(folder, found, [])
    findings = matcher.finish() + judge_staleness(matcher.mtime_stale, matcher.paired)[0]  # as the scan's merge does
    return sorted((f.kind, f.path, f.source) for f in findings)


def test_plan_names_cache_objects_as_simpletuner_writes_them(tmp_path: Path, s3_server: Any, bucket: str) -> None:
    plan = plan_of(tmp_path, s3_server, bucket)
    assert plan.roots == [f"s3://{bucket}/{VAE}", f"s3://{bucket}/text"]
    assert plan.items == len(IMAGES)
    latents = {e.source: p for p, es in plan.by_path().items() for e in es if e.role == "latent"}
    assert latents[f"s3://{bucket}/photos/sub/dog.png"] == f"s3://{bucket}/{latent_key('photos/sub/dog.png')}"
    assert latents[f"s3://{bucket}/elsewhere/stray.png"] == f"s3://{bucket}/{VAE}/elsewhere/{sha('stray')}.pt"
    assert any("1 image(s)" in n and "outside aws_data_prefix" in n for n in plan.notes)
    texts = {p: e for p, es in plan.by_path().items() for e in es if e.role == "text"}
    dog = texts[f"s3://{bucket}/{embed_key('a brown dog')}"]
    assert (dog.source, dog.text) == (f"s3://{bucket}/photos/sub/dog.txt", "a brown dog")  # one embed per line


def test_one_list_one_metadata_get_and_one_get_per_caption(tmp_path: Path, s3_server: Any, bucket: str) -> None:
    from cachedoctor.stores.connect import forget, store_for

    forget()
    plan_of(tmp_path, s3_server, bucket)
    store: Any = store_for(
        f"s3://{bucket}", settings_for(config.load(LayoutOptions(str(tmp_path / "multidatabackend.json"))).backends[0])
    )
    assert (store.requests, store.retries) == (1 + 1 + len(IMAGES), 0)


def test_findings_missing_orphan_collision(tmp_path: Path, s3_server: Any, bucket: str) -> None:
    url = f"s3://{bucket}"
    found = pair(plan_of(tmp_path, s3_server, bucket), s3_server)
    assert found == [
        ("missing-entry", f"{url}/{latent_key('photos/ramen.png')}", f"{url}/photos/ramen.png"),
        ("name-collision", f"{url}/{latent_key('photos/twin.jpg')}", f"{url}/photos/twin.jpg"),
        ("orphan-entry", f"{url}/{VAE}/{sha(ORPHAN)}.pt", None),
    ]


@pytest.mark.slow
def test_an_image_newer_than_its_latent_by_last_modified_is_stale(tmp_path: Path, s3_server: Any) -> None:
    import time

    name = f"st-aws-stale-{uuid.uuid4().hex[:8]}"
    client = s3_server.client()
    client.create_bucket(Bucket=name)
    client.put_object(Bucket=name, Key=latent_key("photos/dragonfly.png"), Body=b"latent")
    time.sleep(3.1)  # LastModified has whole seconds and staleness allows 2 s (checks/stale_entry.py)
    client.put_object(Bucket=name, Key="photos/dragonfly.png", Body=b"\x89PNG")
    url = f"s3://{name}"
    assert pair(plan_of(tmp_path, s3_server, name, caption_strategy="filename"), s3_server) == [
        ("missing-entry", f"{url}/{embed_key('dragonfly')}", f"{url}/photos/dragonfly.png"),
        ("stale-entry", f"{url}/{latent_key('photos/dragonfly.png')}", f"{url}/photos/dragonfly.png"),
    ]


def test_bucket_shapes_come_from_the_metadata_in_the_bucket(tmp_path: Path, s3_server: Any, bucket: str) -> None:
    plan = plan_of(tmp_path, s3_server, bucket)
    entries = plan.by_path()[f"s3://{bucket}/{latent_key('photos/teapot.png')}"]
    assert [e.latent_hw for e in entries] == [(6, 8)]  # target_size [W=64, H=48] / 8
    cat = plan.by_path()[f"s3://{bucket}/{latent_key('photos/cat.png')}"]
    assert [e.latent_hw for e in cat] == [None]  # not in the metadata: not compared


def test_credentials_from_the_config_else_the_chain(tmp_path: Path, s3_server: Any, bucket: str) -> None:
    path = write_config(tmp_path, s3_server.url, bucket, aws_access_key_id="AKIAX", aws_secret_access_key="sekrit")
    with_keys, _ = config.load(LayoutOptions(path)).backends
    assert settings_for(with_keys) == settings_for(with_keys).__class__(
        s3_server.url, "us-east-1", None, "AKIAX", "sekrit"
    )
    path = write_config(tmp_path, s3_server.url, bucket)
    chain, text = config.load(LayoutOptions(path)).backends
    assert (settings_for(chain).key, settings_for(chain).secret, settings_for(text).region) == (None, None, None)
    assert plan_of(tmp_path, s3_server, bucket, aws_access_key_id="AKIAX", aws_secret_access_key="s").items == len(
        IMAGES
    )


def test_a_bucket_that_is_not_there_is_one_line_naming_it(tmp_path: Path, s3_server: Any, bucket: str) -> None:
    path = write_config(tmp_path, s3_server.url, bucket + "-gone")
    code, out, err = cli("scan", "--config", path)
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"cachedoctor: error: s3://{bucket}-gone: dataset 'photos': no bucket")


def test_an_aws_dataset_without_endpoint_is_skipped_as_simpletuner_refuses_it(tmp_path: Path) -> None:
    path = tmp_path / "multidatabackend.json"
    path.write_text(json.dumps([{"id": "s3", "type": "aws", "aws_bucket_name": "b", "cache_dir_vae": "c"}]))
    cfg = config.load(LayoutOptions(str(path)))
    assert (cfg.backends, cfg.skipped) == ([], ["s3"])
    assert cfg.notes == ["dataset 's3' skipped: type 'aws' without aws_endpoint_url (SimpleTuner refuses it too)"]


def test_an_aws_datasets_cache_prefix_is_no_local_quarantine_root(tmp_path: Path) -> None:
    """``quarantine list --config`` looks for quarantines under the config's local cache folders;
    an aws dataset's ``cache_dir_vae`` is a key prefix in its bucket (its quarantine is there)."""
    from cachedoctor.layouts import described_roots

    local = tmp_path / "cache" / "vae" / "local"
    backends = [
        {"id": "here", "type": "local", "instance_data_dir": str(tmp_path / "images"), "cache_dir_vae": str(local)},
        {
            "id": "there",
            "type": "aws",
            "aws_bucket_name": "b",
            "aws_endpoint_url": "http://127.0.0.1:9",
            "cache_dir_vae": "cache/vae/there",
        },
    ]
    config = tmp_path / "multidatabackend.json"
    config.write_text(json.dumps(backends))
    assert described_roots(LayoutOptions(config=str(config))) == [str(local)]
