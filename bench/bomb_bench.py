#!/usr/bin/env python3
"""Resource bombs (bench/README.md): every bomb of ``fixtures/builders/bombs.py`` in each container (the
data.pkl of a torch archive, plain pickles named x.pt and x.bin), each read with ``read_file``
in a fresh process under RLIMIT_CPU and RLIMIT_AS. Goal per file: under 1 s, under 100 MB of
extra peak RSS."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import runner
from runner import Bench, Goal, Method, fail, opt

CONTAINERS = ("torch-zip", "plain-pt", "plain-bin")
MEASURE = r"""
import json, resource, sys, time
cpu, mem, deep = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
def peak_kb():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
from cachedoctor.formats import ReadError, read_file
before = peak_kb()
t0 = time.perf_counter()
try:
    meta = read_file(sys.argv[1], deep=deep)
    outcome = "no format" if meta is None else f"{meta.format}, {len(meta.foreign_globals)} foreign global(s)"
except ReadError as exc:
    outcome = f"ReadError {exc.problem}"
except MemoryError:
    outcome = "MemoryError"
print(json.dumps({"read_seconds": time.perf_counter() - t0, "extra_bytes": max(0, peak_kb() - before) * 1024,
                  "outcome": outcome}))
"""
# The bombs are built by fixtures/builders/bombs.py in a child process (with the repository on its
# PYTHONPATH): this process never imports torch, which would raise every measuring child's peak RSS.
BUILD = r"""
import json, sys
from pathlib import Path
from fixtures.builders.bombs import BOMBS, write_bomb
root, bombs, containers = Path(sys.argv[1]), sys.argv[2].split(",") if sys.argv[2] else list(BOMBS), sys.argv[3].split(",")
made = []
for bomb in bombs:
    for container in containers:
        path = write_bomb(bomb, container, root / f"{bomb}-{container}")
        made.append({"bomb": bomb, "container": container, "path": str(path), "bytes": path.stat().st_size})
print(json.dumps(made))
"""


def child_env():
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(runner.REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }


def build(args, root):
    proc = subprocess.run(
        [sys.executable, "-c", BUILD, str(root), ",".join(args.only or []), ",".join(args.container or CONTAINERS)],
        capture_output=True,
        text=True,
        env=child_env(),
    )
    if proc.returncode:
        fail(f"cannot build the bombs: {proc.stderr.strip()[-400:]}")
    return {"files": json.loads(proc.stdout.strip().splitlines()[-1])}


def methods(args, ctx):
    limits = [str(args.cpu_limit), str(int(args.mem_limit * 2**30)), "1" if args.deep else "0"]
    return [
        Method(
            f"{f['bomb']}-{f['container']}",
            f"{f['bomb']} in {f['container']} ({f['bytes']:,} bytes)",
            command=[sys.executable, "-c", MEASURE, f["path"], *limits],
            items=1,
            cwd=os.path.dirname(f["path"]),
        )
        for f in ctx.facts["files"]
    ]


def worst(key):
    def value(figures):
        values = [f.get(key) for f in figures.values()]
        return None if any(v is None for v in values) else max(values)  # a killed reader has no figure: FAIL

    return value


def finish(args, ctx, figures):
    return [
        f"{f['label']}: the reader did not finish (exit {f.get('exit_code')}): {f.get('stderr_tail', '')}"
        for f in figures.values()
        if "read_seconds" not in f
    ]


BENCH = Bench(
    name="bomb_bench",
    title="cachedoctor resource-bomb benchmark",
    schema="cachedoctor.bench.bombs/2",
    build=build,
    methods=methods,
    finish=finish,
    repeat=1,
    statistic="best",
    budget=600,
    options=[
        opt("--only", action="append", metavar="BOMB", help="this bomb only (repeatable)"),
        opt("--container", action="append", choices=CONTAINERS, help="this container only (repeatable)"),
        opt("--deep", action="store_true", help="read_file(deep=True) instead of a quick read"),
        opt("--cpu-limit", type=int, default=60, metavar="S", help="RLIMIT_CPU of each reader (default 60)"),
        opt("--mem-limit", type=float, default=4.0, metavar="GIB", help="RLIMIT_AS of each reader (default 4)"),
    ],
    quick={"container": ["plain-pt"]},
    detail=lambda f: (
        f"read_file {f['read_seconds']:.3f} s, +{f['extra_bytes'] / 2**20:.1f} MB: {f['outcome']}"
        if "read_seconds" in f
        else "did not finish"
    ),
    goals=[
        Goal("slowest read_file of a bomb, seconds", value=worst("read_seconds"), target=1.0, unit=" s"),
        Goal(
            "largest extra peak RSS of a bomb, MB",
            value=lambda fs: None if worst("extra_bytes")(fs) is None else worst("extra_bytes")(fs) / 2**20,
            target=100,
            unit=" MB",
        ),
    ],
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCH))
