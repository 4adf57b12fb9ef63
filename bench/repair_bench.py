#!/usr/bin/env python3
"""Speed benchmark: cachedoctor repair against the bare loops a user would otherwise write.

Two measurements, each compared in the same run with its bare baseline:

1. **Lossless rewrite.** N SimpleTuner-like latents (bare 16x64x64 bf16 tensors) that need a
   lossless fix, half saved with a ``cuda:0`` storage location (``rewrite-cpu``), half saved as
   ``batch[i]`` views of a [7, 16, 64, 64] batch (``clone-storage``). Timed: the full
   ``cachedoctor repair DIR --yes`` through the API, the per-file path the runner takes for
   each action (``_run_local``), and a bare ``torch.load`` + ``.clone()`` + ``torch.save`` loop.
2. **Recompute (CPU pipeline).** A SimpleTuner dataset of M PNG images whose every latent is
   missing, repaired through a tiny diffusers AutoencoderKL, against a bare loop doing the
   same decode, resize, encode, scale and save with the same encoder.

The goals live here, never in the tests: the script prints PASS/FAIL for each and still exits
0. It exits 2 only when it cannot run (bad arguments, cachedoctor's repair API or the test
helpers missing) or when a repair does not verify every item (the figures would be meaningless).

    python bench/repair_bench.py                    # 2,000 files, 200 images, in a temp folder
    python bench/repair_bench.py --files 500 --images 64 --json bench/out/repair.json
    python bench/repair_bench.py --only recompute --device cuda --gpus 1     # on a GPU machine

See bench/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, NoReturn

import _common

REPO = _common.REPO
PROG = "repair_bench"
SCHEMA = "cachedoctor.bench.repair/1"
MB = 1_000_000  # figures are in decimal megabytes
LATENT = (16, 64, 64)  # a SimpleTuner SD3/Flux-like latent of a 512x512 image
BATCH = 7  # the leaked views come from batches of this many latents
BORDERLINE = 0.10  # a result within 10 % of its target is marked borderline (this machine drifts that much)

# The goals: (label, numerator method, denominator method, minimum ratio of items/s).
GOALS = [
    ("lossless: per-file rewrite vs bare load+clone+save", "rewrite", "loop", 0.8),
    ("recompute: repair vs bare PIL+encode+save loop", "recompute", "encode_loop", 0.9),
]
# Shown under the goals for information only.
INFO_RATIOS = [
    ("lossless: full repair vs bare load+clone+save", "repair", "loop"),
    ("lossless: per-file rewrite vs bare loop + fsync", "rewrite", "loop_fsync"),
    ("lossless: full repair vs per-file rewrite", "repair", "rewrite"),
]


# --------------------------------------------------------------------------- arguments


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Benchmark cachedoctor repair (lossless rewrites, recompute) against bare loops.")
    p.add_argument("--files", type=int, default=2000, metavar="N",
                   help="files needing a lossless fix, half device-tagged, half leaked views (default 2000)")
    p.add_argument("--images", type=int, default=200, metavar="M",
                   help="images of the SimpleTuner dataset whose latents are recomputed (default 200)")
    p.add_argument("--batch-size", type=int, default=8, metavar="B",
                   help="encoder batch size, for repair and the bare loop alike (default 8, as the CLI)")
    p.add_argument("--image-size", type=int, default=256, metavar="S",
                   help="images are SxS PNGs bucketed to target SxS, a multiple of 8 (default 256)")
    p.add_argument("--device", default="cpu",
                   help="recompute device: cpu (default) or cuda; with cuda the bare loop runs on cuda:0")
    p.add_argument("--gpus", type=int, metavar="G",
                   help="pass RepairOptions(gpus=G): one recompute worker per GPU (the bare loop uses cuda:0)")
    p.add_argument("--workers", type=int, default=1, metavar="W",
                   help="recompute worker processes on --device without --gpus (default 1)")
    p.add_argument("--threads", type=int, metavar="T",
                   help="torch.set_num_threads(T) for repair and the loops alike (default: torch's own "
                        "default, left alone)")
    p.add_argument("--only", choices=("lossless", "recompute"),
                   help="run one of the two measurements only")
    p.add_argument("--repeat", type=int, default=3, metavar="K",
                   help="time every method K times and report the best (default 3)")
    p.add_argument("--budget", type=float, default=80.0, metavar="SECONDS",
                   help="stop repeating once another round would end past this many seconds of "
                        "timing (default 80; at least one round always runs)")
    p.add_argument("--dir", type=Path, metavar="DIR",
                   help="make the sets in a temp folder under DIR (the file system matters: repair "
                        "fsyncs); default the system temp folder. Deleted at the end")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the figures as JSON to FILE")
    args = p.parse_args(argv)
    if args.files < 2:
        p.error("--files must be at least 2 (half of each kind)")
    if args.images < 1:
        p.error("--images must be at least 1")
    if args.batch_size < 1:
        p.error("--batch-size must be at least 1")
    if args.image_size < 8 or args.image_size % 8:
        p.error("--image-size must be a positive multiple of 8")
    if args.gpus is not None and args.gpus < 1:
        p.error("--gpus must be at least 1")
    if args.workers < 1:
        p.error("--workers must be at least 1")
    if args.threads is not None and args.threads < 1:
        p.error("--threads must be at least 1")
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    if args.dir is not None and not args.dir.is_dir():
        p.error(f"--dir {args.dir}: no such folder")
    return args


def fail(message: str) -> NoReturn:
    _common.fail(PROG, message)


# --------------------------------------------------------------------------- cachedoctor and helpers


def load_api() -> dict[str, Any]:
    """cachedoctor's repair API; falls back to the checkout's package if not installed."""
    def load() -> dict[str, Any]:
        from cachedoctor.encoders import load_encoder
        from cachedoctor.layouts import LayoutName, LayoutOptions
        from cachedoctor.repair.model import ItemState
        from cachedoctor.repair.journal import new_run_id
        from cachedoctor.repair.run import RepairOptions, _run_local, repair, still_broken
        return {"repair": repair, "RepairOptions": RepairOptions, "_run_local": _run_local,
                "still_broken": still_broken, "LayoutName": LayoutName, "LayoutOptions": LayoutOptions,
                "ItemState": ItemState, "new_run_id": new_run_id, "load_encoder": load_encoder}

    return _common.import_cachedoctor(load, PROG, "cachedoctor's repair API (cachedoctor.repair.run.repair, "
                                      "_run_local, RepairOptions; cachedoctor.encoders.load_encoder)")


def load_test_helpers() -> tuple[Callable[..., Any], Callable[[Path], Path], str]:
    """``repair_factories.simpletuner`` and ``tiny_models.build_tiny_vae`` from tests/: the
    benchmark builds its sets with the same code the tests trust."""
    add_tests_to_path()
    try:
        from repair_factories import simpletuner
        from tiny_models import build_tiny_vae
    except ImportError as exc:
        fail(f"cannot import tests/repair_factories.py and tests/tiny_models.py, which build the recompute set: "
             f"{exc}; run with --only lossless to skip the recompute measurement")
    return simpletuner, build_tiny_vae, "tests/tiny_models.py build_tiny_vae"


def add_tests_to_path() -> None:
    tests = str(REPO / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)


def saved_on(location: str):  # type: ignore[no-untyped-def]
    """tests/factories.py's ``saved_on``: torch.save tags every storage with ``location``."""
    add_tests_to_path()
    from factories import saved_on as tagged

    return tagged(location)


def recompute_device(args: argparse.Namespace) -> str:
    """Where the bare loop encodes: cuda:0 whenever repair gets GPUs."""
    if args.gpus or args.device.startswith("cuda"):
        return "cuda:0"
    return args.device


# --------------------------------------------------------------------------- the lossless set


def latent_name(i: int) -> str:
    """SimpleTuner names a latent after the sha256 of its image's stem."""
    return hashlib.sha256(f"img_{i:06d}".encode()).hexdigest() + ".pt"


def make_lossless_set(torch, folder: Path, n: int) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Even indices: a bare latent saved with a cuda:0 location; odd: ``batch[j]`` of a bf16 batch.
    Saved to an open file object, as SimpleTuner does. Every file is distinct (index in 2 values)."""
    gen = torch.Generator().manual_seed(20261121)
    pool = [torch.randn(*LATENT, generator=gen).to(torch.bfloat16) for _ in range(4)]
    batch = torch.randn(BATCH, *LATENT, generator=gen).to(torch.bfloat16)
    t0 = time.perf_counter()
    for i in range(n):
        if i % 2 == 0:
            t = pool[(i // 2) % len(pool)]
            t.view(-1)[0], t.view(-1)[1] = float(i // 256), float(i % 256)  # exact in bf16
            with saved_on("cuda:0"), open(folder / latent_name(i), "wb") as out:
                torch.save(t, out)
        else:
            view = batch[(i // 2) % BATCH]
            view.view(-1)[0], view.view(-1)[1] = float(i // 256), float(i % 256)
            with open(folder / latent_name(i), "wb") as out:
                torch.save(view, out)
    seconds = time.perf_counter() - t0
    files = sorted(folder.iterdir())
    sizes = {p.name: p.stat().st_size for p in files}
    tagged = [sizes[latent_name(i)] for i in range(0, n, 2)]
    leaked = [sizes[latent_name(i)] for i in range(1, n, 2)]
    probe = folder.parent / "probe.pt"
    with open(probe, "wb") as out:
        torch.save(pool[0].clone(), out)
    healthy = probe.stat().st_size
    probe.unlink()
    return {"files": n, "tagged": len(tagged), "leaked": len(leaked), "tagged_bytes": tagged[0],
            "leaked_bytes": leaked[0], "healthy_bytes": healthy, "total_bytes": sum(sizes.values()),
            "generate_seconds": seconds}


def fresh_copy(master: Path, dest: Path) -> tuple[list[Path], str]:
    """``dest`` holding the master set, by hard link (repair and the loops never modify a file in
    place: they write new files), else by copy. Then ``os.sync()`` so no earlier dirty page is
    left for a timed fsync to flush."""
    dest.mkdir()
    how = "hard links"
    out = []
    for src in sorted(master.iterdir()):
        target = dest / src.name
        try:
            os.link(src, target)
        except OSError:
            shutil.copyfile(src, target)
            how = "copies"
        out.append(target)
    os.sync()
    return out, how


# --------------------------------------------------------------------------- the lossless methods


def check_results(api, outcome_results, n: int, what: str) -> None:  # type: ignore[no-untyped-def]
    verified = sum(1 for r in outcome_results if r.state is api["ItemState"].VERIFIED)
    if verified != n:
        bad = [r for r in outcome_results if r.state is not api["ItemState"].VERIFIED][:3]
        shown = "; ".join(f"{r.path}: {r.state.value}: {r.message}" for r in bad)
        fail(f"{what}: {verified} of {n} items verified ({shown}); the figures would be meaningless")


def lossless_repair(api, folder: Path, n: int) -> dict:  # type: ignore[no-untyped-def]
    """``cachedoctor repair DIR --yes``: scan, plan, journal, rewrite each file, rescan."""
    outcome = api["repair"]([str(folder)], api["LayoutName"].NONE, api["LayoutOptions"](), api["RepairOptions"](),
                            ["cachedoctor", "repair", str(folder), "--yes"],
                            confirm=lambda o: True, show_plan=lambda o: None)
    check_results(api, outcome.results, n, "repair DIR --yes")
    if api["still_broken"](outcome) or (outcome.after is not None and outcome.after.findings):
        fail(f"repair DIR --yes: the rescan still has {len(outcome.after.findings)} findings")
    return {"plan": outcome.plan.counts()}


def lossless_plan(api, folder: Path, n: int) -> list:  # type: ignore[no-untyped-def]
    """The planned actions, from a dry run (untimed)."""
    outcome = api["repair"]([str(folder)], api["LayoutName"].NONE, api["LayoutOptions"](),
                            api["RepairOptions"](dry_run=True), ["cachedoctor", "repair", "--dry-run"],
                            confirm=lambda o: True, show_plan=lambda o: None)
    actions = outcome.plan.runnable()
    if len(actions) != n:
        fail(f"the dry run planned {len(actions)} actions for {n} files ({outcome.plan.counts()})")
    return actions


def rewrite_loop(api, actions: list) -> dict:  # type: ignore[no-untyped-def]
    """What the runner does per lossless action, without scan, journal and rescan."""
    run_id = api["new_run_id"]()
    results = [api["_run_local"](a, run_id) for a in actions]
    check_results(api, results, len(actions), "per-file rewrite (_run_local)")
    return {"bytes_written": sum(r.bytes_after for r in results)}


def bare_loop(torch, files: list[Path], fsync: bool) -> dict:  # type: ignore[no-untyped-def]
    """torch.load + clone + torch.save to a new file beside it (with ``fsync``: also fsync it)."""
    written = 0
    for p in files:
        obj = torch.load(p, map_location="cpu", weights_only=True).clone()
        with open(p.with_name("bare-" + p.name), "wb") as out:
            torch.save(obj, out)
            if fsync:
                out.flush()
                os.fsync(out.fileno())
            written += out.tell()
    return {"bytes_written": written}


# --------------------------------------------------------------------------- the recompute set and methods


class RecomputeSet:
    def __init__(self, ds: Any, spec: str, size: int, out: Path) -> None:
        self.ds = ds
        self.spec = spec
        self.size = size
        self.out = out  # where the bare loop writes (outside the cache, same file system)

    def clear_cache(self) -> None:
        """Every latent missing again; repair's state folder and lock files gone."""
        for entry in os.scandir(self.ds.vae):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)

    def reset(self) -> None:
        """The cache emptied and the bare loop's output folder emptied; dirty pages written out."""
        self.clear_cache()
        shutil.rmtree(self.out, ignore_errors=True)
        self.out.mkdir()
        os.sync()


def recompute_repair(api, rs: RecomputeSet, args: argparse.Namespace) -> dict:  # type: ignore[no-untyped-def]
    options = api["RepairOptions"](encoders=(rs.spec,), batch_size=args.batch_size, device=args.device,
                                   gpus=args.gpus, workers=args.workers)
    argv = ["cachedoctor", "repair", "--config", str(rs.ds.config), "--encoder", rs.spec, "--yes"]
    outcome = api["repair"]([], api["LayoutName"].SIMPLETUNER, api["LayoutOptions"](config=str(rs.ds.config)),
                            options, argv, confirm=lambda o: True, show_plan=lambda o: None)
    check_results(api, outcome.results, len(rs.ds.images), "repair --config (recompute)")
    if outcome.problems or api["still_broken"](outcome):
        fail(f"repair --config: not clean after the repair ({outcome.problems or api['still_broken'](outcome)[:3]})")
    return {"plan": outcome.plan.counts()}


def encode_loop(api, torch, rs: RecomputeSet, args: argparse.Namespace) -> dict:  # type: ignore[no-untyped-def]
    """Load the same encoder the same way, then per batch: PIL open, resize to the encoder's
    input size, to tensor, encode (posterior mode), scale, torch.save each latent."""
    import numpy as np
    from PIL import Image

    t0 = time.perf_counter()
    enc = api["load_encoder"](rs.spec)
    enc.load(recompute_device(args))
    load_s = time.perf_counter() - t0
    side = rs.size // 8 * enc.downscale  # SimpleTuner records latent = target / 8; the VAE sees latent * downscale
    images = rs.ds.images
    prep_s = encode_s = save_s = 0.0
    for i in range(0, len(images), args.batch_size):
        chunk = images[i:i + args.batch_size]
        t0 = time.perf_counter()
        pixels = []
        for path in chunk:
            with Image.open(path) as opened:
                image = opened.convert("RGB")
            image = image.resize((side, side), Image.Resampling.LANCZOS)
            array = np.asarray(image, dtype=np.uint8).copy()
            pixels.append(torch.from_numpy(array).permute(2, 0, 1).float() / 127.5 - 1.0)
        batch = torch.stack(pixels)
        t1 = time.perf_counter()
        latents = enc.scaling.apply(enc.encode(batch)["latent"]).to(torch.bfloat16)
        t2 = time.perf_counter()
        for path, latent in zip(chunk, latents):
            with open(rs.out / rs.ds.latent_path(path).name, "wb") as out:
                torch.save(latent.clone(), out)
        t3 = time.perf_counter()
        prep_s, encode_s, save_s = prep_s + t1 - t0, encode_s + t2 - t1, save_s + t3 - t2
    return {"encoder_load_seconds": load_s, "prepare_seconds": prep_s, "encode_seconds": encode_s,
            "save_seconds": save_s, "encoder_input": [side, side]}


def same_latents(torch, rs: RecomputeSet) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """How many of repair's latents are bit-identical to the bare loop's (both from the last round)."""
    same = 0
    for path in rs.ds.images:
        name = rs.ds.latent_path(path).name
        a = torch.load(rs.ds.vae / name, map_location="cpu", weights_only=True)
        b = torch.load(rs.out / name, map_location="cpu", weights_only=True)
        same += bool(a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b))
    return same, len(rs.ds.images)


# --------------------------------------------------------------------------- main


def revision() -> str | None:
    """The checkout's git commit (``+dirty`` with local changes), for the record: repair changes fast."""
    import subprocess

    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no", "--",
                                "cachedoctor"], capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def cpu_snapshot() -> tuple[float, float] | None:
    """(CPU-seconds the whole machine was busy, CPU-seconds of this process and its reaped
    children) since boot, to tell how much other processes ran during the timing."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    busy = sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)  # all but idle and iowait
    t = os.times()
    return busy / os.sysconf("SC_CLK_TCK"), t.user + t.system + t.children_user + t.children_system


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    wall0 = time.perf_counter()
    api = load_api()  # fail before spending time on the sets
    do_lossless = args.only in (None, "lossless")
    do_recompute = args.only in (None, "recompute")
    helpers = load_test_helpers() if do_recompute else None

    import PIL
    import torch

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="cachedoctor-repair-bench-", dir=args.dir))
    try:
        return run(args, api, helpers, torch, PIL, work, wall0, do_lossless, do_recompute, argv)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args, api, helpers, torch, PIL, work: Path, wall0: float, do_lossless: bool,  # type: ignore[no-untyped-def]
        do_recompute: bool, argv: list[str] | None) -> int:
    print(f"cachedoctor repair benchmark  (python {platform.python_version()}, torch {torch.__version__}, "
          f"Pillow {PIL.__version__}, {os.cpu_count()} CPUs, {platform.system()} {platform.machine()})")
    import cachedoctor

    rev = revision()
    print(f"cachedoctor from {Path(cachedoctor.__file__).parent}" + (f" (git {rev})" if rev else ""))
    how = f"set by --threads {args.threads}" if args.threads is not None else "torch's default, left alone"
    print(f"torch threads: {torch.get_num_threads()} intra-op, {torch.get_num_interop_threads()} inter-op "
          f"({how}, for repair and the loops alike); work folder {work}")

    setup: dict[str, Any] = {}
    # (key, part, label, items, bytes, prepare() -> state, timed(state) -> dict)
    methods: list[tuple[str, str, str, int, int, Callable[[], Any], Callable[[Any], dict]]] = []
    counter = {"n": 0}

    def scratch() -> Path:
        counter["n"] += 1
        return work / f"run-{counter['n']:03d}"

    def discard(path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)

    # ---- lossless set
    if do_lossless:
        master = work / "master"
        master.mkdir()
        info = make_lossless_set(torch, master, args.files)
        os.sync()
        setup["lossless"] = info
        n, nbytes = info["files"], info["total_bytes"]
        print(f"lossless set: {n:,} SimpleTuner-like latents (bare {'x'.join(map(str, LATENT))} bf16, saved to a file "
              f"object), {nbytes:,} bytes ({nbytes / 1e9:.2f} GB), made in {info['generate_seconds']:.1f} s:")
        print(f"     {info['tagged']:,} device-tagged (storage location cuda:0, {info['tagged_bytes']:,} bytes each) "
              f"-> rewrite-cpu;")
        print(f"     {info['leaked']:,} leaked views (batch[i] of a [{BATCH}, {', '.join(map(str, LATENT))}] batch, "
              f"{info['leaked_bytes']:,} bytes each) -> clone-storage; a healthy file is {info['healthy_bytes']:,} bytes")

        # warm-up: imports and first calls, on a small copy (untimed)
        t0 = time.perf_counter()
        small = work / "warm"
        small.mkdir()
        warm_files = sorted(master.iterdir())[:20]
        for p in warm_files:
            os.link(p, small / p.name)
        lossless_repair(api, small, len(warm_files))
        discard(small)
        total = sum(len(p.read_bytes()) for p in master.iterdir())
        warm_s = time.perf_counter() - t0
        print(f"warm-up: one untimed repair of {len(warm_files)} files, then every file read once ({total / 1e9:.2f} GB) "
              f"in {warm_s:.1f} s")

        def prep_copy() -> tuple[Path, list[Path]]:
            folder = scratch()
            files, how = fresh_copy(master, folder)
            setup["lossless"]["copied_by"] = how
            return folder, files

        def prep_plan() -> tuple[Path, list]:
            folder, _files = prep_copy()
            actions = lossless_plan(api, folder, n)
            os.sync()
            return folder, actions

        methods += [
            ("repair", "lossless", "repair DIR --yes (API: scan+plan+rewrite+rescan)", n, nbytes, prep_copy,
             lambda st: lossless_repair(api, st[0], n)),
            ("rewrite", "lossless", "per-file rewrite (_run_local per action)", n, nbytes, prep_plan,
             lambda st: rewrite_loop(api, st[1])),
            ("loop", "lossless", "bare loop: torch.load + clone + torch.save", n, nbytes, prep_copy,
             lambda st: bare_loop(torch, st[1], fsync=False)),
            ("loop_fsync", "lossless", "bare loop + fsync of each new file (info)", n, nbytes, prep_copy,
             lambda st: bare_loop(torch, st[1], fsync=True)),
        ]

    # ---- recompute set
    rs = None
    if do_recompute:
        simpletuner, build_vae, vae_origin = helpers
        t0 = time.perf_counter()
        vae = build_vae(work / "tiny-vae")
        spec = f"diffusers-vae:{vae}"
        side = args.image_size
        ds = simpletuner(work / "simpletuner", args.images, encoder=spec, size=(side, side), target=(side, side))
        rs = RecomputeSet(ds, spec, side, work / "simpletuner" / "bare-loop-out")
        rs.reset()
        build_s = time.perf_counter() - t0
        # warm-up: the encoder's first batch of this shape (kernel selection), untimed
        t0 = time.perf_counter()
        enc = api["load_encoder"](spec)
        enc.load(recompute_device(args))
        enc_side = side // 8 * enc.downscale
        enc.encode(torch.zeros(args.batch_size, 3, enc_side, enc_side))
        warm_rs = time.perf_counter() - t0
        downscale = enc.downscale
        del enc
        m = args.images
        img_bytes = sum(p.stat().st_size for p in ds.images)
        setup["recompute"] = {"images": m, "image_size": [side, side], "target": [side, side],
                              "latent_hw": [side // 8, side // 8], "encoder_input": [enc_side, enc_side],
                              "image_bytes": img_bytes, "vae": vae_origin, "downscale": downscale,
                              "build_seconds": build_s, "batch_size": args.batch_size,
                              "repair_device": args.device, "gpus": args.gpus, "workers": args.workers,
                              "loop_device": recompute_device(args)}
        print(f"recompute set: SimpleTuner dataset of {m:,} random-pixel {side}x{side} PNGs ({img_bytes / 1e6:.1f} MB), "
              f"target {side}x{side}, every latent deleted (all {m:,} missing);")
        print(f"     encoder: tiny diffusers AutoencoderKL ({vae_origin}; downscale {downscale}), so the "
              f"VAE sees {enc_side}x{enc_side} for the layout's {side // 8}x{side // 8} latent; "
              f"batch {args.batch_size}; built in {build_s:.1f} s (the factory encodes every image once), "
              f"warm-up batch {warm_rs:.1f} s")
        where = f"--gpus {args.gpus}" if args.gpus else f"--device {args.device}, {args.workers} worker(s)"
        print(f"     repair on {where}; bare loop on {recompute_device(args)}")

        def prep_reset() -> None:
            rs.reset()
            return None

        methods += [
            ("recompute", "recompute", "repair --config --encoder (API)", m, img_bytes, prep_reset,
             lambda st: recompute_repair(api, rs, args)),
            ("encode_loop", "recompute", "bare loop: PIL + resize + encode + save", m, img_bytes, prep_reset,
             lambda st: encode_loop(api, torch, rs, args)),
        ]

    # ---- rounds: every method once per round, each on fresh files prepared untimed
    times: dict[str, list[float]] = {key: [] for key, *_ in methods}
    extras: dict[str, dict] = {}
    t_timing = time.perf_counter()
    cpu0 = cpu_snapshot()
    rounds = 0
    stopped_early = False
    for r in range(args.repeat):
        t_round = time.perf_counter()
        for key, part, label, _items, _bytes, prepare, timed in methods:
            state = prepare()
            gc.collect()
            t0 = time.perf_counter()
            extra = timed(state)
            dt = time.perf_counter() - t0
            times[key].append(dt)
            extras[key] = extra or {}
            if isinstance(state, tuple):
                discard(state[0])
        rounds += 1
        if _common.round_done(r, rounds, t_round, t_timing, args.repeat, args.budget):
            stopped_early = True
            break

    timing_s = time.perf_counter() - t_timing
    cpu1 = cpu_snapshot()
    others = None
    if cpu0 is not None and cpu1 is not None:
        others = max(0.0, (cpu1[0] - cpu0[0]) - (cpu1[1] - cpu0[1]))
        share = others / (timing_s * (os.cpu_count() or 1))
        print(f"other processes used {others:.1f} CPU-s of the {timing_s * (os.cpu_count() or 1):.0f} the machine "
              f"had during the rounds ({share:.0%}; kernel writeback included)"
              + ("; WARNING: the figures are disturbed by other work on this machine" if share > 0.10 else ""))

    notes: list[str] = []
    if rs is not None:
        # The bare loop ran last, after a reset that emptied the cache: one more repair, untimed,
        # so the two outputs can be compared bit for bit.
        rs.clear_cache()
        recompute_repair(api, rs, args)
        same, total = same_latents(torch, rs)
        notes.append(f"recompute: {same}/{total} latents written by repair are bit-identical to the bare loop's"
                     + ("" if same == total else " (the two pipelines differ: see the README)"))

    figures: dict[str, dict] = {}
    for key, part, label, items, nbytes, _p, _t in methods:
        best = min(times[key])
        figures[key] = {"part": part, "label": label, "items": items, "bytes": nbytes, "seconds_best": best,
                        "seconds_all": times[key], "items_per_s": items / best, "ms_per_item": best / items * 1e3,
                        "mb_per_s": nbytes / best / MB if part == "lossless" else None, **extras[key]}

    # ---- the table
    print()
    print(f"figures: best of {rounds} round(s); MB/s = 10^6 bytes of input file size (as found, leaked batches "
          f"included) per second")
    head = f"{'part':<10} {'method':<50} {'items':>6} {'best s':>8} {'items/s':>9} {'ms/item':>8} {'MB/s':>7}"
    print(head)
    print("-" * len(head))
    for key, part, label, *_ in methods:
        f = figures[key]
        mbs = f"{f['mb_per_s']:>7,.1f}" if part == "lossless" else f"{'-':>7}"
        print(f"{part:<10} {label:<50} {f['items']:>6,} {f['seconds_best']:>8.2f} {f['items_per_s']:>9,.1f} "
              f"{f['ms_per_item']:>8.2f} {mbs}")
    if "encode_loop" in figures:
        f = figures["encode_loop"]
        notes.append(f"bare encode loop, its last round: encoder load {f['encoder_load_seconds']:.2f} s, PIL open + "
                     f"resize + to tensor {f['prepare_seconds']:.2f} s, encode {f['encode_seconds']:.2f} s, "
                     f"torch.save {f['save_seconds']:.2f} s (repair loads the encoder too, and prepares images on "
                     f"a thread while the encoder runs)")
    if do_lossless:
        notes.append("per file, the rewrite does what the bare loop does not: the restricted reader's pass over "
                     "the zip and pickle, a safe torch.load of the bytes read, a bitwise "
                     "compare, a file lock, a temp file fsynced, a hard link into the quarantine with a folder "
                     "fsync and a record line, a rename and a folder fsync, and a deep read-back verify; "
                     "the full repair adds the scan, the journal's commits per file (SQLite WAL, synchronous=NORMAL) "
                     "and the rescan")
    for note in notes:
        print(f"note: {note}")

    # ---- the goals
    print()
    goal_rows = []
    print(f"{'goal (items/s ratio)':<56} {'ratio':>7} {'target':>8}  result")
    for label, a, b, target in GOALS:
        if a in figures and b in figures:
            ratio = figures[a]["items_per_s"] / figures[b]["items_per_s"]
            ok = ratio >= target
            near = abs(ratio - target) <= BORDERLINE * target
            result = ("PASS" if ok else "FAIL") + (" (borderline)" if near else "")
            print(f"{label:<56} {ratio:>6.2f}x {'>= ' + f'{target:g}x':>8}  {result}")
            goal_rows.append({"goal": label, "ratio": ratio, "target": target, "result": result})
        else:
            print(f"{label:<56} {'n/a':>7} {'>= ' + f'{target:g}x':>8}  SKIP (--only)")
            goal_rows.append({"goal": label, "ratio": None, "target": target, "result": "SKIP"})
    info_rows = []
    for label, a, b in INFO_RATIOS:
        if a in figures and b in figures:
            ratio = figures[a]["items_per_s"] / figures[b]["items_per_s"]
            print(f"{label:<56} {ratio:>6.2f}x {'':>8}  (info)")
            info_rows.append({"ratio_of": label, "ratio": ratio})

    total_s = time.perf_counter() - wall0
    print()
    print(f"total run time {total_s:.1f} s (timing rounds {time.perf_counter() - t_timing:.1f} s, "
          f"including untimed preparation of fresh files before every method)")

    if args.json:
        doc = {
            "schema": SCHEMA,
            "argv": sys.argv[1:] if argv is None else argv,
            "machine": {**_common.machine(torch=torch.__version__, pillow=PIL.__version__, torch_threads=torch.get_num_threads()),
                        "cachedoctor_git": revision()},
            "setup": setup, "repeat": args.repeat, "rounds": rounds, "stopped_early": stopped_early,
            "other_processes_cpu_seconds": others,
            "figures": figures, "goals": goal_rows, "info_ratios": info_rows, "notes": notes,
            "total_seconds": total_s,
        }
        _common.write_figures(args.json, doc)
    return 0  # goals are reported, never enforced by the exit status


if __name__ == "__main__":
    sys.exit(main())
