#!/usr/bin/env python3
"""The dataset comparison (SimpleTuner layout) against the cache-only scan (bench/README.md)."""

from __future__ import annotations

import sys

import runner
from runner import Bench, Goal, Method, fail, opt

from fixtures.builders.datasets import CHECKOUT_BUCKETS, Checkout, simpletuner_checkout


def build(args, root):
    simpletuner_checkout(root, args.images, args.per_folder)
    return {
        "images": args.images,
        "per_folder": args.per_folder,
        "cache_files": 2 * args.images + 1,
        "buckets": [list(b) for b in CHECKOUT_BUCKETS],
    }


def plan(lay):
    from cachedoctor.layouts import LayoutName, LayoutOptions, plan_for

    return plan_for(LayoutName.SIMPLETUNER, [], LayoutOptions(config=str(lay.config)))[0]


def setup(args, ctx):
    """One untimed dataset scan: the healthy set must give no findings and no errors."""
    from cachedoctor.scan import ScanOptions, scan

    ctx.lay = Checkout(ctx.root, args.images, args.per_folder)
    p = plan(ctx.lay)
    result = scan(p.roots, ScanOptions(deep=False, workers=1), dataset=p)
    if (
        p.items != args.images
        or result.stats.files_read != ctx.facts["cache_files"]
        or result.findings
        or result.errors
    ):
        shown = "; ".join(f"{f.kind}: {f.path}" for f in result.findings[:3])
        fail(
            f"the dataset scan of the healthy set is not clean ({p.items} images planned, "
            f"{result.stats.files_read} files read, {len(result.findings)} findings, {len(result.errors)} errors"
            f"{': ' + shown if shown else ''}); the figures would be meaningless"
        )
    ctx.roots = list(p.roots)
    for folder in (ctx.lay.data, ctx.root / "output"):  # warm-up
        for path in folder.rglob("*"):
            if path.is_file():
                path.read_bytes()


def methods(args, ctx):
    from PIL import Image

    from cachedoctor.scan import ScanOptions, scan

    n, files, w, lay = args.images, ctx.facts["cache_files"], args.workers, ctx.lay

    def cache_scan(workers):
        return lambda _: summary(scan(ctx.roots, ScanOptions(deep=False, workers=workers)))

    def dataset_scan(workers):
        def run(_):
            p = plan(lay)
            return summary(scan(p.roots, ScanOptions(deep=False, workers=workers), dataset=p))

        return run

    def headers(_):
        for path in lay.image_paths():
            with Image.open(path) as im:
                im.size  # noqa: B018

    cli = [sys.executable, "-m", "cachedoctor", "scan"]
    return [
        Method("cache_1", "cache-only scan, 1 worker", cache_scan(1), items=files),
        Method("dataset_1", "dataset scan (plan + scan), 1 worker", dataset_scan(1), items=files),
        Method("cache_n", f"cache-only scan, {w} workers", cache_scan(w), items=files),
        Method("dataset_n", f"dataset scan (plan + scan), {w} workers", dataset_scan(w), items=files),
        Method("plan", "plan_for(simpletuner) alone (items: images)", lambda _: {"items": plan(lay).items}, items=n),
        Method("headers", "PIL.Image.open(p).size loop (items: images)", headers, items=n),
    ] + (
        []
        if args.no_cli
        else [
            Method(
                "cli_cache",
                "CLI: scan ROOTS --layout none -j 1",
                command=[*cli, *ctx.roots, "--layout", "none", "-j", "1", "--no-state"],
                items=files,
                cwd=str(runner.REPO),
            ),
            Method(
                "cli_dataset",
                "CLI: scan --config X -j 1",
                command=[*cli, "--config", str(lay.config), "-j", "1", "--no-state"],
                items=files,
                cwd=str(runner.REPO),
            ),
        ]
    )


def summary(result):
    return {"files_read": result.stats.files_read, "findings": len(result.findings), "errors": len(result.errors)}


BENCH = Bench(
    name="dataset_bench",
    title="cachedoctor dataset benchmark",
    schema="cachedoctor.bench.dataset/2",
    build=build,
    setup=setup,
    methods=methods,
    workers=True,
    cli=True,
    repeat=3,
    statistic="best",
    budget=150,
    options=[
        opt("--images", type=int, default=5000, metavar="N", help="images in the dataset (default 5000)"),
        opt("--per-folder", type=int, default=1000, metavar="M", help="images per part_NNN/ folder"),
    ],
    quick={"images": 300, "per_folder": 100, "repeat": 1},
    describe=lambda a: {"images": a.images, "per_folder": a.per_folder, "version": 1},
    reusable=lambda a, root: Checkout(root, a.images, a.per_folder).complete(),
    kept_name=lambda a: f"simpletuner-{a.images}",
    goals=[
        Goal("dataset scan vs cache-only scan, 1 worker (seconds)", "dataset_1", "cache_1", 1.5, per="seconds"),
        Goal("dataset scan vs cache-only scan, W workers (seconds)", "dataset_n", "cache_n", per="seconds", info=True),
        Goal("planning alone vs cache-only scan, 1 worker (seconds)", "plan", "cache_1", per="seconds", info=True),
        Goal("CLI --config vs CLI --layout none (seconds)", "cli_dataset", "cli_cache", per="seconds", info=True),
    ],
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCH))
