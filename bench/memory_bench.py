#!/usr/bin/env python3
"""Peak memory of a scan of many entries (bench/README.md): two fresh processes read their
own peak RSS, the interpreter with cachedoctor's scan modules imported, and the same plus a
one-worker scan of N metadata-sized files (one cuda-tagged in 100, so findings accumulate)."""

from __future__ import annotations

import sys

import runner
from runner import Bench, Goal, Method, fail, opt

from fixtures.builders.latents import count_files

PROBE = """
import json, resource, sys, time
from cachedoctor.scan import ScanOptions, scan
from cachedoctor.report import ScanReport
out = {}
if len(sys.argv) > 1:
    t0 = time.perf_counter()
    result = scan([sys.argv[1]], ScanOptions(workers=1))
    ScanReport(result)
    out = {"files": result.stats.files_read, "findings": len(result.findings), "scan_seconds": time.perf_counter() - t0}
out["maxrss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps(out))
"""
# Built in a child: torch imported by this process would raise every later child's peak RSS
# (a forked child starts with its parent's high-water mark).
BUILD = (
    "import sys; from pathlib import Path; sys.path.append(sys.argv[1]); "
    "from fixtures.builders.latents import small_cache; "
    "print(small_cache(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))"
)


def build(args, root):
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-c", BUILD, str(runner.REPO), str(root / "cache"), str(args.entries), str(args.per_folder)],
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        fail(f"cannot build the cache: {proc.stderr.strip()[-300:]}")
    return {"entries": args.entries, "per_folder": args.per_folder, "bytes": int(proc.stdout.split()[-1])}


def methods(args, ctx):
    py = [sys.executable, "-c", PROBE]
    return [
        Method("baseline", "interpreter + cachedoctor scan modules", command=py),
        Method("scan", "the same + scan(cache, workers=1)", command=[*py, str(ctx.root / "cache")], items=args.entries),
    ]


def per_entry(figures):
    scan, base = figures["scan"], figures["baseline"]
    return (scan["maxrss_kb"] - base["maxrss_kb"]) * 1024 / scan["items"]


def finish(args, ctx, figures):
    s = figures["scan"]
    if s.get("files") != args.entries or s.get("findings") != args.entries // 100:
        fail(
            f"the scan read {s.get('files')} files with {s.get('findings')} findings; expected {args.entries} "
            f"and {args.entries // 100}"
        )
    return [
        f"peak RSS: baseline {figures['baseline']['maxrss_kb'] / 1024:.1f} MiB, scan {s['maxrss_kb'] / 1024:.1f} "
        f"MiB, scan time {s['scan_seconds']:.1f} s"
    ]


BENCH = Bench(
    name="memory_bench",
    title="cachedoctor scan memory benchmark",
    schema="cachedoctor.bench.memory/2",
    build=build,
    methods=methods,
    finish=finish,
    repeat=1,
    statistic="best",
    budget=600,
    options=[
        opt(
            "--entries",
            "--files",
            dest="entries",
            type=int,
            default=100_000,
            metavar="N",
            help="files in the cache (default 100000)",
        ),
        opt("--per-folder", type=int, default=1000, metavar="M", help="files per folder (default 1000)"),
    ],
    quick={"entries": 5000},
    describe=lambda a: {"entries": a.entries, "per_folder": a.per_folder, "version": 1},
    reusable=lambda a, root: count_files(root / "cache") == a.entries,
    kept_name=lambda a: f"memory-{a.entries}-{a.per_folder}",
    detail=lambda f: f"peak RSS {f.get('maxrss_kb', 0) / 1024:.1f} MiB",
    goals=[Goal("peak RSS of the scan above the baseline, bytes per entry", value=per_entry, target=2048, unit=" B")],
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCH))
