"""The manifest layout's ``s3://`` rows, planned against moto's S3 server (``conftest.py``): one
bucket per module holds the sources; each test writes a manifest and looks at one thing the
plan must get right (the listed facts, a rewritten or deleted source, the roots, the requests).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from cli_run import cli

from cachedoctor.layouts._manifest_remote import outermost, shared_folder
from cachedoctor.layouts.interface import DatasetPlan, Expected, LayoutOptions
from cachedoctor.layouts.manifest import ManifestLayout

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SOURCES = {"data/a/one.png": b"one", "data/b/two.png": b"two", "other/three.png": b"three"}


@pytest.fixture(scope="module")
def bucket(s3_server: Any) -> dict[str, Any]:
    """A bucket with the sources; key -> head_object of each (ETag, size, LastModified)."""
    name = f"manifest-remote-{uuid.uuid4().hex[:8]}"
    client = s3_server.client()
    client.create_bucket(Bucket=name)
    for key, body in SOURCES.items():
        client.put_object(Bucket=name, Key=key, Body=body)
    return {"name": name, **{key: client.head_object(Bucket=name, Key=key) for key in SOURCES}}


def plan_rows(tmp_path: Path, rows: list[dict[str, Any]], targets: list[str] | None = None) -> DatasetPlan:
    from cachedoctor.stores.connect import forget

    forget()
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return ManifestLayout().plan(targets or [], LayoutOptions(manifest=str(manifest)))


def entry(plan: DatasetPlan, path: str) -> Expected:
    (found,) = plan.by_path()[path]
    return found


def etag(bucket: dict[str, Any], key: str) -> str:
    return str(bucket[key]["ETag"]).strip('"')


def test_a_matching_etag_is_fresh_and_a_different_one_stale(tmp_path: Path, bucket: dict[str, Any]) -> None:
    url = f"s3://{bucket['name']}"
    plan = plan_rows(
        tmp_path,
        [
            {"source": f"{url}/data/a/one.png", "cache": f"{url}/c/one.pt", "etag": etag(bucket, "data/a/one.png")},
            {"source": f"{url}/data/b/two.png", "cache": f"{url}/c/two.pt", "etag": "0" * 32},
        ],
    )
    one, two = entry(plan, f"{url}/c/one.pt"), entry(plan, f"{url}/c/two.pt")
    assert (one.stale_reason, one.source_mtime_ns, one.source_exists) == (None, None, True)
    assert two.stale_reason is not None and "ETag" in two.stale_reason
    assert two.source_mtime_ns is None  # judged by the ETag alone, not again by LastModified


def test_without_an_etag_the_source_is_judged_by_last_modified(tmp_path: Path, bucket: dict[str, Any]) -> None:
    url = f"s3://{bucket['name']}"
    plan = plan_rows(tmp_path, [{"source": f"{url}/other/three.png", "cache": f"{url}/c/three.pt"}])
    three = entry(plan, f"{url}/c/three.pt")
    assert three.source_mtime_ns == int(bucket["other/three.png"]["LastModified"].timestamp()) * 10**9
    assert three.stale_reason is None


def test_a_source_not_in_the_bucket_is_gone(tmp_path: Path, bucket: dict[str, Any]) -> None:
    url = f"s3://{bucket['name']}"
    plan = plan_rows(tmp_path, [{"source": f"{url}/data/a/gone.png", "cache": f"{url}/c/gone.pt", "etag": "x"}])
    assert entry(plan, f"{url}/c/gone.pt").source_exists is False


def test_one_list_per_source_bucket_whatever_the_folders(tmp_path: Path, bucket: dict[str, Any]) -> None:
    from cachedoctor.stores.connect import _stores

    url = f"s3://{bucket['name']}"
    rows = [{"source": f"{url}/{key}", "cache": f"{url}/c/{i}.pt"} for i, key in enumerate(SOURCES)]
    plan = plan_rows(tmp_path, rows)
    assert all(e.source_exists for es in plan.by_path().values() for e in es)
    assert [s.requests for s in _stores.values()] == [1]  # type: ignore[attr-defined]


def test_roots_local_relative_to_the_manifest_remote_as_they_are(tmp_path: Path, bucket: dict[str, Any]) -> None:
    url = f"s3://{bucket['name']}"
    (tmp_path / "img.png").write_bytes(b"x")
    rows = [
        {"source": "img.png", "cache": "cache/img.pt"},
        {"source": f"{url}/data/a/one.png", "cache": f"{url}/cache/vae/a/one.pt"},
        {"source": f"{url}/data/b/two.png", "cache": f"{url}/cache/vae/two.pt"},
    ]
    plan = plan_rows(tmp_path, rows)
    assert plan.roots == [str(tmp_path / "cache"), f"{url}/cache/vae"]  # a remote folder inside another: once
    assert entry(plan, str(tmp_path / "cache" / "img.pt")).source == str(tmp_path / "img.png")
    assert entry(plan, f"{url}/cache/vae/a/one.pt").source == f"{url}/data/a/one.png"
    # a local target replaces the local folders, never the s3:// ones (nothing local can settle them)
    assert plan_rows(tmp_path, rows, [str(tmp_path)]).roots == [str(tmp_path), f"{url}/cache/vae"]


def test_a_source_bucket_that_is_not_there_is_one_line(tmp_path: Path, bucket: dict[str, Any]) -> None:
    manifest = tmp_path / "m.jsonl"
    missing = f"s3://{bucket['name']}-gone"
    manifest.write_text(json.dumps({"source": f"{missing}/a.png", "cache": str(tmp_path / "a.pt")}) + "\n")
    code, _, err = cli("scan", "--manifest", str(manifest), "--no-state")
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"cachedoctor: error: {missing}: the manifest's sources: ")


def test_shared_folder_and_outermost() -> None:
    assert shared_folder(["s3://b/x/y/1.png", "s3://b/x/z/2.png"]) == "s3://b/x"
    assert shared_folder(["s3://b/x/1.png", "s3://b/y.png"]) == "s3://b"
    assert shared_folder(["s3://b/x/1.png"]) == "s3://b/x"
    assert outermost(["s3://b/c/v", "s3://b/c", "s3://b/cc", "s3://b/c/v"]) == ["s3://b/c", "s3://b/cc"]


def test_manifest_build_of_an_s3_folder_points_to_config() -> None:
    code, out, err = cli("manifest", "build", "s3://bucket/photos")
    assert (code, out) == (2, "")
    assert err == (
        "cachedoctor: error: s3://bucket/photos: manifest build plans a dataset folder on disk; for a "
        "SimpleTuner aws dataset pass --config multidatabackend.json (its images are listed in the bucket, "
        "never read)\n"
    )


def test_build_lists_only_the_sources_whose_facts_the_plan_did_not_keep(tmp_path: Path, bucket: dict[str, Any]) -> None:
    from cachedoctor.manifest_build import build
    from cachedoctor.stores.connect import _stores, forget

    url = f"s3://{bucket['name']}"
    plan = DatasetPlan("simpletuner", [])
    kept = ("data/a/one.png", {"etag": "kept-by-the-plan", "size": 3})  # what the layout's LIST saw
    plan.add(Expected(f"{url}/c/one.pt", f"{url}/{kept[0]}", "latent", 5, hints=tuple(kept[1].items())))
    plan.add(Expected(f"{url}/c/two.pt", f"{url}/data/b/two.png", "text", 7))  # a caption: no facts kept
    forget()
    assert build(plan, str(tmp_path / "m.jsonl")).rows == 2
    rows = {r["cache"]: r for r in map(json.loads, (tmp_path / "m.jsonl").read_text().splitlines())}
    assert (rows[f"{url}/c/one.pt"]["etag"], rows[f"{url}/c/one.pt"]["mtime_ns"]) == ("kept-by-the-plan", 5)
    two = bucket["data/b/two.png"]
    assert rows[f"{url}/c/two.pt"] == {
        "source": f"{url}/data/b/two.png",
        "cache": f"{url}/c/two.pt",
        "role": "text",
        "size": two["ContentLength"],
        "mtime_ns": int(two["LastModified"].timestamp()) * 10**9,
        "etag": etag(bucket, "data/b/two.png"),
    }
    assert [s.requests for s in _stores.values()] == [1]  # type: ignore[attr-defined]  # one LIST, for two.png
