"""A rescan of a remote prefix served from the state database names each finding as the first
scan did, whatever the key: the state's rows are keyed by the key relative to its folder, and a
key that is no plain path (``a//b.pt`` made a finding ``/b.pt``: the relative name began with
the slash, and joining it back threw the folder away) must come back whole. One odd key per
case, holding a torn zip, beside healthy peers; scanned twice with the state on, JSON out."""

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

ODD_KEYS = {
    "double-slash": "odd/a//double.pt",
    "dot-dot-segment": "a/../b.pt",
    "dot-dot-onto-a-peer": "a/../0.pt",  # its folder and name are its healthy peer's, normalised
    "unicode": "ünï/кэш.pt",
    "long-name": "long/" + "l" * 220 + ".pt",
    "trailing-space": "space/torn.pt ",
    "folder-trailing-space": "space /torn.pt",
}


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Remote state databases go to the user cache dir: a fresh one per test."""
    home = tmp_path / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    yield home
    forget()


def scan(url: str) -> tuple[int, dict, str]:
    code, out, err = cli("scan", "--format", "json", url)
    return code, json.loads(out) if out else {}, err


@pytest.mark.parametrize("key", ODD_KEYS.values(), ids=ODD_KEYS.keys())
def test_a_rescan_from_the_state_names_an_odd_key_as_the_first_scan_did(
    s3_server: Any, s3_bucket: str, key: str
) -> None:
    client = s3_server.client()
    for i in range(3):
        client.put_object(Bucket=s3_bucket, Key=f"cache/{i}.pt", Body=pt_bytes({"latents": latent(seed=i)}))
    client.put_object(Bucket=s3_bucket, Key=f"cache/{key}", Body=pt_bytes({"latents": latent(seed=7)})[:300])
    stored = [item["Key"] for item in client.list_objects_v2(Bucket=s3_bucket)["Contents"]]
    assert f"cache/{key}" in stored  # the key as written, not normalised on the way
    url = f"s3://{s3_bucket}/cache"
    expected = [("corrupt-archive", f"{url}/{key}")]

    code, first, err = scan(url)
    assert (code, err) == (1, "")
    assert [(f["kind"], f["path"]) for f in first["findings"]] == expected
    assert first["summary"]["files_reused"] == 0

    code, again, err = scan(url)
    assert (code, err) == (1, "")
    assert [(f["kind"], f["path"]) for f in again["findings"]] == expected
    assert again["summary"]["files_reused"] == 4  # served from the state, not read again
