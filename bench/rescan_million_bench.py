#!/usr/bin/env python3
"""The rescan benchmark at a million files (bench/README.md): the same set, methods and checks as
``rescan_bench.py``, one million metadata-sized files in folders of 1,000, with the whole-process
goal a cache of that size must meet, 1.5x the bare walk in a fresh Python (at that size the
interpreter's start-up is noise: what is judged is the per-file cost of a rescan against one
``stat`` a file). Fewer rounds: a round times a million-file walk five times."""

from __future__ import annotations

import dataclasses
import sys

import rescan_bench
import runner

WHOLE_PROCESS_TARGET = 1.5

BENCH = dataclasses.replace(
    rescan_bench.BENCH,
    name="rescan_million_bench",
    title="cachedoctor rescan benchmark, 1,000,000 files",
    schema="cachedoctor.bench.rescan_million/2",
    repeat=3,
    budget=300,
    goals=lambda a: rescan_bench.goals(a, WHOLE_PROCESS_TARGET),
    options=[
        runner.opt(
            "--files",
            "--entries",
            dest="entries",
            type=int,
            default=1_000_000,
            metavar="N",
            help="files in the cache (default 1000000)",
        ),
        runner.opt("--per-folder", type=int, default=1000, metavar="M", help="files per part_NNNN/ folder"),
    ],
    quick={"entries": 5000, "repeat": 1},
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCH))
