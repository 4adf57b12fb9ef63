#!/usr/bin/env python3
"""A rescan of an unchanged cache against a bare ``os.scandir`` + ``stat`` walk (bench/README.md):
in-process (the state database's own cost) and as whole fresh processes (``cachedoctor scan``
end to end, interpreter start-up and imports included, against the walk in a fresh Python)."""

from __future__ import annotations

import os
import re
import shutil
import sys

import runner
from runner import Bench, Goal, Method, fail, opt

from fixtures.builders.latents import count_files

STATE_DIR = ".cachedoctor"
UNCHANGED = re.compile(r"(\d+) unchanged\s+since\s+the\s+last\s+scan")  # the summary may wrap
# The bare walk, also run as a fresh process: what any rescan must do at least, list every folder
# and stat every file (following symlinks, as the scan's os.stat does), the scan's folder skipped.
WALK = """
import os, sys
def walk(cache):
    n, stack = 0, [cache]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in it:
                if entry.is_dir():
                    if entry.name != ".cachedoctor":
                        stack.append(entry.path)
                else:
                    entry.stat()
                    n += 1
    return n
if __name__ == "__main__":
    print('{"files_seen": %d}' % walk(sys.argv[1]))
"""
walk_ns: dict = {}
exec(compile(WALK, "<walk>", "exec"), walk_ns)


def build(args, root):
    from memory_bench import build as build_metadata_cache  # the same files, built by a child (no torch here)

    return build_metadata_cache(args, root)


def check(result, n, label, reused):
    s = result.stats
    if s.files_seen != n or (reused and s.files_reused != n) or len(result.findings) != n // 100 or result.errors:
        fail(
            f"{label}: {s.files_seen} files seen, {s.files_reused} reused, {len(result.findings)} findings "
            f"(expected {n // 100}), {len(result.errors)} errors: the figures would be meaningless"
        )
    return {"files_seen": s.files_seen, "files_read": s.files_read, "files_reused": s.files_reused}


def setup(args, ctx):
    """Warm-up, then the first scan (records every file) and a second one (settles racy files)."""
    from cachedoctor.scan import ScanOptions, scan

    ctx.cache = str(ctx.root / "cache")
    shutil.rmtree(os.path.join(ctx.cache, STATE_DIR), ignore_errors=True)
    for folder, _, names in os.walk(ctx.cache):
        for name in names:
            with open(os.path.join(folder, name), "rb") as f:
                f.read()
    first = check(scan([ctx.cache], ScanOptions(state="auto", workers=args.workers)), args.entries, "first scan", False)
    if first["files_read"] != args.entries:
        fail(f"the first scan read {first['files_read']} files, expected a full read of {args.entries}")
    settle = check(
        scan([ctx.cache], ScanOptions(state="auto", workers=args.workers)), args.entries, "second scan", False
    )
    print(
        f"first scan recorded {args.entries:,} files; the second re-read "
        f"{settle['files_seen'] - settle['files_reused']:,} racy file(s)"
    )


def methods(args, ctx):
    from cachedoctor.scan import ScanOptions, scan

    n, cache, w = args.entries, ctx.cache, args.workers

    def bare(_):
        seen = walk_ns["walk"](cache)
        if seen != n:
            fail(f"the bare walk saw {seen} files, expected {n}")

    def rescan(workers):
        return lambda _: check(scan([cache], ScanOptions(state="auto", workers=workers)), n, "rescan", True)

    exe = shutil.which("cachedoctor", path=os.path.dirname(sys.executable))
    cli = [exe] if exe else [sys.executable, "-m", "cachedoctor"]
    # The defaults are timed: no CACHEDOCTOR_* settings, the set's root as the working folder.
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEDOCTOR_")}
    out = [
        Method("bare", "bare os.scandir + stat walk", bare, items=n),
        Method("rescan_n", f"rescan, {w} workers", rescan(w), items=n),
        Method("rescan_1", "rescan, 1 worker", rescan(1), items=n),
    ]
    if not args.no_cli:
        out += [
            Method(
                "walk_proc",
                "bare walk in a fresh python",
                items=n,
                late=True,
                cwd=str(ctx.root),
                command=[sys.executable, "-c", WALK, cache],
            ),
            Method(
                "cli",
                "cachedoctor scan CACHE (state database, rescan)",
                items=n,
                late=True,
                cwd=str(ctx.root),
                command=[*cli, "scan", cache],
            ),
        ]
        os.environ.clear()
        os.environ.update(env)
    return out


def finish(args, ctx, figures):
    notes = []
    cli = figures.get("cli")
    if cli is not None:
        m = UNCHANGED.search(cli.get("stdout_head", "") + cli.get("stdout_tail", ""))
        if m is None or int(m.group(1)) != args.entries:
            notes.append(
                f"CLI: WARNING: its summary did not say all {args.entries:,} files were unchanged "
                f"({cli.get('stdout_tail', '')[-120:]!r}): its time may not be a rescan's"
            )
    return notes


#: The whole-process goal at this bench's size (``rescan_million_bench`` holds 1,000,000 files to 1.5x).
WHOLE_PROCESS_TARGET = 2.5


def goals(args, whole_process_target: float) -> list[Goal]:
    return [
        Goal("in-process rescan, W workers vs bare walk (seconds)", "rescan_n", "bare", 2.0, per="seconds"),
        Goal("in-process rescan, 1 worker vs bare walk (seconds)", "rescan_1", "bare", 2.0, per="seconds"),
        Goal(
            "whole process: cachedoctor scan (rescan) vs walk in a fresh python",
            "cli",
            "walk_proc",
            whole_process_target,
            per="seconds",
        ),
        Goal(
            "whole process: cachedoctor scan (rescan) vs in-process rescan", "cli", "rescan_1", per="seconds", info=True
        ),
    ]


BENCH = Bench(
    name="rescan_bench",
    title="cachedoctor rescan benchmark",
    schema="cachedoctor.bench.rescan/2",
    build=build,
    setup=setup,
    methods=methods,
    finish=finish,
    workers=True,
    cli=True,
    repeat=11,
    statistic="median",
    budget=120,
    alternate=True,
    options=[
        opt(
            "--files",
            "--entries",
            dest="entries",
            type=int,
            default=50_000,
            metavar="N",
            help="files in the cache (default 50000)",
        ),
        opt("--per-folder", type=int, default=1000, metavar="M", help="files per part_NNNN/ folder"),
    ],
    quick={"entries": 2000, "repeat": 3},
    describe=lambda a: {"entries": a.entries, "per_folder": a.per_folder, "version": 1},
    reusable=lambda a, root: count_files(root / "cache") == a.entries,
    kept_name=lambda a: f"rescan-{a.entries}-{a.per_folder}",
    goals=lambda a: goals(a, WHOLE_PROCESS_TARGET),
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCH))
