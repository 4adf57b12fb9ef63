#!/usr/bin/env python3
"""Remote scans against a bare boto3 loop, every request held as S3's round trip would be (bench/README.md).

The set: ``--objects`` SDXL latents as SimpleTuner's S3 backend writes them: ``torch.save`` of a
bare ``[4, 128, 128]`` tensor (a 1024x1024 image through SDXL's VAE) into a buffer, PUT as
``<prefix>/<sha256(stem)>.pt``. bf16, because SimpleTuner moves SDXL's VAE to bf16 unless
``--vae_dtype fp32`` (``models/common.py``: "default"/"none" -> bfloat16; fp16 is refused for
SDXL): 131,072 bytes of data, 132,7xx bytes an object. ``--dtype fp32`` gives 263 KB objects,
past the ranged source's one-request window.

The server is moto's real S3 server in its own process (``tests/moto_server.py``), started once.
Every row reaches it through the proxy ``shard_bench.py`` uses (``tests/s3_proxy.py``), whose
``delay`` fault holds every request ``--delay-ms`` (20) before forwarding it: S3 answers a GET
after 10-30 ms of waiting, which a serial loop pays in full and a pool of requests in flight
does not. Around every timing the bench reads what the proxy passed (requests by kind, body
bytes) and the CPU seconds of moto (``/proc``), of this process (the in-process rows' client,
and the proxy's threads) and of its children (the ``cachedoctor scan`` rows): on a small machine
moto's CPU per request, not the waiting, is what bounds a pool.
"""

from __future__ import annotations

import argparse
import atexit
import hashlib
import io
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import runner
from runner import Bench, Goal, Method, fail, opt
from s3_meter import Meter

TESTS = str(Path(__file__).resolve().parent.parent / "tests")
if TESTS not in sys.path:
    sys.path.append(TESTS)

BUCKET = "bench-latents"
PREFIX = "cache/vae/sdxl/photos"
SHAPE = (4, 128, 128)
_server: Any = None  # the moto server of this run
_meter: Meter | None = None  # the proxy in front of it, and what each timing cost


def _body(tensor: Any, i: int) -> bytes:
    import torch

    flat = tensor.view(-1)
    # every object distinct (its ETag too), by two ordinary values: a raw index in an element
    # makes the last thousands statistical outliers that a deep scan rightly reports
    flat[0], flat[-1] = (i % 256) / 256, (i // 256) / 256
    buffer = io.BytesIO()
    torch.save(tensor, buffer)  # SimpleTuner's aws backend: torch.save into a BytesIO, one PUT
    return buffer.getvalue()


def build(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """Start the server, upload the set straight to it (nothing on disk: the set lives in moto's
    memory), then put the delaying proxy in front of it."""
    import moto_server
    import torch

    global _server, _meter
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
    _meter = Meter(_server.url, _server.process.pid, BUCKET, args.delay_ms)
    os.environ["AWS_ENDPOINT_URL"] = _meter.url  # whatever client is made here goes through the proxy
    return {
        "objects": args.objects,
        "object_bytes": sizes[0],
        "shape": list(SHAPE),
        "dtype": args.dtype,
        "server": _server.url,
        "proxy": f"{_meter.url}, every request delayed {args.delay_ms:g} ms",
        "prefix": f"s3://{BUCKET}/{PREFIX}",
    }


Work = Callable[[], dict[str, Any]]


def _measured(key: str, work: Work) -> Callable[[Any], dict[str, Any]]:
    """``work()`` as row ``key``'s timing, metered."""

    def run(_: Any) -> dict[str, Any]:
        assert _meter is not None
        _meter.start(key)
        extra = work()
        _meter.settle()
        return extra

    return run


def _boto_keys(client: Any) -> list[str]:
    keys: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=PREFIX + "/"):
        keys += [item["Key"] for item in page.get("Contents", ())]
    return keys


def boto_loop(client: Any, threads: int = 1) -> Work:
    """The baseline: list, then GET every whole object with boto3 (one thread, or a pool)."""

    def get(key: str) -> int:
        return len(client.get_object(Bucket=BUCKET, Key=key)["Body"].read())

    def work() -> dict[str, Any]:
        keys = _boto_keys(client)
        if threads == 1:
            total = sum(get(k) for k in keys)
        else:
            with ThreadPoolExecutor(threads) as pool:
                total = sum(pool.map(get, keys))
        return {"n": len(keys), "bytes_read": total}

    return work


def ranged_scan(endpoint: str, threads: int, deep: bool, limit: int | None = None) -> Work:
    """The scan's reads without the scan: one LIST, then per object the ranged source (quick)
    or one whole GET (deep) through ``S3Store``, judged by the format readers (the first
    ``limit`` objects: the warm-up)."""
    from cachedoctor.formats import _dispatch
    from cachedoctor.formats._source import BufferSource
    from cachedoctor.stores.interface import Location
    from cachedoctor.stores.s3 import S3Settings, S3Store
    from cachedoctor.stores.source import RangeSource

    store = S3Store(BUCKET, S3Settings(endpoint_url=endpoint))

    def judge(info: Any) -> int:
        if deep:
            meta = _dispatch(info.url, BufferSource(store.read_whole(info, info.size)), deep=True)
        else:
            meta = _dispatch(info.url, RangeSource(store, info), deep=False)
        return 0 if meta is not None and not meta.crc_mismatches else 1

    def work() -> dict[str, Any]:
        store.requests = 0
        infos = list(store.list(Location.parse(f"s3://{BUCKET}/{PREFIX}")))[:limit]
        with ThreadPoolExecutor(threads) as pool:
            bad = sum(pool.map(judge, infos))
        return {"n": len(infos), "bad": bad, "requests": store.requests}

    return work


def _threads(args: argparse.Namespace) -> int:
    """Requests in flight of the pooled rows: ``--threads``, else the scan's own default."""
    from cachedoctor.scan.thread_reads import jobs_for

    return args.threads or jobs_for(None)


def methods(args: argparse.Namespace, ctx: SimpleNamespace) -> list[Method]:
    import boto3
    import botocore.config

    assert _meter is not None
    n, size, w = args.objects, ctx.facts["object_bytes"], _threads(args)
    config = botocore.config.Config(max_pool_connections=max(10, w))
    client = boto3.client("s3", endpoint_url=_meter.url, config=config)
    ranged_scan(_meter.url, 4, False, limit=8)()  # imports and the readers' first use, untimed
    rows = [
        Method(
            "boto_1", "boto3 list + whole-object GET loop (1 thread)", _measured("boto_1", boto_loop(client)), items=n
        ),
        Method(
            "boto_w", f"boto3 list + whole-object GET, {w} threads", _measured("boto_w", boto_loop(client, w)), items=n
        ),
        Method(
            "quick_w",
            f"ranged quick read + readers, {w} threads (in process)",
            _measured("quick_w", ranged_scan(_meter.url, w, False)),
            items=n,
        ),
        Method(
            "deep_w",
            f"whole GET + deep readers, {w} threads (in process)",
            _measured("deep_w", ranged_scan(_meter.url, w, True)),
            items=n,
            nbytes=n * size,
        ),
    ]
    rows += cli_rows(args, ctx)
    return [m for m in rows if not args.only or m.key in args.only.split(",")]


def pool_sizes(args: argparse.Namespace) -> list[int]:
    try:
        sizes = sorted({int(s) for s in args.pool_sizes.split(",") if s.strip()})
    except ValueError:
        fail(f"--pool-sizes {args.pool_sizes}: give request counts, such as 4,8,16")
    if sizes and min(sizes) < 1:
        fail(f"--pool-sizes {args.pool_sizes}: give counts of at least 1")
    return sizes


_SUMMARY = (
    "import json, sys; s = json.load(sys.stdin)['summary']; print(json.dumps({'n': s['files_seen'], "
    "'bad': s['findings'] + len(s['errors']), 'files_read': s['files_read'], 'files_reused': s['files_reused'], "
    "'io_bytes': s['io_bytes'], 'scan_exit': s['exit_code']}))"
)


def cli_rows(args: argparse.Namespace, ctx: SimpleNamespace) -> list[Method]:
    """``cachedoctor scan s3://...`` as a user runs it (a fresh process each time, the scan's
    own ``-j`` unless ``--threads``): the first quick scan (no state database yet), the quick
    rescan (the state database of an untimed first scan: the LISTs, no GET), the deep scan, and
    with ``--pool-sizes`` the first quick scan at each ``-j``."""
    import shutil
    import tempfile

    if args.no_cli:
        return []
    assert _meter is not None
    meter = _meter
    n, size = args.objects, ctx.facts["object_bytes"]
    env = {**os.environ, **_server.env(), "AWS_ENDPOINT_URL": meter.url}
    base = [sys.executable, "-m", "cachedoctor", "scan", ctx.facts["prefix"], "--s3-endpoint-url", meter.url]
    base += ["--format", "json"]
    own = ["-j", str(args.threads)] if args.threads else []  # else the scan's default
    state_dir = Path(tempfile.mkdtemp(prefix="cachedoctor-s3-state-"))
    atexit.register(shutil.rmtree, state_dir, True)
    warm = str(state_dir / "warm.sqlite")
    if not args.only or "cli_rescan" in args.only.split(","):
        made = subprocess.run([*base, *own, "--state", warm], env=env, capture_output=True, text=True, check=False)
        if made.returncode != 0:
            fail(f"the rescan's first scan ended {made.returncode}: {made.stderr.strip()[-300:]}")

    def cli(*extra: str) -> list[str]:
        """The scan piped into a one-line summary (the runner's extra figures of the row)."""
        scan = " ".join(shlex.quote(a) for a in [*base, *extra])
        return ["bash", "-c", f"set -o pipefail; {scan} | {shlex.quote(sys.executable)} -c {shlex.quote(_SUMMARY)}"]

    def metered(key: str, fresh: str | None = None) -> Callable[[], None]:
        """The row's ``prepare``: its state database removed (a first scan), its timing metered."""

        def prepare() -> None:
            if fresh is not None:
                Path(fresh).unlink(missing_ok=True)
            meter.start(key)

        return prepare

    def first_scan(key: str, label: str, jobs: list[str]) -> Method:
        cold = str(state_dir / f"{key}.sqlite")
        command = cli(*jobs, "--state", cold)
        return Method(key, label, command=command, prepare=metered(key, cold), env=env, items=n)

    rows = [
        first_scan("cli_quick", "cachedoctor scan s3://... (first scan)", own),
        Method(
            "cli_rescan",
            "cachedoctor scan s3://... (rescan, state warm)",
            command=cli(*own, "--state", warm),
            prepare=metered("cli_rescan"),
            env=env,
            items=n,
        ),
        Method(
            "cli_deep",
            "cachedoctor scan --deep s3://...",
            command=cli(*own, "--deep", "--no-state"),
            prepare=metered("cli_deep"),
            env=env,
            items=n,
            nbytes=n * size,
        ),
    ]
    rows += [
        first_scan(f"cli_quick_j{j}", f"cachedoctor scan s3://... (first scan), -j {j}", ["-j", str(j)])
        for j in pool_sizes(args)
    ]
    return rows


def finish(args: argparse.Namespace, ctx: SimpleNamespace, figures: dict[str, dict[str, Any]]) -> list[str]:
    """Every row's figures at the proxy and in CPU; check every row saw every object, and that
    a first scan read them all and the rescan none."""
    assert _meter is not None
    _meter.settle()  # the last command row's timing
    notes = []
    n = args.objects
    for key, f in figures.items():
        took = _meter.fastest(key, f["seconds_all"])
        if took:
            client = took["children_cpu_s"] if f["whole_process"] else took["own_cpu_s"]
            f.update(
                requests=took["requests"],
                server_requests_per_object=round(took["server_requests"] / n, 4),
                server_bytes_per_object=round(took["server_body_bytes"] / n),
                server_cpu_s=took["server_cpu_s"],
                client_cpu_s=client,
                proxy_cpu_s=took["own_cpu_s"] if f["whole_process"] else None,
            )
            proxy = (
                f" (+ the proxy's {took['own_cpu_s'] / n * 1000:.2f} ms)"
                if f["whole_process"]
                else " (with the proxy's)"
            )
            notes.append(
                f"{f['label']}: {took['server_requests'] / n:.3f} requests ({took['requests']}) and "
                f"{took['server_body_bytes'] / n:,.0f} bytes per object; CPU per object: server "
                f"{took['server_cpu_s'] / n * 1000:.2f} ms, client {client / n * 1000:.2f} ms{proxy}"
            )
        if f.get("n") != n or f.get("bad"):
            notes.append(f"{f['label']}: saw {f.get('n')} objects, {f.get('bad', 0)} judged bad, of {n}")
        if key.startswith("cli_quick") and f.get("files_read") != n:
            notes.append(f"{f['label']}: read {f.get('files_read')} objects of {n} (a first scan reads every one)")
        if key == "cli_rescan" and f.get("files_reused") != n:
            notes.append(f"{f['label']}: reused {f.get('files_reused')} objects of {n} (a rescan reads none)")
    return notes


BENCH = Bench(
    name="s3_scan_bench",
    title="cachedoctor remote (S3) scan benchmark, moto server behind a latency proxy on this machine",
    schema="cachedoctor.bench.s3_scan/2",
    build=build,
    methods=methods,
    finish=finish,
    repeat=3,
    statistic="best",
    budget=600,
    alternate=True,
    options=[
        opt("--objects", type=int, default=2000, metavar="N", help="latent objects in the bucket (default 2000)"),
        opt("--dtype", choices=("bf16", "fp32"), default="bf16", help="dtype of the 4x128x128 latents"),
        opt("--delay-ms", type=float, default=20.0, metavar="MS", help="added to every S3 request (default 20)"),
        opt(
            "--threads",
            type=int,
            default=0,
            metavar="T",
            help="requests in flight of the pooled rows and -j of the scans (default: the scan's own)",
        ),
        opt("--pool-sizes", default="", metavar="J,J", help="also time the first scan at each -j (e.g. 4,8,16,32,64)"),
        opt("--only", default="", metavar="KEYS", help="comma-separated row keys to time (default all)"),
        opt("--no-cli", action="store_true", help="skip the cachedoctor scan (whole-process) rows"),
    ],
    quick={"objects": 300, "repeat": 1},
    describe=lambda a: {"objects": a.objects, "dtype": a.dtype},
    reusable=lambda a, root: False,
    goals=lambda args: [
        *(
            [
                Goal("cachedoctor scan s3:// (first) vs the boto3 GET loop (objects/s)", "cli_quick", "boto_1", 5.0),
                Goal("cachedoctor scan s3:// (rescan) vs the boto3 GET loop (objects/s)", "cli_rescan", "boto_1", 20.0),
                Goal("cachedoctor scan --deep s3:// vs the boto3 GET loop (objects/s)", "cli_deep", "boto_1", 0.7),
            ]
            if not args.no_cli
            else []
        ),
        *(
            Goal(
                f"scan s3:// (first), -j {j} vs the boto3 GET loop (objects/s)", f"cli_quick_j{j}", "boto_1", info=True
            )
            for j in ([] if args.no_cli else pool_sizes(args))
        ),
        Goal("quick reads in process vs the boto3 GET loop (objects/s)", "quick_w", "boto_1", info=True),
        Goal("deep reads in process vs the boto3 GET loop (objects/s)", "deep_w", "boto_1", info=True),
        Goal("boto3 GET with a thread pool vs the loop (objects/s)", "boto_w", "boto_1", info=True),
    ],
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCH))
