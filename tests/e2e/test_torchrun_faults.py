"""Ranks that fail, die or hang, and a repair split over ranks, under a real ``torchrun`` (or a
launcher without an agent): one line naming the rank and its host, exit 2; a repair that reads
the cache once in all."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest
from torchrun_runs import CACHES, HOST, INDEX, alone, opens, ours, report, torchrun, two_ranks, watched_env

pytestmark = pytest.mark.slow


@pytest.fixture
def watched(tmp_path: Path) -> dict[str, str]:
    return watched_env(tmp_path)


def test_a_killed_rank_is_one_line_naming_it_and_exit_2(tmp_path: Path, watched: dict[str, str]) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(CACHES, cache)
    run = torchrun("scan", "--format", "json", str(cache), env={**watched, "CACHEDOCTOR_TEST_KILL_RANK": "1"})
    assert run.stdout == "", run.stderr  # no report
    assert ours(run.stderr) == [  # the launcher's lines around it are its own
        f"cachedoctor: error: rank 1 on {HOST} ended first (killed, or out of memory) and the launcher stopped the "
        "others; no report was written; run the same command again (each shard resumes from its state)"
    ], run.stderr
    assert "exitcode  : 2" in run.stderr  # rank 0's, in the launcher's table beside rank 1's SIGKILL
    again = torchrun("scan", "--format", "json", str(cache), env=watched)  # resumes: each shard's state is whole
    assert report(again.stdout)["summary"]["exit_code"] == 1


def test_a_rank_that_cannot_use_its_state_stops_every_rank_with_its_line(
    tmp_path: Path, watched: dict[str, str]
) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(CACHES, cache)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x", encoding="utf-8")
    procs = two_ranks(
        ["scan", "--format", "json", str(cache)], watched, {1: {"CACHEDOCTOR_STATE": str(blocker / "state.sqlite")}}
    )
    (out0, err0), (out1, err1) = (p.communicate(timeout=120) for p in procs)
    assert [p.returncode for p in procs] == [2, 2]
    assert (out0, out1, err1) == ("", "", "")
    state = blocker / "state.shard-1-of-2.sqlite"  # each shard its own database, named after the one asked for
    assert err0.count("\n") == 1 and err0.startswith(f"cachedoctor: error: rank 1 on {HOST}: {state}: cannot use")


def test_a_hung_rank_is_named_once_its_heartbeat_stops(tmp_path: Path, watched: dict[str, str]) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(CACHES, cache)
    env = {**watched, "CACHEDOCTOR_RANK_TIMEOUT": "3"}
    procs = two_ranks(
        ["scan", "--no-state", "--format", "json", str(cache)], env, {1: {"CACHEDOCTOR_TEST_HANG_RANK": "1"}}
    )
    try:
        out0, err0 = procs[0].communicate(timeout=60)
    finally:
        procs[1].send_signal(signal.SIGKILL)
        procs[1].communicate(timeout=30)
    assert (procs[0].returncode, out0) == (2, "")
    assert err0.count("\n") == 1 and err0.startswith(f"cachedoctor: error: rank 1 on {HOST} stopped answering")


def test_a_repair_split_over_ranks_reads_the_cache_once_in_all(tmp_path: Path, watched: dict[str, str]) -> None:
    """Each rank scans (and rescans) its shard only: every file is opened as often as by one
    process repairing the same cache, not once per rank; and the repaired caches are the same.
    (A file rewritten in place is the exception by one open: its rescan takes the writer's own
    verdict on its bytes, ``repair/verdicts.py``, which only the rank that wrote it holds; the
    rank whose shard it is in reads it, where one process reads it not at all.)"""
    cache, twin = tmp_path / "cache", tmp_path / "cache-alone"
    shutil.copytree(CACHES, cache)
    shutil.copytree(CACHES, twin)
    env = {**watched, "CD_TEST_OPEN_ROOT": str(tmp_path)}
    single = alone("repair", "--yes", "--device", "cpu", str(twin), env=env)
    single_opens = {p.replace(str(twin), str(cache), 1): sum(r.values()) for p, r in opens(env).items()}
    split = torchrun("repair", "--yes", "--device", "cpu", str(cache), env=env)
    split_opens = {p: sum(r.values()) for p, r in opens(env).items()}
    assert single.returncode == 1 and "exitcode  : 1" in split.stderr, split.stdout + split.stderr

    def files(seen: dict[str, int]) -> dict[str, int]:  # less the repair's own temp files, and folders (fsync)
        return {p: n for p, n in seen.items() if not Path(p).name.startswith(".cachedoctor-") and not Path(p).is_dir()}

    split_opens, single_opens = files(split_opens), files(single_opens)
    assert len(split_opens) >= 80 and set(split_opens) == set(single_opens)
    cache_files = {path for path in split_opens if Path(path).name != INDEX}  # the index: every rank plans
    rewritten = {str(cache / p) for p in _rewritten_in_place(twin)}
    assert rewritten and rewritten <= cache_files
    extra = {p: split_opens[p] - single_opens[p] for p in cache_files}
    assert {p: n for p, n in extra.items() if n != 0 and not (p in rewritten and n == 1)} == {}
    after = alone("scan", "--no-state", "--format", "json", str(cache), env=watched)
    after_twin = alone("scan", "--no-state", "--format", "json", str(twin), env=watched)
    kinds = [(f["kind"], f["path"].replace(str(twin), str(cache))) for f in report(after_twin.stdout)["findings"]]
    assert [(f["kind"], f["path"]) for f in report(after.stdout)["findings"]] == kinds


def _rewritten_in_place(root: Path) -> list[str]:
    """Files the repair of ``root`` kept in its quarantine and put new bytes in place of."""
    runs = root / ".cachedoctor" / "quarantine"
    kept = [p.relative_to(run) for run in runs.iterdir() for p in run.rglob("*") if p.is_file()]
    return [str(p) for p in kept if p.name != ".records.jsonl" and (root / p).is_file()]
