#!/usr/bin/env python3
"""Scans against the loops a user would otherwise write over a latent cache (bench/README.md)."""

from __future__ import annotations

import sys
import zipfile

import runner
from runner import Bench, Goal, Method, opt

from fixtures.builders.latents import SCAN_NAME, SCAN_SHAPE, count_files, scan_set


def build(args, root):
    size = scan_set(root / "latents", args.files, dtype=args.dtype, pool=args.pool)
    return {"files": args.files, "file_bytes": size, "shape": list(SCAN_SHAPE), "dtype": args.dtype}


def methods(args, ctx):
    import torch

    torch.set_num_threads(1)  # the baseline loops are single-threaded, like a 1-worker scan
    folder = ctx.root / "latents"
    files = [folder / SCAN_NAME.format(i) for i in range(args.files)]
    for p in files:  # warm-up: every method sees the same warm page cache
        p.read_bytes()
    tl = files[: args.torch_load_files or len(files)]
    size = ctx.facts["file_bytes"]

    def loop(body, some=files):
        return lambda _: {"n": sum(body(p) for p in some)}

    def scan(deep, workers):
        from cachedoctor.scan import ScanOptions, scan

        def run(_):
            r = scan([str(folder)], ScanOptions(deep=deep, workers=workers, state=None))
            return {"files_read": r.stats.files_read, "findings": len(r.findings), "errors": len(r.errors)}

        return run

    n, w = len(files), args.workers
    scans = (
        []
        if args.baselines_only
        else [
            Method("quick_1", "cachedoctor quick scan, 1 worker", scan(False, 1), items=n, nbytes=n * size),
            Method("quick_n", f"cachedoctor quick scan, {w} workers", scan(False, w), items=n, nbytes=n * size),
        ]
    )
    deep = (
        []
        if args.baselines_only
        else [
            Method("deep_1", "cachedoctor deep scan, 1 worker", scan(True, 1), items=n, nbytes=n * size),
            Method("deep_n", f"cachedoctor deep scan, {w} workers", scan(True, w), items=n, nbytes=n * size),
        ]
    )
    return (
        scans
        + [
            Method(
                "torch_load",
                "torch.load(weights_only=True) loop",
                loop(lambda p: torch.load(p, weights_only=True, map_location="cpu") is not None, tl),
                items=len(tl),
                nbytes=len(tl) * size,
            ),
            Method(
                "zip_infolist",
                "zipfile.ZipFile().infolist() loop",
                loop(lambda p: len(zipfile.ZipFile(p).infolist())),
                items=n,
                nbytes=n * size,
            ),
        ]
        + deep
        + [
            Method("read", "open(p, 'rb').read() loop", loop(lambda p: len(p.read_bytes())), items=n, nbytes=n * size),
        ]
    )


def finish(args, ctx, figures):
    return [
        f"{f['label']}: files_read {f['files_read']}, findings {f['findings']}, errors {f['errors']} "
        f"on a clean set of {args.files}"
        for f in figures.values()
        if "files_read" in f and (f["files_read"] != args.files or f["findings"] or f["errors"])
    ]


BENCH = Bench(
    name="scan_bench",
    title="cachedoctor scan benchmark",
    schema="cachedoctor.bench.scan/2",
    build=build,
    methods=methods,
    finish=finish,
    workers=True,
    repeat=3,
    statistic="best",
    budget=150,
    options=[
        opt("--files", type=int, default=5000, metavar="N", help="latent files in the set (default 5000)"),
        opt("--dtype", choices=("fp32", "bf16"), default="fp32", help="dtype of the 16x128x128 latents"),
        opt(
            "--torch-load-files",
            type=int,
            default=1000,
            metavar="M",
            help="time the torch.load loop on the first M files only (0 = all; default 1000)",
        ),
        opt("--pool", type=int, default=8, metavar="P", help="distinct random tensors behind the set"),
        opt("--baselines-only", action="store_true", help="time the loops only, no cachedoctor scan"),
    ],
    quick={"files": 200, "torch_load_files": 100, "repeat": 1},
    describe=lambda a: {"files": a.files, "dtype": a.dtype, "pool": a.pool},
    reusable=lambda a, root: count_files(root / "latents") == a.files,
    kept_name=lambda a: f"latents-{a.dtype}-{a.files}",
    goals=[
        Goal("quick scan, 1 worker vs torch.load loop (files/s)", "quick_1", "torch_load", 5.0),
        Goal("quick scan, 1 worker vs zip central-directory loop (files/s)", "quick_1", "zip_infolist", 0.6),
        Goal("deep scan, 1 worker vs plain read loop (bytes/s)", "deep_1", "read", 0.5, per="bytes"),
        Goal("quick scan, W workers vs torch.load loop (files/s)", "quick_n", "torch_load", info=True),
        Goal("quick scan, W workers vs zip central-directory loop (files/s)", "quick_n", "zip_infolist", info=True),
        Goal("deep scan, W workers vs plain read loop (bytes/s)", "deep_n", "read", per="bytes", info=True),
    ],
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCH))
