"""Rank 0's ``-v`` line per shard (``Part.line``) is what bench/shard_bench.py reads each rank's
figures from, and its report check ignores only the time: both contracts, pinned here."""

from __future__ import annotations

import sys
from pathlib import Path

from cachedoctor.scan.folders import ScanStats
from cachedoctor.scan.part import Part
from cachedoctor.sharding.interface import Shard

BENCH = str(Path(__file__).resolve().parents[3] / "bench")
if BENCH not in sys.path:
    sys.path.append(BENCH)

from shard_runs import differences, shard_lines, verdict  # noqa: E402


def _part(index: int, count: int, requests: dict[str, int]) -> Part:
    stats = ScanStats(files_seen=1000, files_read=990, files_reused=10, io_bytes=12_288_000)
    return Part(Shard(index, count), ["s3://b/cache"], stats=stats, host="node-7", elapsed=12.5, requests=requests)


def test_each_shard_line_of_an_s3_scan_gives_its_rank_figures() -> None:
    stderr = "W1207 torchrun banner\n" + "".join(
        f"cachedoctor: {_part(k, 2, {'store': 1002}).line()}\n" for k in (1, 0)
    )
    assert shard_lines(stderr) == [
        {
            "shard": k,
            "of": 2,
            "host": "node-7",
            "files_seen": 1000,
            "files_read": 980,  # read this time: the files the state database did not answer for
            "bytes_read": 12_288_000,
            "store_requests": 1002,
            "seconds": 12.5,
        }
        for k in (0, 1)
    ]


def test_a_local_shard_line_has_no_store_requests() -> None:
    (line,) = shard_lines(f"cachedoctor: {_part(3, 4, {}).line()}\n")
    assert (line["shard"], line["of"], line["store_requests"]) == (3, 4, None)


def test_reports_that_differ_only_in_their_time_are_the_same_verdict() -> None:
    report = {"findings": [], "summary": {"files_read": 20000, "elapsed_s": 2.9, "exit_code": 0}}
    later = {"findings": [], "summary": {"files_read": 20000, "elapsed_s": 1.7, "exit_code": 0}}
    short = {"findings": [], "summary": {"files_read": 19900, "elapsed_s": 1.7, "exit_code": 0}}
    assert verdict(report, 0) == verdict(later, 0)
    assert differences(verdict(short, 0), verdict(report, 0)) == ["summary.files_read: 19900 != 20000"]
    assert differences(verdict(report, 1), verdict(report, 0)) == ["exit_code: 1 != 0"]
