"""``cachedoctor scan --inventory MANIFEST s3://bucket/prefix`` against moto's S3 server behind
the counting proxy (``s3_proxy.py``): the listing comes from an S3 Inventory the test writes into
the bucket as Amazon S3 writes one (``inventory_files.py`` says where that format is documented),
no LIST of the prefix is sent, and the report is the one a LIST-driven scan gives; what changed
since the inventory is read as it is now and its folder listed again; the one-line refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("s3fs")

import safetensors.torch
from cli_run import cli
from factories import latent
from inventory_files import CSV_SCHEMA, csv_gz, manifest, objects_now, publish
from s3_proxy import S3Proxy

from cachedoctor.stores.connect import forget


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    yield tmp_path
    forget()


@pytest.fixture
def proxy(s3_server: Any) -> Iterator[S3Proxy]:
    with S3Proxy(s3_server.url) as running:
        yield running


def st_bytes(seed: int) -> bytes:
    return safetensors.torch.save({"latents": latent(seed=seed)})


def put(client: Any, bucket: str, key: str, data: bytes) -> None:
    client.put_object(Bucket=bucket, Key=key, Body=data)


def cache(client: Any, bucket: str) -> None:
    """cache/ with three latents and one torn one, cache/sub/ with two latents."""
    for i in range(3):
        put(client, bucket, f"cache/{i}.safetensors", st_bytes(i))
    put(client, bucket, "cache/torn.safetensors", st_bytes(9)[:300])
    for i in range(2):
        put(client, bucket, f"cache/sub/{i}.safetensors", st_bytes(10 + i))


def scan(proxy: S3Proxy, *argv: str) -> tuple[int, dict[str, Any], str]:
    code, out, err = cli("scan", "--format", "json", "--no-state", "--s3-endpoint-url", proxy.url, *argv)
    return code, json.loads(out) if out else {}, err


def lists(proxy: S3Proxy, bucket: str) -> list[str]:
    """The query of every LIST request sent to ``bucket`` (a GET of the bucket, not of a key)."""
    return [query for method, path, query in proxy.queries if method == "GET" and path.rstrip("/") == f"/{bucket}"]


def kinds(report: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted((f["kind"], f["path"]) for f in report["findings"])


def counts(report: dict[str, Any]) -> dict[str, Any]:
    """The summary less the time it took and the notes (which say where the listing came from)."""
    return {k: v for k, v in report["summary"].items() if k not in ("elapsed_s", "notes")}


def notes(report: dict[str, Any]) -> str:
    return " ".join(report["summary"]["notes"])


@pytest.mark.parametrize("file_format", ["CSV", "Parquet"])
def test_an_inventory_scan_sends_no_list_and_reports_what_a_listed_scan_does(
    s3_server: Any, s3_bucket: str, proxy: S3Proxy, file_format: str
) -> None:
    if file_format == "Parquet":
        pytest.importorskip("pyarrow")
    client = s3_server.client()
    cache(client, s3_bucket)
    inventory = publish(client, s3_bucket, file_format, parts=2)
    url = f"s3://{s3_bucket}/cache"
    listed = scan(proxy, url)
    assert len(lists(proxy, s3_bucket)) == 1
    proxy.clear()
    code, report, err = scan(proxy, url, "--inventory", inventory)
    assert lists(proxy, s3_bucket) == []
    assert (code, err) == (listed[0], listed[2]) == (1, "")
    assert kinds(report) == kinds(listed[1]) == [("corrupt-archive", f"{url}/torn.safetensors")]
    assert counts(report) == counts(listed[1])
    assert report["summary"]["files_read"] == 6
    assert f"listing from the S3 inventory of 2026-01-01 00:00 UTC ({inventory}); 0 folders re-listed" in notes(report)


def test_what_changed_since_the_inventory_is_read_as_it_is_now_and_its_folder_listed_again(
    s3_server: Any, s3_bucket: str, proxy: S3Proxy
) -> None:
    client = s3_server.client()
    cache(client, s3_bucket)
    inventory = publish(client, s3_bucket)
    put(client, s3_bucket, "cache/1.safetensors", st_bytes(1)[:200])  # rewritten: another ETag, torn
    client.delete_object(Bucket=s3_bucket, Key="cache/2.safetensors")  # deleted since
    put(client, s3_bucket, "cache/new.safetensors", st_bytes(7)[:250])  # added since, to that folder
    url = f"s3://{s3_bucket}/cache"
    code, report, err = scan(proxy, url, "--inventory", inventory)
    assert [dict(p.split("=", 1) for p in q.split("&")) for q in lists(proxy, s3_bucket)] == [
        {"list-type": "2", "prefix": "cache/", "delimiter": "/", "max-keys": "1000", "encoding-type": "url"}
    ]  # one LIST: the changed folder's own keys, its subfolder not listed
    assert (code, err) == (1, "")  # the deleted object is no error
    assert kinds(report) == [
        ("corrupt-archive", f"{url}/1.safetensors"),
        ("corrupt-archive", f"{url}/new.safetensors"),
        ("corrupt-archive", f"{url}/torn.safetensors"),
    ]
    assert "; 1 folder re-listed" in notes(report)
    proxy.clear()
    listed = scan(proxy, url)  # what a LIST of the bucket now gives: the same report
    assert counts(report) == counts(listed[1])
    assert report["summary"]["files_read"] == 6


def test_a_key_added_to_a_folder_where_nothing_changed_waits_for_the_next_inventory(
    s3_server: Any, s3_bucket: str, proxy: S3Proxy
) -> None:
    """The documented limit: nothing in cache/sub/ changed, so it is not listed again."""
    client = s3_server.client()
    cache(client, s3_bucket)
    inventory = publish(client, s3_bucket)
    put(client, s3_bucket, "cache/sub/late.safetensors", st_bytes(8)[:250])
    code, report, _ = scan(proxy, f"s3://{s3_bucket}/cache", "--inventory", inventory)
    assert lists(proxy, s3_bucket) == []
    assert kinds(report) == [("corrupt-archive", f"s3://{s3_bucket}/cache/torn.safetensors")]


def test_an_empty_object_deleted_since_the_inventory_is_not_reported(
    s3_server: Any, s3_bucket: str, proxy: S3Proxy
) -> None:
    """An empty object is judged by its listed size alone, without a read: with an inventory
    it is looked at (a HEAD) first, so its deletion since is noticed like a read's."""
    client = s3_server.client()
    cache(client, s3_bucket)
    put(client, s3_bucket, "cache/sub/empty.safetensors", b"")
    inventory = publish(client, s3_bucket)
    client.delete_object(Bucket=s3_bucket, Key="cache/sub/empty.safetensors")
    code, report, err = scan(proxy, f"s3://{s3_bucket}/cache", "--inventory", inventory)
    assert kinds(report) == [("corrupt-archive", f"s3://{s3_bucket}/cache/torn.safetensors")]
    assert (code, err, report["summary"]["errors"]) == (1, "", [])
    assert [dict(p.split("=", 1) for p in q.split("&"))["prefix"] for q in lists(proxy, s3_bucket)] == ["cache/sub/"]


def test_a_rescan_from_the_same_inventory_with_the_state_database_reads_no_object(
    s3_server: Any, s3_bucket: str, proxy: S3Proxy
) -> None:
    client = s3_server.client()
    cache(client, s3_bucket)
    inventory = publish(client, s3_bucket)
    argv = (
        "scan",
        "--format",
        "json",
        "--s3-endpoint-url",
        proxy.url,
        f"s3://{s3_bucket}/cache",
        "--inventory",
        inventory,
    )
    assert cli(*argv)[0] == 1
    proxy.clear()
    code, out, _ = cli(*argv)
    report = json.loads(out)
    assert (code, report["summary"]["files_reused"]) == (1, 6)
    assert kinds(report) == [("corrupt-archive", f"s3://{s3_bucket}/cache/torn.safetensors")]
    assert lists(proxy, s3_bucket) == []
    assert [p for m, p in proxy.log if p.startswith(f"/{s3_bucket}/cache/")] == []  # only the inventory was read


def one_line(code: int, out: str, err: str) -> str:
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("cachedoctor: error: "), err
    return err


def test_a_malformed_manifest_is_one_line_naming_it(s3_server: Any, s3_bucket: str, tmp_path: Path) -> None:
    """A real process: no traceback reaches the user."""
    put(s3_server.client(), s3_bucket, "cache/0.safetensors", st_bytes(0))
    bad = tmp_path / "manifest.json"
    bad.write_text('{"sourceBucket": "x", "files": ')
    done = subprocess.run(
        [sys.executable, "-m", "cachedoctor", "scan", f"s3://{s3_bucket}/cache", "--inventory", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    err = one_line(done.returncode, done.stdout, done.stderr)
    assert err == f"cachedoctor: error: {bad}: not JSON: expected an S3 Inventory manifest.json\n"


def test_a_missing_data_file_is_one_line_naming_it(s3_server: Any, s3_bucket: str, proxy: S3Proxy) -> None:
    client = s3_server.client()
    cache(client, s3_bucket)
    inventory = publish(client, s3_bucket)
    data = next(o["Key"] for o in objects_now(client, s3_bucket, "inventory/") if o["Key"].endswith(".csv.gz"))
    client.delete_object(Bucket=s3_bucket, Key=data)
    err = one_line(*cli("scan", f"s3://{s3_bucket}/cache", "--no-state", "--inventory", inventory))
    assert err == (
        f"cachedoctor: error: s3://{s3_bucket}/{data}: the inventory data file is missing (named by {inventory})\n"
    )


def test_an_orc_inventory_is_refused_in_one_line(s3_server: Any, s3_bucket: str, tmp_path: Path) -> None:
    put(s3_server.client(), s3_bucket, "cache/0.safetensors", st_bytes(0))
    orc = tmp_path / "manifest.json"
    orc.write_bytes(manifest(s3_bucket, s3_bucket, [("inv/data/x.orc", b"ORC")], "ORC", "struct<bucket:string>"))
    err = one_line(*cli("scan", f"s3://{s3_bucket}/cache", "--no-state", "--inventory", str(orc)))
    assert err == (
        f"cachedoctor: error: {orc}: an ORC inventory cannot be read; configure the inventory as CSV or Parquet\n"
    )


def test_an_inventory_of_another_bucket_is_refused_in_one_line(s3_server: Any, s3_bucket: str, tmp_path: Path) -> None:
    put(s3_server.client(), s3_bucket, "cache/0.safetensors", st_bytes(0))
    other = tmp_path / "manifest.json"
    data = csv_gz("other-bucket", [])
    (tmp_path / "part.csv.gz").write_bytes(data)
    other.write_bytes(manifest("other-bucket", "other-bucket", [("inv/data/part.csv.gz", data)], "CSV", CSV_SCHEMA))
    err = one_line(*cli("scan", f"s3://{s3_bucket}/cache", "--no-state", "--inventory", str(other)))
    assert err == (
        f"cachedoctor: error: s3://{s3_bucket}/cache: the inventory {other} lists bucket other-bucket, "
        f"not {s3_bucket}; pass that bucket's inventory, or scan without --inventory\n"
    )


def test_a_parquet_inventory_without_pyarrow_names_the_extra(s3_server: Any, s3_bucket: str, tmp_path: Path) -> None:
    """A real process in which ``import pyarrow`` fails, as where the extra is not installed."""
    client = s3_server.client()
    cache(client, s3_bucket)
    inventory = publish(client, s3_bucket, "Parquet") if _has_pyarrow() else None
    if inventory is None:
        pytest.skip("writing the Parquet inventory needs pyarrow here")
    program = (
        "import sys; sys.modules['pyarrow'] = None; sys.argv[0] = 'cachedoctor'; "
        "from cachedoctor.__main__ import main; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, "scan", f"s3://{s3_bucket}/cache", "--no-state", "--inventory", inventory],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    err = one_line(done.returncode, done.stdout, done.stderr)
    assert err == (
        f"cachedoctor: error: {inventory}: a Parquet inventory needs pyarrow: pip install 'cachedoctor[inventory]'\n"
    )


def _has_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def test_the_inventory_setting_of_a_config_file_is_relative_to_it(
    s3_server: Any, s3_bucket: str, proxy: S3Proxy, tmp_path: Path
) -> None:
    """A copy of the inventory on disk (its data file beside the manifest), named by the config file."""
    client = s3_server.client()
    cache(client, s3_bucket)
    published = publish(client, s3_bucket)
    for item in objects_now(client, s3_bucket, "inventory/"):
        name = item["Key"].rsplit("/", 1)[-1]
        (tmp_path / name).write_bytes(client.get_object(Bucket=s3_bucket, Key=item["Key"])["Body"].read())
    (tmp_path / "cachedoctor.toml").write_text('inventory = "manifest.json"\n')
    code, out, err = cli(
        "scan",
        "--format",
        "json",
        "--no-state",
        "--s3-endpoint-url",
        proxy.url,
        f"s3://{s3_bucket}/cache",
        cwd=str(tmp_path),
    )
    assert (code, err) == (1, "")
    assert lists(proxy, s3_bucket) == []
    assert [p for m, p in proxy.log if p.startswith(f"/{s3_bucket}/inventory/")] == []  # the copies were read
    assert f"({tmp_path / 'manifest.json'})" in notes(json.loads(out)) and published.endswith("manifest.json")


def test_an_inventory_with_no_s3_target_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "0.safetensors").write_bytes(st_bytes(0))
    err = one_line(*cli("scan", str(tmp_path), "--inventory", str(tmp_path / "manifest.json")))
    assert err == (
        "cachedoctor: error: --inventory lists s3:// targets, and none is named; name one (s3://bucket/prefix) or drop it\n"
    )


def test_an_inventory_setting_that_is_no_s3_url_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CACHEDOCTOR_INVENTORY", "gs://bucket/manifest.json")
    err = one_line(*cli("scan", "s3://bucket/cache"))
    assert err == (
        "cachedoctor: error: environment CACHEDOCTOR_INVENTORY: 'gs://bucket/manifest.json': "
        "expected a path or an s3:// URL (S3 Inventory manifests only)\n"
    )


def test_shards_of_an_inventory_scan_merge_into_the_whole_scans_report(
    s3_server: Any, s3_bucket: str, proxy: S3Proxy, tmp_path: Path
) -> None:
    """Each shard takes its folders' listing from the inventory (no LIST), re-lists the changed
    folders it owns, and the merge sums what every shard re-listed into the one note."""
    client = s3_server.client()
    cache(client, s3_bucket)
    inventory = publish(client, s3_bucket)
    put(client, s3_bucket, "cache/1.safetensors", st_bytes(1)[:200])  # its folder is re-listed by its owner
    url = f"s3://{s3_bucket}/cache"
    code, whole, err = scan(proxy, url, "--inventory", inventory)
    assert (code, err) == (1, "") and "; 1 folder re-listed" in notes(whole)
    proxy.clear()
    parts = []
    for k in range(2):
        part = tmp_path / f"{k}.json"
        argv = ("--no-state", "--s3-endpoint-url", proxy.url, "--inventory", inventory, "--shard", f"{k}/2")
        assert cli("scan", *argv, "-o", str(part), url) == (0, "", "")
        parts.append(str(part))
    assert len(lists(proxy, s3_bucket)) == 1  # the changed folder, by the shard that owns it
    code, out, err = cli("merge", "--format", "json", *parts)
    merged = json.loads(out)
    assert (code, err) == (1, "")
    assert {**merged, "summary": counts(merged)} == {**whole, "summary": counts(whole)}
    assert merged["summary"]["notes"] == whole["summary"]["notes"]
