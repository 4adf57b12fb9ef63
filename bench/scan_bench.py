#!/usr/bin/env python3
"""Speed benchmark: cachedoctor scans against the loops a user would otherwise write.

One run builds (or reuses) a folder of torch.save'd latents, warms the OS page cache, times
every method over the same file list (best of ``--repeat``) and prints a table of figures with
the speed goals marked PASS/FAIL. The goals live here, never in the tests; the script exits 0
whatever they say (it exits 2 only when it cannot run at all).

    python bench/scan_bench.py                     # 5,000 fp32 files in a temp folder
    python bench/scan_bench.py --files 2000 --json bench/out/figures.json
    python bench/scan_bench.py --baselines-only    # torch.load / zip / read loops only
    python bench/scan_bench.py --keep              # keep the set in bench/out/ and reuse it

See bench/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Callable, NoReturn

import _common

REPO = _common.REPO
SHAPE = (16, 128, 128)
NAME_FMT = "latent_{:07d}.pt"
NAME_RE = re.compile(r"latent_\d{7}\.pt")
MB = 1_000_000  # figures are in decimal megabytes

# The goals. Each: (label, numerator method, denominator method, unit, minimum ratio).
GOALS = [
    ("quick scan, 1 worker  vs torch.load loop", "quick_1", "torch_load", "files/s", 5.0),
    ("quick scan, 1 worker  vs central-dir loop", "quick_1", "zip_infolist", "files/s", 0.6),
    ("deep scan, 1 worker   vs plain read loop", "deep_1", "read", "bytes/s", 0.5),
]
# Shown next to the goals for information only (not PASS/FAIL).
INFO_RATIOS = [
    ("quick scan, N workers vs torch.load loop", "quick_n", "torch_load", "files/s"),
    ("quick scan, N workers vs central-dir loop", "quick_n", "zip_infolist", "files/s"),
    ("deep scan, N workers  vs plain read loop", "deep_n", "read", "bytes/s"),
]


# --------------------------------------------------------------------------- arguments


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Benchmark cachedoctor scans against torch.load, zipfile and plain-read loops.")
    p.add_argument("--files", type=int, default=5000, metavar="N",
                   help="number of latent files in the set (default 5000)")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                   help="dtype of the 16x128x128 latents: fp32 ~1.05 MB/file (default), bf16 ~0.52 MB/file")
    p.add_argument("--dir", type=Path, metavar="DIR",
                   help="build the set in DIR, or reuse the one already there (never deleted)")
    p.add_argument("--keep", action="store_true",
                   help="keep the generated set; without --dir it goes to bench/out/latents-<dtype>-<N> "
                        "and later --keep runs reuse it")
    p.add_argument("--repeat", type=int, default=3, metavar="K",
                   help="time every method K times and report the best (default 3)")
    p.add_argument("--torch-load-files", type=int, default=1000, metavar="M",
                   help="time the torch.load loop on the first M files only (default 1000; 0 = all)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, metavar="W",
                   help="worker count of the 'all workers' scans (default os.cpu_count() = %(default)s)")
    p.add_argument("--pool", type=int, default=8, metavar="P",
                   help="distinct random tensors used to generate the set (default 8)")
    p.add_argument("--budget", type=float, default=150.0, metavar="SECONDS",
                   help="stop repeating once another round would end past this many seconds of "
                        "timing (default 150; at least one round always runs)")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the figures as JSON to FILE")
    p.add_argument("--baselines-only", action="store_true",
                   help="time only the torch.load, central-directory and plain-read loops "
                        "(cachedoctor is not imported)")
    args = p.parse_args(argv)
    _common.at_least(p, args, files=1, repeat=1, workers=1, pool=1)
    if args.torch_load_files < 0:
        p.error("--torch-load-files must be 0 (all) or more")
    return args


def fail(message: str) -> NoReturn:
    _common.fail("scan_bench", message)


# --------------------------------------------------------------------------- cachedoctor (lazy)


def load_scan_api():
    """Import cachedoctor's scan API only now, so ``--baselines-only`` never needs it."""
    def load():
        from cachedoctor.scan import ScanOptions, scan
        return scan, ScanOptions

    return _common.import_cachedoctor(load, "scan_bench", "the scan API (from cachedoctor.scan import scan, "
                                      "ScanOptions); run with --baselines-only to time the baseline loops alone")


# --------------------------------------------------------------------------- the file set


def expected_file_size(torch, pool_tensor) -> int:
    """Byte size of one file of the set (all have the same: same name length, same tensor)."""
    with tempfile.TemporaryDirectory(prefix="cachedoctor-bench-probe-") as tmp:
        probe = Path(tmp) / NAME_FMT.format(0)
        torch.save(pool_tensor, probe)
        return probe.stat().st_size


def make_pool(torch, size: int, dtype_name: str) -> list:
    gen = torch.Generator().manual_seed(20240601)
    dtype = torch.float32 if dtype_name == "fp32" else torch.bfloat16
    return [torch.randn(*SHAPE, generator=gen).to(dtype) for _ in range(size)]


def prepare_set(args, torch) -> tuple[Path, list[Path], dict]:
    """Create (or reuse) the set; return its folder, its sorted files and what was done."""
    folder, origin = _common.set_root(args, f"latents-{args.dtype}-{args.files}", "cachedoctor-bench-")
    folder.mkdir(parents=True, exist_ok=True)

    # The scans take the whole folder, so it must hold the set and nothing else.
    foreign = sorted(e.name for e in os.scandir(folder) if not (e.is_file() and NAME_RE.fullmatch(e.name)))
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        fail(f"{folder} holds entries that are not part of a benchmark set ({len(foreign)}: {shown}); "
             f"the scans would read them too. Use an empty or benchmark-only folder.")

    pool = make_pool(torch, args.pool, args.dtype)
    size = expected_file_size(torch, pool[0])
    files = [folder / NAME_FMT.format(i) for i in range(args.files)]
    wanted = {p.name for p in files}

    # Files of a larger earlier set (other --files) would be scanned too: remove them.
    extra = [folder / name for name in os.listdir(folder) if name not in wanted]
    for p in extra:
        p.unlink()

    todo = []
    for p in files:
        try:
            ok = p.stat().st_size == size
        except FileNotFoundError:
            ok = False
        if not ok:
            todo.append(p)

    need = len(todo) * size
    free = shutil.disk_usage(folder).free
    if need > free * 0.95:
        fail(f"building the set needs {need / 1e9:.2f} GB in {folder} but only {free / 1e9:.2f} GB is free; "
             f"use fewer --files, --dtype bf16 or another --dir")

    t0 = time.perf_counter()
    for p in todo:
        i = int(p.stem.split("_")[1])
        t = pool[i % len(pool)]
        # Make every file's tensor distinct (first and last element carry the index), so no
        # content-level de-duplication can shortcut the scan; costs nothing measurable.
        flat = t.view(-1)
        flat[0] = float(i)
        flat[-1] = -float(i)
        torch.save(t, p)
    gen_s = time.perf_counter() - t0

    info = {
        "folder": str(folder),
        "origin": origin,
        "generated": len(todo),
        "reused": args.files - len(todo),
        "removed_extra": len(extra),
        "generate_seconds": gen_s,
        "file_bytes": size,
        "total_bytes": size * args.files,
        "dtype": args.dtype,
        "shape": list(SHAPE),
        "pool": args.pool,
        "deleted_at_end": origin == "temp" and not args.keep,
    }
    return folder, files, info


# --------------------------------------------------------------------------- the methods


def warm_up(files: list[Path]) -> tuple[int, float]:
    t0 = time.perf_counter()
    total = 0
    for p in files:
        with open(p, "rb") as f:
            while chunk := f.read(1 << 22):
                total += len(chunk)
    return total, time.perf_counter() - t0


def method_torch_load(torch, files):
    def run():
        for p in files:
            torch.load(p, weights_only=True, map_location="cpu")
        return {}
    return run


def method_zip_infolist(files):
    def run():
        members = 0
        for p in files:
            with zipfile.ZipFile(p) as z:
                members += len(z.infolist())
        return {"members": members}
    return run


def method_read(files):
    def run():
        total = 0
        for p in files:
            with open(p, "rb") as f:
                total += len(f.read())
        return {"bytes_read": total}
    return run


def method_scan(scan, ScanOptions, folder: Path, *, deep: bool, workers: int):
    def run():
        return _common.scan_summary(scan([str(folder)], ScanOptions(deep=deep, workers=workers)))
    return run


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    wall0 = time.perf_counter()

    scan = ScanOptions = None
    if not args.baselines_only:
        scan, ScanOptions = load_scan_api()  # fail before spending minutes on the set

    import torch

    torch.set_num_threads(1)  # the baseline loops are single-threaded, like a 1-worker scan

    folder, files, info = prepare_set(args, torch)
    n = len(files)
    total_bytes = info["total_bytes"]
    try:
        print(f"cachedoctor scan benchmark  (python {platform.python_version()}, torch {torch.__version__}, "
              f"{os.cpu_count()} CPUs, {platform.system()} {platform.machine()})")
        print(f"set: {n:,} files of torch.save(torch.randn{SHAPE}) in {info['dtype']} "
              f"({'1' if info['dtype'] == 'fp32' else 'half a'} MiB of tensor data each), "
              f"{info['file_bytes']:,} bytes per file, total {total_bytes:,} bytes ({total_bytes / 1e9:.2f} GB)")
        print(f"     values from a pool of {info['pool']} random tensors, each file made distinct "
              f"(its index in the first and last element); folder {folder}")
        if info["generated"]:
            g = info["generated"]
            print(f"     generated {g:,} files in {info['generate_seconds']:.1f} s "
                  f"({g / max(info['generate_seconds'], 1e-9):,.0f} files/s)"
                  + (f", reused {info['reused']:,}" if info["reused"] else ""))
        else:
            print(f"     reused all {n:,} files already there (nothing generated)")
        if info["removed_extra"]:
            print(f"     removed {info['removed_extra']:,} files of an earlier, larger set")

        avail = _mem_available()
        warm_bytes, warm_s = warm_up(files)
        print(f"warm-up: read every file once before timing ({warm_bytes / 1e9:.2f} GB in {warm_s:.1f} s), "
              f"so every method sees the same warm OS page cache")
        if avail is not None and total_bytes > 0.8 * avail:
            print(f"     WARNING: the set ({total_bytes / 1e9:.1f} GB) may not fit in the page cache "
                  f"({avail / 1e9:.1f} GB available): figures include disk reads")

        tl_n = n if args.torch_load_files == 0 else min(args.torch_load_files, n)
        tl_files = files[:tl_n]
        methods: list[tuple[str, str, list[Path], Callable[[], dict]]] = []

        def scans(mode: str, deep: bool) -> list[tuple[str, str, list[Path], Callable[[], dict]]]:
            if args.baselines_only:
                return []
            return [(f"{mode}_{tag}", f"cachedoctor {mode} scan, {label}", files,
                     method_scan(scan, ScanOptions, folder, deep=deep, workers=workers))
                    for tag, label, workers in (("1", "1 worker", 1), ("n", f"{args.workers} workers", args.workers))]

        methods += scans("quick", deep=False)
        methods += [
            ("torch_load", "torch.load(weights_only=True) loop", tl_files, method_torch_load(torch, tl_files)),
            ("zip_infolist", "zipfile.ZipFile().infolist() loop", files, method_zip_infolist(files)),
        ]
        methods += scans("deep", deep=True)
        methods += [("read", "open(p, 'rb').read() loop", files, method_read(files))]

        # Rounds: every method once per round, so slow drift of the machine hits all alike.
        times: dict[str, list[float]] = {key: [] for key, *_ in methods}
        extras: dict[str, dict] = {}
        t_timing = time.perf_counter()
        rounds, stopped_early = _common.run_rounds([(key, fn) for key, _, _, fn in methods], times, extras,
                                                   args.repeat, args.budget)

        figures = {}
        for key, label, mfiles, _ in methods:
            best = min(times[key])
            nbytes = len(mfiles) * info["file_bytes"]
            figures[key] = {
                "label": label,
                "files": len(mfiles),
                "bytes": nbytes,
                "seconds_best": best,
                "seconds_all": times[key],
                "files_per_s": len(mfiles) / best,
                "bytes_per_s": nbytes / best,
                "mb_per_s": nbytes / best / MB,
                **extras[key],
            }

        # ---- the table
        print()
        print(f"figures: best of {rounds} round(s); MB = 10^6 bytes of file size covered per second")
        head = f"{'method':<40} {'files':>7} {'best s':>8} {'files/s':>10} {'MB/s':>9}"
        print(head)
        print("-" * len(head))
        for key, label, _, _ in methods:
            f = figures[key]
            print(f"{label:<40} {f['files']:>7,} {f['seconds_best']:>8.3f} {f['files_per_s']:>10,.0f} "
                  f"{f['mb_per_s']:>9,.0f}")
        notes = []
        if tl_n < n:
            notes.append(f"torch.load loop timed on the first {tl_n:,} of the {n:,} files "
                         f"(--torch-load-files); its rates are per file, so they compare directly")
        for key in ("quick_1", "quick_n", "deep_1", "deep_n"):
            if key in figures:
                f = figures[key]
                if f["files_read"] != n:
                    notes.append(f"{f['label']}: result.stats.files_read = {f['files_read']:,}, expected {n:,}")
                if f["errors"]:
                    notes.append(f"{f['label']}: {f['errors']:,} scan errors (result.errors)")
                if f["findings"]:
                    kinds = ", ".join(f"{k} x{v}" for k, v in f["finding_kinds"].items())
                    notes.append(f"{f['label']}: {f['findings']:,} findings on a clean set ({kinds})")
        for note in notes:
            print(f"note: {note}")

        # ---- the goals
        print()
        goal_rows = []
        print(f"{'goal':<52} {'ratio':>8} {'target':>9}  result")
        for label, a, b, unit, target in GOALS:
            if a in figures and b in figures:
                ratio = figures[a][unit.replace("/", "_per_")] / figures[b][unit.replace("/", "_per_")]
                ok = ratio >= target
                print(f"{label + f' ({unit})':<52} {ratio:>7.2f}x {'>= ' + f'{target:g}x':>9}  {'PASS' if ok else 'FAIL'}")
                goal_rows.append({"goal": label, "unit": unit, "ratio": ratio, "target": target,
                                  "result": "PASS" if ok else "FAIL"})
            else:
                print(f"{label + f' ({unit})':<52} {'n/a':>8} {'>= ' + f'{target:g}x':>9}  SKIP (scan not run)")
                goal_rows.append({"goal": label, "unit": unit, "ratio": None, "target": target,
                                  "result": "SKIP"})
        info_rows = []
        for label, a, b, unit in INFO_RATIOS:
            if a in figures and b in figures:
                ratio = figures[a][unit.replace("/", "_per_")] / figures[b][unit.replace("/", "_per_")]
                print(f"{label + f' ({unit})':<52} {ratio:>7.2f}x {'':>9}  (info)")
                info_rows.append({"ratio_of": label, "unit": unit, "ratio": ratio})

        total_s = _common.print_total(wall0, t_timing, info['generate_seconds'], warm_s)

        if args.json:
            doc = {
                "schema": "cachedoctor.bench.scan/1",
                "argv": sys.argv[1:] if argv is None else argv,
                "machine": _common.machine(torch=torch.__version__),
                "set": {**info, "files": n},
                "warm_up": {"bytes": warm_bytes, "seconds": warm_s},
                "repeat": args.repeat, "rounds": rounds, "stopped_early": stopped_early,
                "torch_load_files": tl_n, "workers": args.workers,
                "figures": figures, "goals": goal_rows, "info_ratios": info_rows, "notes": notes,
                "total_seconds": total_s,
            }
            _common.write_figures(args.json, doc)
    finally:
        _common.release_set(folder, info["deleted_at_end"], args.dir is not None)
    return 0  # goals are reported, never enforced by the exit status


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


if __name__ == "__main__":
    sys.exit(main())
