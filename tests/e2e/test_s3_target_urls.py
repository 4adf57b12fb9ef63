"""What an ``s3://`` target names, whichever way it is written (cases from an adversarial review,
rebuilt here first): a trailing ``/`` changes nothing, and a key that begins with ``/`` (the URL
``s3://bucket//cache``) is its own prefix: ``s3://bucket//cache/`` named ``cache/`` before, and a
repair of it acted on a prefix no one named. A repair of a prefix with no cache object in it is
"nothing to check", exit 2, as ``scan`` says and as a repair of an empty folder says."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("s3fs")

from cli_run import cli
from factories import latent, pt_bytes

from cachedoctor.stores.connect import forget
from cachedoctor.stores.interface import Location


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    yield home
    forget()


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("s3://b/p/", "p"),
        ("s3://b/p", "p"),
        ("s3://b//p/", "/p"),
        ("s3://b//p", "/p"),
        ("s3://b/p//", "p"),
        ("s3://b/", ""),
    ],
)
def test_a_url_names_its_key_less_only_its_trailing_slashes(url: str, key: str) -> None:
    assert Location.parse(url).key == key


def test_a_prefix_whose_key_begins_with_a_slash_is_scanned_as_written(s3_server: Any, s3_bucket: str) -> None:
    client = s3_server.client()
    torn = pt_bytes({"latents": latent(seed=7)})[:300]
    client.put_object(Bucket=s3_bucket, Key="/cache/lead.pt", Body=torn)  # under the prefix "/cache"
    for i in range(3):
        client.put_object(Bucket=s3_bucket, Key=f"/cache/{i}.pt", Body=pt_bytes({"latents": latent(seed=i)}))
        client.put_object(Bucket=s3_bucket, Key=f"cache/{i}.pt", Body=pt_bytes({"latents": latent(seed=i)}))
    for url in (f"s3://{s3_bucket}//cache", f"s3://{s3_bucket}//cache/"):
        code, out, err = cli("scan", "--format", "json", url)
        report = json.loads(out)
        assert code == 1, err
        assert [(f["kind"], f["path"]) for f in report["findings"]] == [
            ("corrupt-archive", f"s3://{s3_bucket}//cache/lead.pt")
        ]
        assert report["summary"]["files_read"] == 4


def test_a_repair_of_a_prefix_with_nothing_to_check_says_so(s3_server: Any, s3_bucket: str) -> None:
    s3_server.client().put_object(Bucket=s3_bucket, Key="cache/0.pt", Body=pt_bytes({"latents": latent(seed=0)}))
    url = f"s3://{s3_bucket}/nothing-here"
    scan_code, _, scan_err = cli("scan", url)
    code, out, err = cli("repair", "--yes", url)
    assert (scan_code, code) == (2, 2), out
    assert err.count("\n") == 1 and "no cache files" in err and "--allow-empty" in err, err
    assert scan_err.splitlines()[0].split(": ", 2)[-1] == err.splitlines()[0].split(": ", 2)[-1]
    dry_code, _, dry_err = cli("repair", "--dry-run", url)
    assert dry_code == 2 and dry_err == err
    assert cli("repair", "--yes", "--allow-empty", url)[0] == 0
