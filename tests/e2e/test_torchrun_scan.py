"""Scans and recovers split over the ranks of a real ``torchrun`` job (2 processes, gloo, CPU):
the report is one process's, and each file is read by one rank (``torchrun_runs.py`` says how
that is seen). Reads of an S3 bucket are seen at a proxy in front of the moto server."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from torchrun_runs import CACHES, INDEX, alone, opens, ours, report, torchrun, watched_env

pytestmark = pytest.mark.slow


@pytest.fixture
def watched(tmp_path: Path) -> dict[str, str]:
    return watched_env(tmp_path)


def test_the_ranks_report_is_the_whole_scans_and_each_file_is_opened_by_one_rank(
    tmp_path: Path, watched: dict[str, str]
) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(CACHES, cache)
    single = alone("scan", "--no-state", "--format", "json", str(cache), env=watched)
    assert single.returncode == 1, single.stderr
    single_opens = opens(watched)
    split = torchrun("scan", "--no-state", "--format", "json", str(cache), env=watched)
    assert report(split.stdout) == report(single.stdout)
    assert ours(split.stderr) == []
    assert split.stderr.count("exitcode  :") == 1 and "exitcode  : 1" in split.stderr  # rank 0 alone holds the verdict
    split_opens = opens(watched)
    assert set(split_opens) == set(single_opens) and len(split_opens) >= 80
    # a file one process opens once (to scan it) is opened once in all, by one rank
    once = {path for path, ranks in single_opens.items() if sum(ranks.values()) == 1}
    assert {path: dict(split_opens[path]) for path in once if sum(split_opens[path].values()) != 1} == {}
    assert {r for path in once for r in split_opens[path]} == {"0", "1"}  # both ranks read their share
    # the rest are the layout's index (OneTrainer's aggregate.pt), which every rank reads to plan the dataset
    assert {Path(path).name for path in set(single_opens) - once} == {INDEX}


def test_ranks_over_an_s3_bucket_read_each_object_once_in_all(
    tmp_path: Path, watched: dict[str, str], s3_server: object, s3_bucket: str
) -> None:
    from s3_proxy import S3Proxy

    client = s3_server.client()  # type: ignore[attr-defined]
    for path in sorted(p for p in CACHES.rglob("*") if p.is_file()):
        client.put_object(Bucket=s3_bucket, Key=f"cache/{path.relative_to(CACHES)}", Body=path.read_bytes())
    with S3Proxy(s3_server.url) as proxy:  # type: ignore[attr-defined]
        env = {**watched, **s3_server.env(), "AWS_ENDPOINT_URL": proxy.url}  # type: ignore[attr-defined]
        url = f"s3://{s3_bucket}/cache"
        single = alone("scan", "--no-state", "--format", "json", url, env=env)
        single_gets = Counter(path for method, path in proxy.log if method == "GET")
        proxy.clear()
        split = torchrun("scan", "--no-state", "--format", "json", url, env=env)
        split_gets = Counter(path for method, path in proxy.log if method == "GET")
    assert single.returncode == 1, single.stderr
    assert report(split.stdout) == report(single.stdout)
    bucket = (
        f"/{s3_bucket}"  # a GET of the bucket itself is a LIST: every rank lists the prefix (an inventory does not)
    )
    assert split_gets.pop(bucket) == 2 * single_gets.pop(bucket)
    assert split_gets == single_gets and len(split_gets) >= 80  # every object read as often as by one process


def test_recover_split_over_ranks_reports_what_one_process_reports(tmp_path: Path, watched: dict[str, str]) -> None:
    """A crash left a temp file among the latents: every rank surveys its shard (the deep reads
    around the crash included), and rank 0's survey is the one a single process gives."""
    cache, twin = tmp_path / "cache", tmp_path / "twin"
    shutil.copytree(CACHES, cache, ignore=shutil.ignore_patterns(".cachedoctor"))
    (cache / "simpletuner" / "vae" / "tmpabcdefgh").write_bytes(b"partial")
    shutil.copytree(cache, twin)
    single = alone("recover", "--format", "json", str(twin), env=watched)
    split = torchrun("recover", "--format", "json", str(cache), env=watched)
    assert single.returncode == 1, single.stderr
    assert split.stderr.count("exitcode  :") == 1 and "exitcode  : 1" in split.stderr
    assert json.loads(split.stdout) == json.loads(single.stdout.replace(str(twin), str(cache)))
    assert json.loads(split.stdout)["survey"]["temp_files"]  # the planted one among them
