#!/usr/bin/env python3
"""Speed benchmark: the dataset comparison (SimpleTuner layout) against the cache-only scan.

One run builds (or reuses) a SimpleTuner checkout-like folder of N images with their VAE and
text-embed caches, checks that the dataset scan finds nothing on this healthy set, warms the
OS page cache, times every method over the same folders (best of ``--repeat``) and prints a
table with the goal marked PASS/FAIL:

    dataset comparison (plan_for + scan with the plan), 1 worker
        <= 1.5 x  the cache-only scan of the same cache folders, 1 worker

The goal lives here, never in the tests; the script exits 0 whatever it says (it exits 2
only when it cannot run at all, or when the healthy set does not scan clean).

    python bench/dataset_bench.py                       # 5,000 images in a temp folder
    python bench/dataset_bench.py --images 1000 --json bench/out/dataset.json
    python bench/dataset_bench.py --keep                # keep the set in bench/out/ and reuse it

See bench/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, NoReturn

import _common

REPO = _common.REPO
SCHEMA = "cachedoctor.bench.dataset/1"
SET_VERSION = 1  # bump when the generated layout changes, so kept sets are rebuilt
MARKER = "bench-set.json"
OWN_ENTRIES = ("datasets", "config", "output", MARKER)  # all the set writes at its root
DATASET_ID = "photos"
FAMILY = "sdxl"
# Aspect buckets: (width, height) of the images, which are also the bucket's target size.
BUCKETS = ((64, 64), (96, 64), (64, 96))
SUBJECTS = ("cat", "dog", "lighthouse", "teapot", "bicycle", "forest", "harbour", "violin")
IMAGE_POOL = 4  # distinct encoded images per (bucket, format); only headers are ever read

GOAL_LABEL = "dataset scan, 1 worker  vs cache-only scan, 1 worker"
GOAL_MAX = 1.5


# --------------------------------------------------------------------------- arguments


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Benchmark the SimpleTuner dataset comparison against the cache-only scan.")
    p.add_argument("--images", type=int, default=5000, metavar="N",
                   help="images in the synthetic SimpleTuner dataset (default 5000)")
    p.add_argument("--per-folder", type=int, default=1000, metavar="M",
                   help="images per dataset subfolder part_NNN/ (default 1000)")
    _common.add_set_options(p, set_dir="simpletuner-<N>", repeat=3, statistic="best", budget=150.0,
                            cli_rows="rows that time the `cachedoctor scan` command line")
    args = p.parse_args(argv)
    _common.at_least(p, args, images=1, per_folder=1, repeat=1, workers=1)
    return args


def fail(message: str) -> NoReturn:
    _common.fail("dataset_bench", message)


# --------------------------------------------------------------------------- cachedoctor


def load_api() -> dict[str, Any]:
    """cachedoctor's scan and layout API; falls back to the checkout's package if not installed."""
    def load() -> dict[str, Any]:
        from cachedoctor.layouts import LayoutName, LayoutOptions, plan_for
        from cachedoctor.scan import ScanOptions, scan
        return {"scan": scan, "ScanOptions": ScanOptions, "plan_for": plan_for,
                "LayoutName": LayoutName, "LayoutOptions": LayoutOptions}

    return _common.import_cachedoctor(load, "dataset_bench", "cachedoctor's scan and layout API "
                                      "(cachedoctor.scan.scan, cachedoctor.layouts.plan_for)")


# --------------------------------------------------------------------------- the set


class Layout:
    """Paths of the SimpleTuner checkout-like set under ``root``."""

    def __init__(self, root: Path, images: int, per_folder: int) -> None:
        self.root = root
        self.n = images
        self.per_folder = per_folder
        self.data = root / "datasets" / DATASET_ID
        self.config_dir = root / "config"
        self.config = self.config_dir / "multidatabackend.json"
        self.vae = root / "output" / "cache" / "vae" / FAMILY / DATASET_ID
        self.text = root / "output" / "cache" / "text" / FAMILY

    def item(self, i: int) -> tuple[str, str, tuple[int, int], str]:
        """``(subfolder, file name, (width, height), caption)`` of image ``i``."""
        w, h = BUCKETS[i % len(BUCKETS)]
        ext = ".png" if i % 2 == 0 else ".jpg"
        sub = f"part_{i // self.per_folder:03d}"
        caption = f"a photo number {i} of a {SUBJECTS[i % len(SUBJECTS)]}"
        return sub, f"img_{i:06d}{ext}", (w, h), caption

    def image_paths(self) -> list[str]:
        return [str(self.data / sub / name) for sub, name, _, _ in map(self.item, range(self.n))]

    def marker(self) -> dict[str, Any]:
        return {"version": SET_VERSION, "images": self.n, "per_folder": self.per_folder,
                "root": str(self.root), "buckets": [list(b) for b in BUCKETS], "model_family": FAMILY}


def _bucket_key(w: int, h: int) -> str:
    return str(round(w / h, 2))


def _encoded_images() -> dict[tuple[tuple[int, int], str], list[bytes]]:
    """A few small real PNG and JPEG files per bucket, encoded once."""
    from PIL import Image

    rng = random.Random(20240601)
    pool: dict[tuple[tuple[int, int], str], list[bytes]] = {}
    for w, h in BUCKETS:
        for ext, fmt in ((".png", "PNG"), (".jpg", "JPEG")):
            blobs = []
            for _ in range(IMAGE_POOL):
                base = tuple(rng.randrange(256) for _ in range(3))
                img = Image.new("RGB", (w, h), base)
                px = img.load()
                for y in range(h):
                    for x in range(w):
                        px[x, y] = ((base[0] + 3 * x) % 256, (base[1] + 3 * y) % 256, (base[2] + x * y) % 256)
                buf = io.BytesIO()
                img.save(buf, fmt)
                blobs.append(buf.getvalue())
            pool[((w, h), ext)] = blobs
    return pool


def _torch_bytes(torch, obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _count_files(folder: Path) -> int:
    n = 0
    for _, _, files in os.walk(folder):
        n += len(files)
    return n


def _set_is_complete(lay: Layout) -> bool:
    """Cheap reuse check: the marker matches and each part holds the expected number of files."""
    try:
        if json.loads((lay.root / MARKER).read_text()) != lay.marker():
            return False
    except (OSError, ValueError):
        return False
    return (lay.config.is_file() and _count_files(lay.data) == 2 * lay.n + 2
            and _count_files(lay.vae) == lay.n and _count_files(lay.text) == lay.n + 1)


def generate(lay: Layout) -> float:
    """Write the set; sources (images, captions, metadata) before caches, so no entry is stale."""
    import torch

    t0 = time.perf_counter()
    for name in OWN_ENTRIES:
        path = lay.root / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()

    pool = _encoded_images()
    metadata: dict[str, dict[str, Any]] = {}
    indices: dict[str, list[str]] = {}
    items = [lay.item(i) for i in range(lay.n)]
    for i, (sub, name, (w, h), caption) in enumerate(items):
        folder = lay.data / sub
        if i % lay.per_folder == 0:
            folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        path.write_bytes(pool[((w, h), path.suffix)][i % IMAGE_POOL])
        (folder / (path.stem + ".txt")).write_text(caption + "\n", encoding="utf-8")
        metadata[str(path)] = {"original_size": [w, h], "crop_coordinates": [0, 0], "target_size": [w, h],
                               "intermediary_size": [w, h], "aspect_ratio": round(w / h, 3), "luminance": 0.5}
        indices.setdefault(_bucket_key(w, h), []).append(str(path))
    (lay.data / f"aspect_ratio_bucket_metadata_{DATASET_ID}.json").write_text(json.dumps(metadata))
    (lay.data / f"aspect_ratio_bucket_indices_{DATASET_ID}.json").write_text(
        json.dumps({"config": {}, "aspect_ratio_bucket_indices": indices}))

    lay.config_dir.mkdir(parents=True, exist_ok=True)
    (lay.config_dir / "config.json").write_text(json.dumps({"model_family": FAMILY, "output_dir": "output"}, indent=2))
    lay.config.write_text(json.dumps([
        {"id": DATASET_ID, "type": "local", "instance_data_dir": str(lay.data),
         "cache_dir_vae": str(lay.vae), "caption_strategy": "textfile"},
        {"id": "text", "type": "local", "dataset_type": "text_embeds", "default": True, "cache_dir": str(lay.text)},
    ], indent=2))

    # Caches last. One serialized tensor per bucket shape / one embed dict: bytes alike are fine.
    gen = torch.Generator().manual_seed(20240601)
    latents = {(w, h): _torch_bytes(torch, torch.randn(4, h // 8, w // 8, generator=gen).to(torch.bfloat16))
               for w, h in BUCKETS}
    embed = _torch_bytes(torch, {"prompt_embeds": torch.randn(1, 77, 64, generator=gen).to(torch.bfloat16),
                                 "pooled_prompt_embeds": torch.randn(32, generator=gen).to(torch.bfloat16)})
    lay.text.mkdir(parents=True, exist_ok=True)
    for i, (sub, name, size, caption) in enumerate(items):
        folder = lay.vae / sub
        if i % lay.per_folder == 0:
            folder.mkdir(parents=True, exist_ok=True)
        stem = os.path.splitext(name)[0]
        (folder / f"{hashlib.sha256(stem.encode()).hexdigest()}.pt").write_bytes(latents[size])
        (lay.text / f"{hashlib.md5(caption.encode()).hexdigest()}-{FAMILY}.pt").write_bytes(embed)
    (lay.text / f"{hashlib.md5(b'').hexdigest()}-{FAMILY}.pt").write_bytes(embed)  # the null caption

    (lay.root / MARKER).write_text(json.dumps(lay.marker(), indent=2) + "\n")
    return time.perf_counter() - t0


def prepare_set(args) -> tuple[Layout, dict[str, Any]]:
    root, origin = _common.set_root(args, f"simpletuner-{args.images}", "cachedoctor-dsbench-")
    root.mkdir(parents=True, exist_ok=True)
    foreign = sorted(name for name in os.listdir(root) if name not in OWN_ENTRIES)
    if foreign or (os.listdir(root) and not (root / MARKER).is_file()):
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        fail(f"{root} holds entries that are not part of a benchmark set ({shown or 'no ' + MARKER}); "
             f"the set would overwrite them. Use an empty or benchmark-only folder.")
    lay = Layout(root, args.images, args.per_folder)
    reused = _set_is_complete(lay)
    gen_s = 0.0 if reused else generate(lay)
    info = {"folder": str(root), "origin": origin, "images": args.images, "per_folder": args.per_folder,
            "generated": not reused, "generate_seconds": gen_s,
            "latent_files": args.images, "text_files": args.images + 1,
            "cache_files": 2 * args.images + 1, "buckets": [list(b) for b in BUCKETS],
            "deleted_at_end": origin == "temp"}
    return lay, info


# --------------------------------------------------------------------------- methods


def make_plan(api, lay: Layout):
    plan, _line = api["plan_for"](api["LayoutName"].SIMPLETUNER, [], api["LayoutOptions"](config=str(lay.config)))
    return plan


def method_plan(api, lay: Layout) -> Callable[[], dict]:
    def run():
        plan = make_plan(api, lay)
        return {"items": plan.items, "expected": plan.count()}
    return run


def method_cache_scan(api, roots: list[str], workers: int) -> Callable[[], dict]:
    def run():
        return _common.scan_summary(api["scan"](roots, api["ScanOptions"](deep=False, workers=workers)))
    return run


def method_dataset_scan(api, lay: Layout, workers: int) -> Callable[[], dict]:
    def run():
        plan = make_plan(api, lay)
        return _common.scan_summary(api["scan"](plan.roots, api["ScanOptions"](deep=False, workers=workers), dataset=plan))
    return run


def method_headers(images: list[str]) -> Callable[[], dict]:
    from PIL import Image

    def run():
        pixels = 0
        for p in images:
            with Image.open(p) as im:
                w, h = im.size
            pixels += w * h
        return {"pixels": pixels}
    return run


def method_cli(argv: list[str]) -> Callable[[], dict]:
    cmd = [sys.executable, "-m", "cachedoctor", *argv]

    def run():
        rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO).returncode
        return {"exit_code": rc, "command": "cachedoctor " + " ".join(argv)}
    return run


def warm_up(root: Path) -> tuple[int, int, float]:
    t0 = time.perf_counter()
    files = total = 0
    for folder, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(folder, name), "rb") as f:
                total += len(f.read())
            files += 1
    return files, total, time.perf_counter() - t0


def verify(api, lay: Layout, info: dict) -> dict[str, Any]:
    """One untimed dataset scan: the healthy set must give no findings and no errors."""
    plan = make_plan(api, lay)
    roots, items, expected, notes = list(plan.roots), plan.items, plan.count(), list(plan.notes)
    result = api["scan"](plan.roots, api["ScanOptions"](deep=False, workers=1), dataset=plan)
    problems = []
    if items != lay.n:
        problems.append(f"the plan saw {items:,} images, expected {lay.n:,}")
    if result.stats.files_read != info["cache_files"]:
        problems.append(f"the scan read {result.stats.files_read:,} cache files, expected {info['cache_files']:,}")
    if result.findings or result.errors or problems:
        print(f"dataset_bench: the dataset scan of the healthy set is not clean: {len(result.findings):,} findings, "
              f"{len(result.errors):,} errors; the benchmark would be meaningless", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        for note in notes:
            print(f"  plan note: {note}", file=sys.stderr)
        for f in result.findings[:8]:
            print(f"  finding {_common.severity_of(f)} {getattr(f, 'kind', '?')}: {getattr(f, 'path', '?')}: "
                  f"{getattr(f, 'message', '')}", file=sys.stderr)
        for e in result.errors[:5]:
            print(f"  error {e.path}: {e.message}", file=sys.stderr)
        if not info["deleted_at_end"]:
            print(f"  (a kept set may be damaged: delete {lay.root} to rebuild it)", file=sys.stderr)
        raise SystemExit(2)
    return {"roots": roots, "items": items, "expected": expected, "notes": notes, "seconds": result.elapsed}


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    wall0 = time.perf_counter()
    api = load_api()  # fail before spending time on the set
    import PIL
    import torch

    torch.set_num_threads(1)
    lay, info = prepare_set(args)
    n = lay.n
    cache_files = info["cache_files"]
    try:
        print(f"cachedoctor dataset benchmark  (python {platform.python_version()}, torch {torch.__version__}, "
              f"Pillow {PIL.__version__}, {os.cpu_count()} CPUs, {platform.system()} {platform.machine()})")
        print(f"set: SimpleTuner layout, {n:,} images (PNG and JPEG, buckets "
              f"{', '.join(f'{w}x{h}' for w, h in BUCKETS)}) in part_NNN/ folders of {lay.per_folder:,}, "
              f"one .txt caption each;")
        print(f"     cache: {info['latent_files']:,} bf16 VAE latents + {info['text_files']:,} text embeds "
              f"(captions + the null caption) = {cache_files:,} cache files; folder {lay.root}")
        print(f"     {'generated in %.1f s' % info['generate_seconds'] if info['generated'] else 'reused (nothing generated)'}")

        check = verify(api, lay, info)
        roots = check["roots"]
        print(f"check: dataset scan of the healthy set: 0 findings, 0 errors "
              f"({check['items']:,} images, {check['expected']:,} expected entries, {len(roots)} cache roots)")
        for note in check["notes"]:
            print(f"     plan note: {note}")

        files, nbytes, warm_s = warm_up(lay.root)
        print(f"warm-up: read all {files:,} files once ({nbytes / 1e6:.1f} MB in {warm_s:.1f} s) after one "
              f"untimed dataset scan, so every method sees a warm page cache")

        images = lay.image_paths()
        # (key, label, files counted for the rate, unit, function)
        methods: list[tuple[str, str, int, str, Callable[[], dict]]] = [
            ("cache_1", "cache-only scan, 1 worker", cache_files, "cache files", method_cache_scan(api, roots, 1)),
            ("dataset_1", "dataset scan (plan + scan), 1 worker", cache_files, "cache files",
             method_dataset_scan(api, lay, 1)),
            ("cache_n", f"cache-only scan, {args.workers} workers", cache_files, "cache files",
             method_cache_scan(api, roots, args.workers)),
            ("dataset_n", f"dataset scan (plan + scan), {args.workers} workers", cache_files, "cache files",
             method_dataset_scan(api, lay, args.workers)),
            ("plan", "plan_for(simpletuner) alone", n, "images", method_plan(api, lay)),
            ("headers", "PIL.Image.open(p).size loop", n, "images", method_headers(images)),
        ]
        if not args.no_cli:
            methods += [
                ("cli_cache", "CLI: scan ROOTS --layout none -j 1", cache_files, "cache files",
                 method_cli(["scan", *roots, "--layout", "none", "-j", "1"])),
                ("cli_dataset", "CLI: scan --config X -j 1", cache_files, "cache files",
                 method_cli(["scan", "--config", str(lay.config), "-j", "1"])),
            ]
        # one untimed cache-only pass too (the check above was the dataset one)
        methods[0][4]()

        times: dict[str, list[float]] = {key: [] for key, *_ in methods}
        extras: dict[str, dict] = {}
        t_timing = time.perf_counter()
        rounds, stopped_early = _common.run_rounds([(key, fn) for key, _, _, _, fn in methods], times, extras,
                                                   args.repeat, args.budget)

        figures = {}
        for key, label, count, unit, _ in methods:
            best = min(times[key])
            figures[key] = {"label": label, "files": count, "unit": unit, "seconds_best": best,
                            "seconds_all": times[key], "files_per_s": count / best, **extras[key]}

        print()
        print(f"figures: best of {rounds} round(s); files/s counts cache files for scans, images for the rest")
        head = f"{'method':<44} {'files':>7} {'best s':>8} {'files/s':>10}"
        print(head)
        print("-" * len(head))
        for key, label, _, unit, _ in methods:
            f = figures[key]
            print(f"{label:<44} {f['files']:>7,} {f['seconds_best']:>8.3f} {f['files_per_s']:>10,.0f}"
                  + ("   (images)" if unit == "images" else ""))

        notes = []
        for key in ("cache_1", "dataset_1", "cache_n", "dataset_n"):
            f = figures[key]
            if f["files_read"] != cache_files:
                notes.append(f"{f['label']}: files_read {f['files_read']:,}, expected {cache_files:,}")
            if f["findings"] or f["errors"]:
                kinds = ", ".join(f"{k} x{v}" for k, v in f["finding_kinds"].items())
                notes.append(f"{f['label']}: {f['findings']:,} findings ({kinds}), {f['errors']:,} errors")
        for key in ("cli_cache", "cli_dataset"):
            if key in figures and figures[key]["exit_code"] != 0:
                notes.append(f"{figures[key]['label']}: exit code {figures[key]['exit_code']} (expected 0)")
        if "cli_cache" in figures:
            notes.append("CLI rows include interpreter start-up and imports (information only)")
        for note in notes:
            print(f"note: {note}")

        ratio = figures["dataset_1"]["seconds_best"] / figures["cache_1"]["seconds_best"]
        ok = ratio <= GOAL_MAX
        info_rows = [
            (f"dataset scan, {args.workers} workers vs cache-only scan, {args.workers} workers",
             figures["dataset_n"]["seconds_best"] / figures["cache_n"]["seconds_best"]),
            ("planning alone vs cache-only scan, 1 worker",
             figures["plan"]["seconds_best"] / figures["cache_1"]["seconds_best"]),
        ]
        if "cli_cache" in figures:
            info_rows.append(("CLI --config vs CLI --layout none, 1 worker",
                              figures["cli_dataset"]["seconds_best"] / figures["cli_cache"]["seconds_best"]))
        print()
        print(f"{'goal (time ratio)':<62} {'ratio':>7} {'target':>8}  result")
        print(f"{GOAL_LABEL:<62} {ratio:>6.2f}x {'<= ' + f'{GOAL_MAX:g}x':>8}  {'PASS' if ok else 'FAIL'}")
        for label, value in info_rows:
            print(f"{label:<62} {value:>6.2f}x {'':>8}  (info)")
        extra_s = figures["dataset_1"]["seconds_best"] - figures["cache_1"]["seconds_best"]
        print(f"the dataset comparison adds {extra_s:.3f} s over the cache-only scan "
              f"({extra_s / n * 1e6:.0f} us per image); planning alone is {figures['plan']['seconds_best']:.3f} s")

        total_s = _common.print_total(wall0, t_timing, info['generate_seconds'], warm_s)
        if args.json:
            doc = {
                "schema": SCHEMA,
                "argv": sys.argv[1:] if argv is None else argv,
                "machine": _common.machine(torch=torch.__version__, pillow=PIL.__version__),
                "set": info, "check": check,
                "warm_up": {"files": files, "bytes": nbytes, "seconds": warm_s},
                "repeat": args.repeat, "rounds": rounds, "stopped_early": stopped_early, "workers": args.workers,
                "figures": figures,
                "goal": {"goal": GOAL_LABEL, "ratio": ratio, "max": GOAL_MAX, "result": "PASS" if ok else "FAIL"},
                "info_ratios": [{"ratio_of": label, "ratio": value} for label, value in info_rows],
                "notes": notes, "total_seconds": total_s,
            }
            _common.write_figures(args.json, doc)
    finally:
        _common.release_set(lay.root, info["deleted_at_end"], args.dir is not None)
    return 0  # the goal is reported, never enforced by the exit status


if __name__ == "__main__":
    sys.exit(main())
