#!/usr/bin/env python3
"""What the ``distribution-outlier`` statistics add to a deep scan (goal: at most +10%).

The per-channel statistics are computed by the readers in the deep pass (``channel_stats``).
This runs an in-process, one-worker deep scan of each folder given, alternating rounds with
the statistics on and off (off: the readers' ``channel_stats`` replaced by a function returning
``None``, the only difference), and prints the best and median of each and the ratio of bests.

    .venv/bin/python bench/outlier_cost.py /work/perf/sdxl16 /work/perf/sd15 --rounds 7
    .venv/bin/python bench/outlier_cost.py --make-kohya bench/out/kohya 1000   # a kohya npz set

Timings on a shared machine are noisy: compare the bests of alternating rounds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

READERS = ("torch_zip", "torch_legacy", "npy", "safetensors")


def switch(on: bool) -> None:
    import importlib

    from cachedoctor.formats import _channel_stats

    for name in READERS:
        module = importlib.import_module(f"cachedoctor.formats.{name}")
        module.channel_stats = _channel_stats.channel_stats if on else (lambda *a, **k: None)  # type: ignore[attr-defined]


def deep_scan(folder: str) -> float:
    from cachedoctor.scan import ScanOptions, scan

    start = time.perf_counter()
    report = scan([folder], ScanOptions(deep=True, workers=1, state=None))
    elapsed = time.perf_counter() - start
    assert not report.errors and report.stats.files_read > 0
    return elapsed


def make_kohya(folder: Path, n: int) -> None:
    """kohya-ss sd-scripts' npz: ``latents`` [4,128,128] float32, ``original_size``, ``crop_ltrb``."""
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        latents = rng.standard_normal((4, 128, 128), dtype=np.float32)
        size, crop = np.array([1024, 1024]), np.array([0, 0, 1024, 1024])
        np.savez(folder / f"img_{i:06d}_1024x1024_sdxl.npz", latents=latents, original_size=size, crop_ltrb=crop)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--make-kohya", nargs=2, metavar=("FOLDER", "N"))
    args = parser.parse_args()
    if args.make_kohya:
        make_kohya(Path(args.make_kohya[0]), int(args.make_kohya[1]))
        return 0
    for folder in args.folders:
        for p in Path(folder).iterdir():  # warm page cache
            p.read_bytes()
        deep_scan(folder)  # warm imports and plans
        times: dict[bool, list[float]] = {True: [], False: []}
        for r in range(args.rounds):
            for on in (True, False) if r % 2 == 0 else (False, True):
                switch(on)
                times[on].append(deep_scan(folder))
        switch(True)
        best_on, best_off = min(times[True]), min(times[False])
        print(
            f"{folder}: stats off best {best_off:.3f}s median {statistics.median(times[False]):.3f}s | "
            f"on best {best_on:.3f}s median {statistics.median(times[True]):.3f}s | "
            f"+{(best_on / best_off - 1) * 100:.1f}% (bests), "
            f"+{(statistics.median(times[True]) / statistics.median(times[False]) - 1) * 100:.1f}% (medians)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
