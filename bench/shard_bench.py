#!/usr/bin/env python3
"""Sharded scans (``torchrun -m cachedoctor scan``) against the same scan in one process (bench/README.md).

Two caches of SimpleTuner SDXL latents: one on the local disk (``--files`` in ``--folders``
folders, scanned quick and ``--deep``), one in a moto S3 server behind the counting proxy, which
delays every request by ``--delay-ms`` as a remote store's round trip would (``--objects`` in
``--prefixes`` folders). Each is scanned ``--no-state`` (everything read, every time) by
``cachedoctor scan`` in one process, the baseline, and by real ``torchrun --nproc_per_node R``
jobs (gloo's store, CPU) for each R of ``--ranks``: whole process trees, timed end to end. Each
rank's files, bytes and store requests come from rank 0's ``-v`` lines, the requests by kind
from the proxy; every run's report must equal the baseline's (``shard_runs.checked``). The
in-process rows time what every rank repeats whatever the number of ranks: the walk's listing
of every folder, and the S3 listing of the prefix. ``bench/shard_model.py`` turns the JSON into
the constants and the model of docs/performance.md ("Sharded scans").
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import runner
import shard_model
import shard_runs as runs
from runner import Bench, Goal, Method, fail, opt

TESTS = str(Path(__file__).resolve().parent.parent / "tests")
if TESTS not in sys.path:
    sys.path.append(TESTS)

GROUPS = {"quick": "local, quick", "deep": "local, --deep", "s3": "s3://, quick"}


def build(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """The local set (the S3 set lives in moto's memory: :func:`setup` uploads it every run)."""
    size = runs.write_local(root / "cache", args.files, args.folders)
    return {"files": args.files, "folders": args.folders, "file_bytes": size, "shape": "[4,128,128] bf16"}


def ranks_of(args: argparse.Namespace) -> list[int]:
    try:
        ranks = sorted({int(r) for r in args.ranks.split(",") if r.strip()})
    except ValueError:
        fail(f"--ranks {args.ranks}: give process counts, such as 1,2")
    if not ranks or min(ranks) < 1:
        fail(f"--ranks {args.ranks}: give process counts of at least 1")
    return ranks


def wanted(args: argparse.Namespace) -> list[str]:
    only = [g.strip() for g in args.only.split(",") if g.strip()]
    unknown = [g for g in only if g not in GROUPS]
    if unknown:
        fail(f"--only: no group {', '.join(unknown)} (groups: {', '.join(GROUPS)})")
    return only


def configs(args: argparse.Namespace, ctx: SimpleNamespace, group: str) -> list[runs.Config]:
    """The group's whole-process configurations: the baseline first, then one process with W
    workers (local only), then one torchrun job per ``--ranks`` value."""
    common = ["--no-state", "--format", "json", "-v"]
    if group == "s3":
        target = f"s3://{runs.BUCKET}/{runs.CACHE}"
        common += ["--s3-endpoint-url", ctx.proxy.url] + (["-j", str(args.threads)] if args.threads else [])
        jobs = ""
        variants: list[tuple[str, str, int | None, list[str]]] = [("1", "one process", None, [])]
    else:
        target = str(ctx.root / "cache")
        common += ["--deep"] if group == "deep" else []
        jobs = f", -j {args.rank_workers}"
        variants = [("1", f"one process{jobs}", None, ["-j", str(args.rank_workers)])]
        if args.workers != args.rank_workers:
            variants.append(("w", f"one process, -j {args.workers}", None, ["-j", str(args.workers)]))
    variants += [
        (f"r{r}", f"torchrun {r} rank{'s' if r > 1 else ''}" + jobs, r, variants[0][3]) for r in ranks_of(args)
    ]
    found = []
    for suffix, label, ranks, extra in variants:
        key = f"{group}_{suffix}"
        report = ctx.reports / f"{key}.json"
        argv = runs.scan_argv(target, ranks, [*common, *extra, "-o", str(report)])
        found.append(runs.Config(key, f"{GROUPS[group]}: {label}", argv, report, ctx.env, ranks))
    return found


def run(config: runs.Config, ctx: SimpleNamespace, group: str) -> dict[str, Any]:
    if group == "s3":
        return {**runs.run_once(config, ctx.proxy, ctx.delay, ctx.server.process.pid), "delay_ms": ctx.delay * 1000}
    return runs.run_once(config)


def reference(args: argparse.Namespace, ctx: SimpleNamespace, group: str, n: int) -> None:
    """The group's baseline run once, untimed: it must scan the healthy set clean, every file
    read; its verdict is what every timed run of the group must give."""
    base = configs(args, ctx, group)[0]
    got = run(base, ctx, group)
    if got["exit_code"] != 0 or got["findings"] != 0 or got["files_seen"] != n or got["files_read"] != n:
        fail(
            f"{base.label}: exit {got['exit_code']}, {got['findings']} findings, {got['files_seen']} files seen, "
            f"{got['files_read']} read, of {n} healthy files: the set is not what it should be "
            f"({got.get('stderr_tail', '')[-300:]})"
        )
    ctx.verdicts[group] = got["verdict"]


def setup(args: argparse.Namespace, ctx: SimpleNamespace) -> None:
    """Reports' folder, the environment, the S3 set behind the delaying proxy, and each group's
    reference run (which also warms the page cache for the local groups)."""
    ctx.reports = Path(tempfile.mkdtemp(prefix="cachedoctor-shard-reports-"))
    atexit.register(shutil.rmtree, ctx.reports, True)
    # OMP_NUM_THREADS: torchrun sets it to 1 for each rank anyway, and warns on stderr when unset
    ctx.env = {**os.environ, "CACHEDOCTOR_PROGRESS": "none", "OMP_NUM_THREADS": "1"}
    ctx.verdicts, ctx.delay = {}, args.delay_ms / 1000
    groups = wanted(args)
    if "s3" in groups:
        import moto_server
        from s3_proxy import S3Proxy

        t0 = time.perf_counter()
        ctx.server = moto_server.start()
        atexit.register(ctx.server.stop)
        ctx.env.update(ctx.server.env())
        os.environ.update(ctx.server.env())  # the in-process listing row's credentials
        ctx.object_bytes = runs.upload(ctx.server.client(), args.objects, args.prefixes)
        ctx.proxy = S3Proxy(ctx.server.url, keep_alive=True)  # as S3 keeps a connection (moto closes each)
        atexit.register(ctx.proxy.stop)
        print(
            f"s3 set: {args.objects:,} objects of {ctx.object_bytes:,} bytes in {args.prefixes} prefixes of "
            f"s3://{runs.BUCKET}/{runs.CACHE}, uploaded to moto in {time.perf_counter() - t0:.1f} s; "
            f"proxy {ctx.proxy.url} delays every request {args.delay_ms:g} ms"
        )
    for group in groups:
        reference(args, ctx, group, args.objects if group == "s3" else args.files)
    print(f"reference scans done: {', '.join(GROUPS[g] for g in groups)} clean")


def walk_row(ctx: SimpleNamespace, n: int) -> Method:
    """The walk every rank repeats whole (it lists every folder, then keeps its own)."""
    from cachedoctor.scan.walk import walk

    def work(_: Any) -> dict[str, Any]:
        errors: list[Any] = []
        seen = sum(len(folder.files) for folder in walk([str(ctx.root / "cache")], errors))
        if seen != n or errors:
            fail(f"the walk listed {seen} files ({len(errors)} errors), expected {n}")
        return {"files_seen": seen}

    return Method(
        "quick_walk", "local: the walk's listing (every rank repeats it)", work, items=n, group=GROUPS["quick"]
    )


def list_row(ctx: SimpleNamespace, n: int) -> Method:
    """The S3 listing every rank repeats whole: ``S3Store.list`` of the prefix, pages of 1,000
    keys one after another, each request delayed as the scans' are."""
    from cachedoctor.stores.interface import Location
    from cachedoctor.stores.s3 import S3Settings, S3Store

    store = S3Store(runs.BUCKET, S3Settings(endpoint_url=ctx.proxy.url))
    prefix = Location.parse(f"s3://{runs.BUCKET}/{runs.CACHE}")
    sum(1 for _ in store.list(prefix))  # the client's set-up and first connection, untimed

    def work(_: Any) -> dict[str, Any]:
        runs.delay_all(ctx.proxy, ctx.delay)
        server0 = runs.process_cpu(ctx.server.process.pid)
        seen = sum(1 for _ in store.list(prefix))
        if seen != n:
            fail(f"S3Store.list listed {seen} objects, expected {n}")
        return {
            "files_seen": seen,
            "requests": runs.by_kind(ctx.proxy),
            "server_cpu_s": round(runs.process_cpu(ctx.server.process.pid) - server0, 3),
        }

    return Method(
        "s3_list", "s3://: S3Store.list of the prefix (every rank repeats it)", work, items=n, group=GROUPS["s3"]
    )


def methods(args: argparse.Namespace, ctx: SimpleNamespace) -> list[Method]:
    rows = []
    for group in wanted(args):
        n = args.objects if group == "s3" else args.files
        if group == "quick":
            rows.append(walk_row(ctx, n))
        if group == "s3":
            rows.append(list_row(ctx, n))
        for config in configs(args, ctx, group):
            expect = config.ranks or 1

            def timed(_: Any, config: runs.Config = config, group: str = group, expect: int = expect) -> dict[str, Any]:
                return runs.checked(config, lambda: ctx.verdicts[group], expect, lambda: run(config, ctx, group))

            size = ctx.object_bytes if group == "s3" else ctx.facts["file_bytes"]
            rows.append(Method(config.key, config.label, timed, items=n, nbytes=n * size, group=GROUPS[group]))
    return rows


def detail(f: dict[str, Any]) -> str:
    """Per shard: files read and seconds; the store's requests by kind."""
    parts = []
    if f.get("shards"):
        parts.append(
            " ".join(
                f"[{s['files_read']:,} files"
                + (f" {s['store_requests']:,} req" if s["store_requests"] is not None else "")
                + f" {s['seconds']:.2f} s]"
                for s in f["shards"]
            )
        )
    elif f.get("scan_s") is not None:
        parts.append(f"scan {f['scan_s']:.2f} s")
    if f.get("requests"):
        parts.append(" ".join(f"{k} {v:,}" for k, v in f["requests"].items()))
    return "; ".join(parts)


def finish(args: argparse.Namespace, ctx: SimpleNamespace, figures: dict[str, dict]) -> list[str]:
    """The model's constants, from the figures (``shard_model.constants``)."""
    return shard_model.notes(shard_model.constants(figures))


def goals(args: argparse.Namespace) -> list[Goal]:
    """For information only: the widest torchrun job against one process and against one rank."""
    ranks = ranks_of(args)
    top = max(ranks)
    against = [("one process", "1")] + ([("torchrun 1 rank", "r1")] if top > 1 and 1 in ranks else [])
    return [
        Goal(
            f"{GROUPS[g]}: torchrun {top} ranks vs {name} (seconds)",
            f"{g}_r{top}",
            f"{g}_{key}",
            per="seconds",
            info=True,
        )
        for g in wanted(args)
        for name, key in against
    ]


BENCH = Bench(
    name="shard_bench",
    title="cachedoctor sharded scan benchmark (torchrun ranks on this machine)",
    schema="cachedoctor.bench.shard/1",
    build=build,
    setup=setup,
    methods=methods,
    finish=finish,
    goals=goals,
    detail=detail,
    repeat=3,
    statistic="best",
    budget=120,
    workers=True,
    options=[
        opt("--files", type=int, default=20000, metavar="N", help="latent files in the local cache (default 20000)"),
        opt("--folders", type=int, default=200, metavar="F", help="folders they are spread over (default 200)"),
        opt("--objects", type=int, default=2000, metavar="N", help="latent objects in the S3 bucket (default 2000)"),
        opt(
            "--prefixes", type=int, default=40, metavar="P", help="folders (prefixes) they are spread over (default 40)"
        ),
        opt("--delay-ms", type=float, default=20.0, metavar="MS", help="added to every S3 request (default 20)"),
        opt("--ranks", default="1,2", metavar="R,R", help="torchrun --nproc_per_node values (default 1,2)"),
        opt(
            "--rank-workers",
            type=int,
            default=1,
            metavar="J",
            help="-j of the baseline and of each rank, local (default 1: a rank is one reading process)",
        ),
        opt("--threads", type=int, default=0, metavar="T", help="-j of the S3 scans (default: the scan's own, 32)"),
        opt("--only", default="quick,deep,s3", metavar="GROUPS", help="of quick, deep, s3 (default all three)"),
    ],
    quick={"files": 400, "folders": 20, "objects": 200, "prefixes": 8, "repeat": 1},
    describe=lambda a: {"files": a.files, "folders": a.folders, "runs.layout": 1},
    reusable=lambda a, root: all((root / "cache" / p).is_file() for p in runs.layout(a.files, a.folders)[-a.folders :]),
    kept_name=lambda a: f"shards-{a.files}-{a.folders}",
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCH))
