#!/usr/bin/env python3
"""Resource bombs: how long does read_file take on each, and how much memory does it add?

Builds every bomb of ``tests/exploits.py`` (``BOMBS``: a 2**60-path tuple DAG, as a persistent
id and as an object, 1,000,000 nested lists, a 10,000,000-item list, a 2,000,000-item dict, a
200 MB string, 100,000 memo PUTs, 1,000,000 nested TUPLE1) in each container (the data.pkl of
an otherwise valid torch archive, a plain pickle named ``x.pt``, one named ``x.bin``) in a temp
folder, then reads each file with ``cachedoctor.formats.read_file`` in a fresh process under
RLIMIT_CPU and RLIMIT_AS (a bomb that goes off is reported, it does not hang the run):

- time: the wall time of the ``read_file`` call alone;
- memory: the process's peak RSS (``VmHWM``, else ``ru_maxrss``) after the call minus before it.

Goal per file: under 1 s and under 100 MB extra. The files are built by a child process: torch
imported here would raise every measuring child's peak RSS. Exit 2 only when it cannot run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common

PROG = "bomb_bench"
GOAL_SECONDS = 1.0
GOAL_EXTRA_BYTES = 100 * 1024 * 1024

_MEASURE = r"""
import json, resource, sys, time
cpu, mem, deep = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
sys.path.insert(0, sys.argv[5])

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
    outcome = "no format" if meta is None else (
        f"{meta.format}, {len(meta.foreign_globals)} foreign global(s)" if meta.foreign_globals else f"{meta.format}, read")
except ReadError as exc:
    outcome = f"ReadError {exc.problem}"
except MemoryError:
    outcome = "MemoryError"
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "before_kb": before, "after_kb": peak_kb(), "outcome": outcome}))
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--only", action="append", metavar="BOMB", help="measure this bomb only (repeatable)")
    p.add_argument("--container", action="append", metavar="KIND",
                   help="torch-zip, plain-pt or plain-bin (repeatable; default all three)")
    p.add_argument("--deep", action="store_true", help="read_file(deep=True) instead of a quick read")
    p.add_argument("--cpu-limit", type=int, default=60, metavar="S", help="RLIMIT_CPU of each reader (default 60)")
    p.add_argument("--mem-limit", type=float, default=4.0, metavar="GIB", help="RLIMIT_AS of each reader (default 4)")
    p.add_argument("--dir", type=Path, metavar="DIR", help="build the files under DIR (default: the system temp folder)")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the figures as JSON to FILE")
    p.add_argument("--build-into", type=Path, help=argparse.SUPPRESS)  # internal: build in a child process
    args = p.parse_args(argv)
    if args.cpu_limit < 1 or args.mem_limit <= 0:
        p.error("--cpu-limit and --mem-limit must be positive")
    return args


def build(root: Path, bombs: list[str], containers: list[str]) -> list[dict]:
    """In the child: write every (bomb, container) file; return where each one went."""
    sys.path.insert(0, str(_common.REPO / "tests"))
    from exploits import write_bomb

    made = []
    for bomb in bombs:
        for container in containers:
            path = write_bomb(bomb, container, root / f"{bomb}-{container}")
            made.append({"bomb": bomb, "container": container, "path": str(path), "bytes": path.stat().st_size})
    return made


def measure(path: str, args: argparse.Namespace) -> dict:
    code = [sys.executable, "-c", _MEASURE, path, str(args.cpu_limit), str(int(args.mem_limit * 2 ** 30)),
            "1" if args.deep else "0", str(_common.REPO)]
    t0 = time.perf_counter()
    proc = subprocess.run(code, capture_output=True, text=True, cwd=os.path.dirname(path))
    wall = time.perf_counter() - t0
    if proc.returncode == 0:
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        row["extra_bytes"] = max(0, row["after_kb"] - row["before_kb"]) * 1024
        return row
    if proc.returncode == -24:
        outcome = f"killed: over {args.cpu_limit} s of CPU"
    elif proc.returncode < 0:
        outcome = f"killed by signal {-proc.returncode}"
    else:
        last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
        outcome = f"crashed: {last[:60]}"
    return {"seconds": wall, "extra_bytes": None, "outcome": outcome}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    containers = args.container or ["torch-zip", "plain-pt", "plain-bin"]
    if args.build_into:  # the child: names were checked by the parent
        print(json.dumps(build(args.build_into, args.only, containers)))
        return 0
    bombs_text = _bomb_names()
    bombs = args.only or list(bombs_text)
    unknown = [b for b in bombs if b not in bombs_text] + [c for c in containers if c not in ("torch-zip", "plain-pt", "plain-bin")]
    if unknown:
        _common.fail(PROG, f"unknown bomb or container: {', '.join(unknown)} (bombs: {', '.join(bombs_text)})")

    work = Path(tempfile.mkdtemp(prefix="cachedoctor-bomb-bench-", dir=args.dir))
    rows = []
    try:
        t0 = time.perf_counter()
        child = subprocess.run([sys.executable, __file__, "--build-into", str(work)]
                               + [a for b in bombs for a in ("--only", b)] + [a for c in containers for a in ("--container", c)],
                               capture_output=True, text=True)
        if child.returncode != 0:
            _common.fail(PROG, f"cannot build the bombs: {child.stderr.strip()[-500:]}")
        made = json.loads(child.stdout.strip().splitlines()[-1])
        print(f"{len(made)} files built in {time.perf_counter() - t0:.1f} s under {work}; "
              f"read_file(deep={args.deep}) in a fresh process each, RLIMIT_CPU {args.cpu_limit} s, "
              f"RLIMIT_AS {args.mem_limit:g} GiB")
        print()
        print(f"{'bomb':<15} {'container':<10} {'file':>10} {'read_file':>10} {'peak RSS +':>11}  {'outcome':<42} goal")
        for item in made:
            row = {**item, **measure(item["path"], args)}
            Path(item["path"]).unlink()  # big-string is 200 MB a file
            extra = row["extra_bytes"]
            row["pass"] = extra is not None and row["seconds"] < GOAL_SECONDS and extra < GOAL_EXTRA_BYTES
            rows.append(row)
            extra_text = "-" if extra is None else f"{extra / 2 ** 20:.1f} MB"
            print(f"{row['bomb']:<15} {row['container']:<10} {_size(row['bytes']):>10} {row['seconds']:>9.3f}s "
                  f"{extra_text:>11}  {row['outcome'][:42]:<42} {'PASS' if row['pass'] else 'FAIL'}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    passed = sum(r["pass"] for r in rows)
    print()
    print(f"goal: read_file under {GOAL_SECONDS:g} s and under {GOAL_EXTRA_BYTES // 2 ** 20} MB extra peak RSS "
          f"for every bomb: {passed}/{len(rows)} PASS")
    if args.json:
        doc = {"schema": "cachedoctor.bench.bombs/1", "deep": args.deep, "machine": _common.machine(),
               "goal": {"seconds": GOAL_SECONDS, "extra_bytes": GOAL_EXTRA_BYTES},
               "rows": [{k: v for k, v in r.items() if k != "path"} for r in rows]}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"figures written to {args.json}")
    return 0


def _bomb_names() -> dict[str, str]:
    """``exploits.BOMBS`` without importing exploits here (it imports torch): read in a child."""
    code = f"import sys; sys.path.insert(0, {str(_common.REPO / 'tests')!r}); import json, exploits; print(json.dumps(exploits.BOMBS))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        _common.fail(PROG, f"cannot import tests/exploits.py: {proc.stderr.strip()[-300:]}")
    return json.loads(proc.stdout)


def _size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


if __name__ == "__main__":
    raise SystemExit(main())
