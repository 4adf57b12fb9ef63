"""What ``shard_bench.py`` runs and reads: the sets, the command lines, one timed run, and its check.

A sharded scan is timed as the user starts it, a whole ``torchrun`` job (the launcher, its ranks,
their rendezvous and exchange, rank 0's report), so each configuration is a fresh process tree.
What each rank did comes from rank 0's ``-v`` lines (``cachedoctor: shard K/N on HOST: F files
seen, R read, B bytes read[, Q store requests], T s``, ``scan/part.py: Part.line``); what the
store was asked, from the counting proxy in front of moto (``tests/s3_proxy.py``), which also
delays every request as a remote store's round trip would. And every run's report must be the
single-process scan's report (:func:`verdict`): a timing of a wrong answer is worth nothing.
"""

from __future__ import annotations

import io
import json
import os
import re
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fixtures.builders.latents import st_latent_name

SHAPE = (4, 128, 128)  # SDXL's VAE latent of a 1024x1024 image, bf16 as SimpleTuner keeps it: 132 KB
CACHE = "cache/vae/sdxl/photos"  # SimpleTuner's cache layout: the image folders' names under it
BUCKET = "bench-shards"
FOREVER = 1 << 62  # a proxy fault's count that no run uses up: every request is delayed

SHARD_LINE = re.compile(
    r"^cachedoctor: shard (?P<index>\d+)/(?P<count>\d+) on (?P<host>.*?): (?P<files>\d+) files seen, "
    r"(?P<read>\d+) read, (?P<bytes>\d+) bytes read(?:, (?P<requests>\d+) store requests)?, (?P<seconds>[\d.]+) s$"
)


# --------------------------------------------------------------------------- the sets


def latent_pool(size: int = 8) -> list[Any]:
    """``size`` random bf16 SDXL latents the set's files are made from."""
    import torch

    gen = torch.Generator().manual_seed(20261207)
    return [torch.randn(*SHAPE, generator=gen).to(torch.bfloat16) for _ in range(size)]


def latent_bytes(pool: list[Any], i: int) -> bytes:
    """File ``i``: ``torch.save`` of a pool latent into a buffer (SimpleTuner's backends save to a
    file object or a buffer), made distinct by two ordinary values (its ETag too)."""
    import torch

    tensor = pool[i % len(pool)].clone()
    flat = tensor.view(-1)
    flat[0], flat[-1] = (i % 256) / 256, (i // 256) / 256
    buffer = io.BytesIO()
    torch.save(tensor, buffer)
    return buffer.getvalue()


def layout(n: int, folders: int) -> list[str]:
    """The set's relative paths: ``part_NNNN/<sha256(img_NNNNNNN)>.pt``, file ``i`` in folder ``i % folders``."""
    return [f"part_{i % folders:04d}/{st_latent_name(f'img_{i:07d}')}" for i in range(n)]


def write_local(root: Path, n: int, folders: int) -> int:
    """The local set under ``root``; returns the bytes of one file."""
    pool = latent_pool()
    size = 0
    for i, name in enumerate(layout(n, folders)):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        data = latent_bytes(pool, i)
        path.write_bytes(data)
        size = len(data)
    return size


def upload(client: Any, n: int, prefixes: int, threads: int = 4) -> int:
    """The S3 set: ``n`` objects under ``prefixes`` folders of ``s3://BUCKET/CACHE``; returns one object's bytes."""
    pool = latent_pool()
    client.create_bucket(Bucket=BUCKET)
    names = layout(n, prefixes)

    def put(i: int) -> int:
        body = latent_bytes(pool, i)
        client.put_object(Bucket=BUCKET, Key=f"{CACHE}/{names[i]}", Body=body)
        return len(body)

    with ThreadPoolExecutor(threads) as workers:
        return max(workers.map(put, range(n)))


def delay_all(proxy: Any, seconds: float) -> None:
    """Forget the proxy's counts, then delay every request by ``seconds`` (its ``delay`` fault,
    matching any method and key, more times than any run sends)."""
    proxy.clear()
    if seconds > 0:
        proxy.fail("delay", times=FOREVER, seconds=seconds)


def by_kind(proxy: Any) -> dict[str, int]:
    """The requests the proxy passed since its last :func:`delay_all`, by kind: ``LIST`` (a GET
    of the bucket itself, ``list_objects_v2``), else the HTTP method (``GET`` of an object, ``HEAD``...)."""
    kinds: dict[str, int] = {}
    for method, path in list(proxy.log):
        kind = "LIST" if method == "GET" and path.strip("/") == BUCKET else method
        kinds[kind] = kinds.get(kind, 0) + 1
    return dict(sorted(kinds.items()))


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (the moto server's)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- command lines


def scan_argv(target: str, ranks: int | None, extra: list[str]) -> list[str]:
    """``cachedoctor scan TARGET EXTRA`` as one process (``ranks`` None) or as a ``torchrun`` job
    of ``ranks`` processes on this machine (``--standalone``: its own rendezvous on a free port,
    so two benchmarks never meet on 29500). ``python -m torch.distributed.run`` is what the
    ``torchrun`` script runs, with this interpreter."""
    scan = ["-m", "cachedoctor", "scan", target, *extra]
    if ranks is None:
        return [sys.executable, *scan]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks), *scan]


def shard_lines(stderr: str) -> list[dict[str, Any]]:
    """Rank 0's ``-v`` lines, one dict per shard, in shard order."""
    found = []
    for line in stderr.splitlines():
        m = SHARD_LINE.match(line.strip())
        if m:
            requests = m["requests"]
            found.append(
                {
                    "shard": int(m["index"]),
                    "of": int(m["count"]),
                    "host": m["host"],
                    "files_seen": int(m["files"]),
                    "files_read": int(m["read"]),
                    "bytes_read": int(m["bytes"]),
                    "store_requests": None if requests is None else int(requests),
                    "seconds": float(m["seconds"]),
                }
            )
    return sorted(found, key=lambda s: s["shard"])


def verdict(report: dict[str, Any], code: int) -> dict[str, Any]:
    """What must not change with the number of ranks: the findings, the summary less its
    ``elapsed_s``, and the exit code."""
    summary = {k: v for k, v in report.get("summary", {}).items() if k != "elapsed_s"}
    return {"findings": report.get("findings"), "summary": summary, "exit_code": code}


def differences(a: Any, b: Any, where: str = "") -> list[str]:
    """Where two verdicts differ (``summary.files_read: 20000 != 19900``), at most a few."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for key in sorted(set(a) | set(b), key=str):
            out += differences(a.get(key), b.get(key), f"{where}.{key}" if where else str(key))
        return out[:5]
    return [] if a == b else [f"{where}: {json.dumps(a, default=str)[:120]} != {json.dumps(b, default=str)[:120]}"]


# --------------------------------------------------------------------------- one run


@dataclass
class Config:
    """One configuration: a command line, the report it writes, and its environment."""

    key: str
    label: str
    argv: list[str]
    report: Path  # the ``-o`` file (``--format json``)
    env: dict[str, str]
    ranks: int | None = None  # torchrun's --nproc_per_node; None: one process, no launcher


def run_once(config: Config, proxy: Any = None, delay: float = 0.0, server_pid: int | None = None) -> dict[str, Any]:
    """Run ``config`` once (a fresh process tree, to its end) and return what it did: exit code,
    the report's verdict, the summary's counts, each shard's ``-v`` line, the proxy's requests by
    method, and the CPU seconds of the process tree and of the server."""
    config.report.unlink(missing_ok=True)
    if proxy is not None:
        delay_all(proxy, delay)
    server0 = process_cpu(server_pid) if server_pid else 0.0
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(config.argv, capture_output=True, text=True, env=config.env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        report = json.loads(config.report.read_text())
    except (OSError, ValueError):
        report = {}
    summary = report.get("summary", {})
    out: dict[str, Any] = {
        "whole_process": True,  # the runner's table marks the row with `*`: a fresh process tree, timed end to end
        "exit_code": proc.returncode,
        "process_s": round(wall, 3),
        "scan_s": summary.get("elapsed_s"),
        "files_seen": summary.get("files_seen"),
        "files_read": summary.get("files_read"),
        "io_bytes": summary.get("io_bytes"),
        "findings": summary.get("findings"),
        "shards": shard_lines(proc.stderr),
        "client_cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 3),
        "verdict": verdict(report, proc.returncode),
    }
    if proxy is not None:
        out["requests"] = by_kind(proxy)
    if server_pid:
        out["server_cpu_s"] = round(process_cpu(server_pid) - server0, 3)
    if not report or proc.returncode not in (0, 1):
        out["stderr_tail"] = proc.stderr.strip()[-600:]
    return out


def checked(
    config: Config, reference: Callable[[], dict[str, Any]], expect_shards: int, run: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """``run()``'s figures, or :func:`runner.fail` (exit 2) when its verdict is not the reference's
    or rank 0 did not print one ``-v`` line per shard."""
    from runner import fail

    got = run()
    want = reference()
    if got["verdict"] != want:
        diff = "; ".join(differences(got["verdict"], want)) or "?"
        fail(
            f"{config.label}: its report is not the single-process scan's ({diff}); "
            f"stderr: {got.get('stderr_tail', '')[-300:]}"
        )
    shards = got["shards"]
    if expect_shards > 1 and [s["shard"] for s in shards] != list(range(expect_shards)):
        fail(f"{config.label}: rank 0 printed {len(shards)} shard line(s) with -v, expected {expect_shards}")
    if shards and sum(s["files_seen"] for s in shards) != got["files_seen"]:
        fail(
            f"{config.label}: the shards saw {sum(s['files_seen'] for s in shards)} files, the report {got['files_seen']}"
        )
    del got["verdict"]  # kept out of the JSON figures: equal to the reference's, by the check above
    return got
