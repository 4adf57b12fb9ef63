"""Scans and repairs split over the ranks of a real ``torchrun`` job (2 processes, gloo, CPU).

Which rank opened which file is seen from outside cachedoctor: a ``sitecustomize`` module on
``PYTHONPATH`` adds an audit hook (PEP 578) to every Python process of the run, workers
included, that logs each ``open`` of a path under the cache with the ``RANK`` of its process.
Reads of an S3 bucket are seen at a proxy in front of the moto server (``tests/s3_proxy.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CACHES = REPO / "fixtures" / "caches"
HOST = socket.gethostname()
INDEX = "aggregate.pt"  # OneTrainer's cache index: read to plan the dataset, by every rank

pytestmark = pytest.mark.slow

SITECUSTOMIZE = """
import os, sys
_root = os.environ.get("CD_TEST_OPEN_ROOT")
_log = os.environ.get("CD_TEST_OPEN_LOG")
if _root and _log:
    _fd = os.open(os.path.join(_log, "opens-%d.log" % os.getpid()), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    def _hook(event, args):
        if event == "open" and args and isinstance(args[0], (str, bytes)):
            path = os.fsdecode(args[0])
            if path.startswith(_root) and "/.cachedoctor/" not in path:
                os.write(_fd, ("%s\\t%s\\n" % (os.environ.get("RANK", "-"), path)).encode("utf-8", "surrogateescape"))
    sys.addaudithook(_hook)
"""


@pytest.fixture
def watched(tmp_path: Path) -> dict[str, str]:
    """The environment that logs every open under ``tmp_path/cache*`` (see the module doc)."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    logs = tmp_path / "opens"
    logs.mkdir()
    path = os.pathsep.join([str(hook), str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {
        **os.environ,
        "PYTHONPATH": path,
        "CD_TEST_OPEN_ROOT": str(tmp_path / "cache"),
        "CD_TEST_OPEN_LOG": str(logs),
        "OMP_NUM_THREADS": "1",
    }


def opens(env: dict[str, str]) -> dict[str, Counter[str]]:
    """path -> opens per rank, from the logs; the logs are emptied for the next run."""
    seen: dict[str, Counter[str]] = defaultdict(Counter)
    for log in Path(env["CD_TEST_OPEN_LOG"]).iterdir():
        for line in log.read_text(encoding="utf-8").splitlines():
            rank, path = line.split("\t", 1)
            seen[path][rank] += 1
        log.unlink()
    return dict(seen)


def torchrun(*argv: str, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    return subprocess.run([*cmd, "-m", "cachedoctor", *argv], capture_output=True, text=True, timeout=timeout, env=env)


def alone(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cachedoctor", *argv], capture_output=True, text=True, timeout=180, env=env
    )


def report(stdout: str) -> dict:
    doc = json.loads(stdout)
    return {**doc, "summary": {k: v for k, v in doc["summary"].items() if k != "elapsed_s"}}


def ours(stderr: str) -> list[str]:
    """cachedoctor's own lines among the launcher's."""
    return [line for line in stderr.splitlines() if line.startswith("cachedoctor: ")]


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def two_ranks(argv: list[str], env: dict[str, str], extra: dict[int, dict[str, str]]) -> list[subprocess.Popen[str]]:
    """Both ranks started as a launcher without an agent (srun, mpirun) starts them."""
    port = str(free_port())
    procs = []
    for rank in (0, 1):
        rank_env = {**env, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1"}
        rank_env.update(MASTER_PORT=port, **extra.get(rank, {}))
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "cachedoctor", *argv],
                env=rank_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return procs


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


def test_a_repair_split_over_ranks_reads_the_cache_once_in_all(tmp_path: Path, watched: dict[str, str]) -> None:
    """Each rank scans (and rescans) its shard only: every file is opened as often as by one
    process repairing the same cache, not once per rank; and the repaired caches are the same."""
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
    assert {p: split_opens[p] for p in cache_files} == {p: single_opens[p] for p in cache_files}
    after = alone("scan", "--no-state", "--format", "json", str(cache), env=watched)
    after_twin = alone("scan", "--no-state", "--format", "json", str(twin), env=watched)
    kinds = [(f["kind"], f["path"].replace(str(twin), str(cache))) for f in report(after_twin.stdout)["findings"]]
    assert [(f["kind"], f["path"]) for f in report(after.stdout)["findings"]] == kinds


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
