#!/usr/bin/env python3
"""Remote scans against a bare boto3 loop, all against one moto S3 server (bench/README.md).

The set: ``--objects`` SDXL latents as SimpleTuner's S3 backend writes them: ``torch.save`` of a
bare ``[4, 128, 128]`` tensor (a 1024x1024 image through SDXL's VAE) into a buffer, PUT as
``<prefix>/<sha256(stem)>.pt``. bf16, because SimpleTuner moves SDXL's VAE to bf16 unless
``--vae_dtype fp32`` (``models/common.py``: "default"/"none" -> bfloat16; fp16 is refused for
SDXL): 131,072 bytes of data, 132,7xx bytes an object. ``--dtype fp32`` gives 263 KB objects,
past the ranged source's one-request window.

The server is moto's real S3 server in its own process (``tests/moto_server.py``), started once;
its CPU time is read from ``/proc`` around every timing (``server_cpu_s``), because on a small
machine the server's CPU per request, not the bytes, is what every row pays. After the timing,
each row runs once more through the counting proxy (``tests/s3_proxy.py``): requests and bytes
per object as the server sent them.
"""

from __future__ import annotations

import atexit
import hashlib
import io
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import runner
from runner import Bench, Goal, Method, opt

TESTS = str(Path(__file__).resolve().parent.parent / "tests")
if TESTS not in sys.path:
    sys.path.append(TESTS)

BUCKET = "bench-latents"
PREFIX = "cache/vae/sdxl/photos"
SHAPE = (4, 128, 128)
_server: Any = None  # the moto server of this run


def _server_cpu() -> float:
    """User + system CPU seconds of the moto server process so far."""
    with open(f"/proc/{_server.process.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _body(tensor: Any, i: int) -> bytes:
    import torch

    flat = tensor.view(-1)
    # every object distinct (its ETag too), by two ordinary values: a raw index in an element
    # makes the last thousands statistical outliers that a deep scan rightly reports
    flat[0], flat[-1] = (i % 256) / 256, (i // 256) / 256
    buffer = io.BytesIO()
    torch.save(tensor, buffer)  # SimpleTuner's aws backend: torch.save into a BytesIO, one PUT
    return buffer.getvalue()


def build(args, root):
    """Start the server and upload the set (nothing on disk: the set lives in moto's memory)."""
    import moto_server
    import torch

    global _server
    _server = moto_server.start()
    atexit.register(_server.stop)
    os.environ.update(_server.env())
    client = _server.client()
    client.create_bucket(Bucket=BUCKET)
    gen = torch.Generator().manual_seed(20261124)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    pool = [torch.randn(*SHAPE, generator=gen).to(dtype) for _ in range(8)]

    def put(i: int) -> int:
        body = _body(pool[i % 8].clone(), i)
        key = f"{PREFIX}/{hashlib.sha256(f'img_{i:06d}'.encode()).hexdigest()}.pt"
        client.put_object(Bucket=BUCKET, Key=key, Body=body)
        return len(body)

    with ThreadPoolExecutor(4) as pool_:
        sizes = list(pool_.map(put, range(args.objects)))
    return {
        "objects": args.objects,
        "object_bytes": sizes[0],
        "shape": list(SHAPE),
        "dtype": args.dtype,
        "server": _server.url,
        "prefix": f"s3://{BUCKET}/{PREFIX}",
    }


def _measured(work):
    """``work()`` with the client's and the server's CPU seconds around it."""

    def run(_):
        server0, client0 = _server_cpu(), time.process_time()
        extra = work()
        extra["server_cpu_s"] = round(_server_cpu() - server0, 3)
        extra["client_cpu_s"] = round(time.process_time() - client0, 3)
        return extra

    return run


def _boto_keys(client) -> list[str]:
    keys: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=PREFIX + "/"):
        keys += [item["Key"] for item in page.get("Contents", ())]
    return keys


def boto_loop(client, threads: int = 1):
    """The baseline: list, then GET every whole object with boto3 (one thread, or a pool)."""

    def get(key: str) -> int:
        return len(client.get_object(Bucket=BUCKET, Key=key)["Body"].read())

    def work() -> dict:
        keys = _boto_keys(client)
        if threads == 1:
            total = sum(get(k) for k in keys)
        else:
            with ThreadPoolExecutor(threads) as pool:
                total = sum(pool.map(get, keys))
        return {"n": len(keys), "bytes_read": total}

    return work


def ranged_scan(endpoint: str | None, threads: int, deep: bool):
    """The stand-in for ``scan s3://...`` until it lands: one LIST, then per object the ranged
    source (quick) or one whole GET (deep) through ``S3Store``, judged by the format readers."""
    from cachedoctor.formats import _dispatch
    from cachedoctor.formats._source import BufferSource
    from cachedoctor.stores.interface import Location
    from cachedoctor.stores.s3 import S3Settings, S3Store
    from cachedoctor.stores.source import RangeSource

    store = S3Store(BUCKET, S3Settings(endpoint_url=endpoint))

    def judge(info) -> int:
        if deep:
            meta = _dispatch(info.url, BufferSource(store.read_whole(info, info.size)), deep=True)
        else:
            meta = _dispatch(info.url, RangeSource(store, info), deep=False)
        return 0 if meta is not None and not meta.crc_mismatches else 1

    def work() -> dict:
        store.requests = 0
        infos = list(store.list(Location.parse(f"s3://{BUCKET}/{PREFIX}")))
        with ThreadPoolExecutor(threads) as pool:
            bad = sum(pool.map(judge, infos))
        return {"n": len(infos), "bad": bad, "requests": store.requests}

    return work


def methods(args, ctx):
    import boto3
    import botocore.config

    n, size, w = args.objects, ctx.facts["object_bytes"], args.threads
    config = botocore.config.Config(max_pool_connections=max(10, w))
    client = boto3.client("s3", endpoint_url=_server.url, config=config)
    ranged_scan(_server.url, 1, False)  # imports and the readers' first use, untimed
    rows = [
        Method("boto_1", "boto3 list + whole-object GET loop (1 thread)", _measured(boto_loop(client)), items=n),
        Method("boto_w", f"boto3 list + whole-object GET, {w} threads", _measured(boto_loop(client, w)), items=n),
        Method(
            "quick_w",
            f"ranged quick read + readers, {w} threads (stand-in)",
            _measured(ranged_scan(_server.url, w, False)),
            items=n,
        ),
        Method(
            "deep_w",
            f"whole GET + deep readers, {w} threads (stand-in)",
            _measured(ranged_scan(_server.url, w, True)),
            items=n,
            nbytes=n * size,
        ),
    ]
    rows += cli_rows(args, ctx)
    return [m for m in rows if not args.only or m.key in args.only.split(",")]


def _remote_scan_exists() -> bool:
    import importlib.util

    return importlib.util.find_spec("cachedoctor.scan.targets") is not None


_SUMMARY = (
    "import json, sys; s = json.load(sys.stdin)['summary']; print(json.dumps({'n': s['files_seen'], "
    "'bad': s['findings'] + len(s['errors']), 'files_read': s['files_read'], 'files_reused': s['files_reused'], "
    "'io_bytes': s['io_bytes'], 'scan_exit': s['exit_code']}))"
)


def cli_rows(args, ctx) -> list[Method]:
    """``cachedoctor scan s3://...`` as a user runs it (a fresh process each time): the first
    quick scan (no state database yet), the quick rescan (the state database of the first
    scan: one LIST, no GET), and the deep scan. Absent until scan takes s3:// targets."""
    if args.no_cli or not _remote_scan_exists():
        return []
    import shutil
    import tempfile

    n, size = args.objects, ctx.facts["object_bytes"]
    env = {**os.environ, **_server.env()}
    base = [sys.executable, "-m", "cachedoctor", "scan", ctx.facts["prefix"], "--s3-endpoint-url", _server.url]
    base += ["--format", "json", "-j", str(args.threads)]
    state_dir = Path(tempfile.mkdtemp(prefix="cachedoctor-s3-state-"))
    atexit.register(shutil.rmtree, state_dir, True)
    warm = str(state_dir / "warm.sqlite")
    cold = str(state_dir / "cold.sqlite")
    subprocess.run([*base, "--state", warm], env=env, capture_output=True, check=False)  # the rescan's state

    def fresh_state() -> None:
        Path(cold).unlink(missing_ok=True)

    def through(endpoint: str, *extra: str) -> list[str]:
        """The scan's own command with another endpoint (the counted pass through the proxy)."""
        argv = [*base, *extra]
        argv[argv.index("--s3-endpoint-url") + 1] = endpoint
        return argv

    ctx.counted_cli = {
        "cli_quick": lambda url: (fresh_state(), through(url, "--state", cold))[1],
        "cli_rescan": lambda url: through(url, "--state", warm),
        "cli_deep": lambda url: through(url, "--deep", "--no-state"),
    }

    def cli(*extra: str) -> list[str]:
        """The scan piped into a one-line summary (the runner's extra figures of the row)."""
        scan = " ".join(shlex.quote(a) for a in [*base, *extra])
        return ["bash", "-c", f"set -o pipefail; {scan} | {shlex.quote(sys.executable)} -c {shlex.quote(_SUMMARY)}"]

    return [
        Method(
            "cli_quick",
            "cachedoctor scan s3://... (first scan)",
            command=cli("--state", cold),
            prepare=fresh_state,
            env=env,
            items=n,
        ),
        Method(
            "cli_rescan",
            "cachedoctor scan s3://... (rescan, state warm)",
            command=cli("--state", warm),
            env=env,
            items=n,
        ),
        Method(
            "cli_deep",
            "cachedoctor scan --deep s3://...",
            command=cli("--deep", "--no-state"),
            env=env,
            items=n,
            nbytes=n * size,
        ),
    ]


def finish(args, ctx, figures):
    """Check every row saw every object, then count each row once through the proxy."""
    import boto3
    from s3_proxy import S3Proxy

    notes = []
    n = args.objects
    for f in figures.values():
        if f.get("n") != n or f.get("bad"):
            notes.append(f"{f['label']}: saw {f.get('n')} objects, {f.get('bad', 0)} judged bad, of {n}")
        if f.get("server_cpu_s"):
            notes.append(
                f"{f['label']}: server CPU {f['server_cpu_s'] / n * 1000:.2f} ms/object, "
                f"client CPU {f['client_cpu_s'] / n * 1000:.2f} ms/object (fastest timing)"
            )
    if args.no_count:
        return notes
    with S3Proxy(_server.url) as proxy:
        client = boto3.client("s3", endpoint_url=proxy.url)
        counted = {
            "boto_1": boto_loop(client),
            "quick_w": ranged_scan(proxy.url, args.threads, False),
            "deep_w": ranged_scan(proxy.url, args.threads, True),
        }
        for key, work in counted.items():
            if key not in figures:
                continue
            proxy.clear()
            work()
            figures[key]["server_requests_per_object"] = round(proxy.count() / n, 4)
            figures[key]["server_bytes_per_object"] = round(proxy.body_bytes / n)
            notes.append(
                f"{figures[key]['label']}: {proxy.count() / n:.3f} requests and "
                f"{proxy.body_bytes / n:,.0f} bytes per object at the server ({dict(proxy.requests)})"
            )
        for key, argv_for in getattr(ctx, "counted_cli", {}).items():
            if key not in figures:
                continue
            proxy.clear()
            subprocess.run(argv_for(proxy.url), env={**os.environ, **_server.env()}, capture_output=True, check=False)
            figures[key]["server_requests_per_object"] = round(proxy.count() / n, 4)
            figures[key]["server_bytes_per_object"] = round(proxy.body_bytes / n)
            notes.append(
                f"{figures[key]['label']}: {proxy.count() / n:.3f} requests and "
                f"{proxy.body_bytes / n:,.0f} bytes per object at the server ({dict(proxy.requests)})"
            )
    return notes


BENCH = Bench(
    name="s3_scan_bench",
    title="cachedoctor remote (S3) scan benchmark, moto server on this machine",
    schema="cachedoctor.bench.s3_scan/1",
    build=build,
    methods=methods,
    finish=finish,
    repeat=3,
    statistic="best",
    budget=600,
    alternate=True,
    options=[
        opt("--objects", type=int, default=10000, metavar="N", help="latent objects in the bucket (default 10000)"),
        opt("--dtype", choices=("bf16", "fp32"), default="bf16", help="dtype of the 4x128x128 latents"),
        opt("--threads", type=int, default=8, metavar="T", help="requests in flight of the pooled rows (default 8)"),
        opt("--only", default="", metavar="KEYS", help="comma-separated row keys to time (default all)"),
        opt("--no-count", action="store_true", help="skip the counted pass through the proxy"),
        opt("--no-cli", action="store_true", help="skip the cachedoctor scan (whole-process) rows"),
    ],
    quick={"objects": 300, "repeat": 1},
    describe=lambda a: {"objects": a.objects, "dtype": a.dtype},
    reusable=lambda a, root: False,
    goals=lambda args: [
        *(
            [
                Goal("cachedoctor scan s3:// (first) vs the boto3 GET loop (objects/s)", "cli_quick", "boto_1", 5.0),
                Goal("cachedoctor scan s3:// (rescan) vs the boto3 GET loop (objects/s)", "cli_rescan", "boto_1", 5.0),
                Goal("cachedoctor scan --deep s3:// vs the boto3 GET loop (objects/s)", "cli_deep", "boto_1", 0.7),
            ]
            if not args.no_cli and _remote_scan_exists()
            else []
        ),
        Goal("quick read stand-in vs the boto3 GET loop (objects/s)", "quick_w", "boto_1", 5.0, info=True),
        Goal("deep read stand-in vs the boto3 GET loop (objects/s)", "deep_w", "boto_1", 0.7, info=True),
        Goal("boto3 GET with a thread pool vs the loop (objects/s)", "boto_w", "boto_1", info=True),
    ],
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCH))
