#!/usr/bin/env python3
"""Peak memory of a scan of many entries: does the scan stay flat as the cache grows?

Builds N small torch.save files ("metadata-sized": a few hundred bytes of tensor data, so the
scan's bookkeeping, not the data, is what is measured), spread over folders of ``--per-folder``
files, with one defect in every 100 (a cuda-tagged file) so findings accumulate as they would.
Each measurement runs in a fresh subprocess and reads its peak RSS (``ru_maxrss``):

- baseline: the interpreter with cachedoctor's scan modules imported, nothing scanned;
- scan: ``scan(folder)`` of all N files, one worker (in-process, so the peak is one process's).

Goal: at most 2 KB per entry above the baseline. Exit 2 only when it cannot run.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common

PROG = "memory_bench"
GOAL_BYTES_PER_ENTRY = 2048

_PROBE = """
import json, resource, sys, time
sys.path.insert(0, {repo!r})
from cachedoctor.scan import ScanOptions, scan
from cachedoctor.report import ScanReport
if {do_scan}:
    t0 = time.perf_counter()
    result = scan([{folder!r}], ScanOptions(workers=1))
    report = ScanReport(result)
    out = {{"files": result.stats.files_read, "findings": len(result.findings), "seconds": time.perf_counter() - t0}}
else:
    out = {{}}
out["maxrss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps(out))
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--entries", type=int, default=100_000, metavar="N", help="files in the cache (default 100000)")
    p.add_argument("--per-folder", type=int, default=1000, metavar="M", help="files per folder (default 1000)")
    p.add_argument("--dir", type=Path, metavar="DIR", help="build the cache under DIR (default: the system temp folder)")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the figures as JSON to FILE")
    p.add_argument("--build-into", type=Path, help=argparse.SUPPRESS)  # internal: build in a child process
    args = p.parse_args(argv)
    if args.entries < 1 or args.per_folder < 1:
        p.error("--entries and --per-folder must be at least 1")
    return args


def templates() -> tuple[list[bytes], bytes]:
    """A few healthy small latents (bare bf16 tensors, as SimpleTuner saves them) and one
    cuda-tagged one, as bytes; files are written by copying these (fast for 100,000 files)."""
    import torch

    sys.path.insert(0, str(_common.REPO / "tests"))
    from factories import saved_on

    healthy = []
    for seed in range(8):
        buf = io.BytesIO()
        torch.save(torch.randn(4, 8, 8, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16), buf)
        healthy.append(buf.getvalue())
    buf = io.BytesIO()
    with saved_on("cuda:0"):
        torch.save(torch.zeros(4, 8, 8, dtype=torch.bfloat16), buf)
    return healthy, buf.getvalue()


def build(root: Path, entries: int, per_folder: int) -> int:
    healthy, tagged = templates()
    size = 0
    for i in range(entries):
        folder = root / f"part_{i // per_folder:04d}"
        if i % per_folder == 0:
            folder.mkdir(parents=True)
        data = tagged if i % 100 == 99 else healthy[i % len(healthy)]
        (folder / f"{i:07d}.pt").write_bytes(data)
        size += len(data)
    return size


def probe(folder: Path | None) -> dict:
    code = _PROBE.format(repo=str(_common.REPO), do_scan=folder is not None, folder=str(folder or ""))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        _common.fail(PROG, f"the probe failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}")
    return json.loads(proc.stdout)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.build_into:
        print(build(args.build_into, args.entries, args.per_folder))
        return 0
    work = Path(tempfile.mkdtemp(prefix="cachedoctor-memory-bench-", dir=args.dir))
    try:
        t0 = time.perf_counter()
        # Built by a child: torch imported here would raise every later child's peak RSS (a forked
        # child starts with its parent's high-water mark).
        child = subprocess.run([sys.executable, __file__, "--entries", str(args.entries), "--per-folder",
                                str(args.per_folder), "--build-into", str(work / "cache")], capture_output=True, text=True)
        if child.returncode != 0:
            _common.fail(PROG, f"cannot build the cache: {child.stderr.strip()}")
        nbytes = int(child.stdout.split()[-1])
        print(f"cache: {args.entries:,} files in {-(-args.entries // args.per_folder)} folders, {nbytes / 1e6:.1f} MB, "
              f"one cuda-tagged file in 100, built in {time.perf_counter() - t0:.1f} s")
        base = probe(None)
        run = probe(work / "cache")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if run["files"] != args.entries or run["findings"] != args.entries // 100:
        _common.fail(PROG, f"the scan read {run['files']} files with {run['findings']} findings; expected "
                           f"{args.entries} and {args.entries // 100}")
    extra = (run["maxrss_kb"] - base["maxrss_kb"]) * 1024
    per_entry = extra / args.entries
    print(f"peak RSS: baseline {base['maxrss_kb'] / 1024:.1f} MiB (interpreter + cachedoctor), "
          f"scan {run['maxrss_kb'] / 1024:.1f} MiB, scan time {run['seconds']:.1f} s")
    verdict = "PASS" if per_entry <= GOAL_BYTES_PER_ENTRY else "FAIL"
    print(f"goal: at most {GOAL_BYTES_PER_ENTRY} bytes per entry above the baseline: {per_entry:,.0f} bytes  {verdict}")
    if args.json:
        args.json.write_text(json.dumps({"schema": "cachedoctor.bench.memory/1", "entries": args.entries,
                                         "baseline_kb": base["maxrss_kb"], "scan_kb": run["maxrss_kb"],
                                         "bytes_per_entry": per_entry, "seconds": run["seconds"]}, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
