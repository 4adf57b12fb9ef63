#!/usr/bin/env python3
"""cachedoctor repair against the bare loops a user would otherwise write (bench/README.md):
lossless rewrites of N files, and recomputes of M missing latents through a tiny real VAE.

The lossless baseline that counts is the *equally durable* bare loop (:func:`durable_loop`): it
makes exactly the promises repair makes, with the same durable work, and nothing else. Run as
``python bench/repair_bench.py --bare-loop DIR`` it is the whole-process row's command.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import time
from pathlib import Path

import runner
from runner import Bench, Goal, Method, fail, opt

from fixtures.builders.datasets import simpletuner
from fixtures.builders.latents import LOSSLESS_SHAPE, lossless_set, saved_on, st_latent_name
from fixtures.builders.tiny_models import build_tiny_vae

#: Files per folder batch of the bare loop: repair's ``cachedoctor.repair.batch.BATCH`` (64).
BATCH = 64


def fsync_dir(folder):
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def own_data(tensor):
    """``tensor``, cloned only when its storage holds more than it needs (a leaked view): the
    work repair's ``clone-storage`` does, and no more (a ``clone`` of a 128 KB bf16 tensor runs
    on torch's thread pool, which on a busy 2-core machine spins: seconds per 2,000 files)."""
    return tensor.clone() if tensor.untyped_storage().nbytes() != tensor.nbytes else tensor


def durable_loop(folder, batch=BATCH):
    """The bare loop with repair's durability, no more and no less. Per file: read it once,
    ``torch.load(weights_only=True, map_location="cpu")``, ``clone`` a leaked view
    (:func:`own_data`), ``torch.save`` to memory,
    write a temp file beside it and ``fsync`` it (the new bytes are durable before they replace
    the old), hard-link the old file into a quarantine folder (the replaced bytes are kept).
    Per batch of ``batch`` files of the folder: ``fsync`` the quarantine folder (the kept copies
    are durable before any rename), ``os.replace`` each temp file over its target, ``fsync`` the
    folder (the renames are durable), then one record line per file appended to a log and
    flushed, not fsynced: what repair's journal (SQLite WAL, ``synchronous=NORMAL``) promises,
    surviving a killed process, not a power cut. No lock, no check, no read-back, no scan."""
    import torch

    folder = str(folder)
    state = os.path.join(folder, ".bare-loop")
    quarantine = os.path.join(state, "quarantine", "run")
    os.makedirs(quarantine, exist_ok=True)
    names = sorted(e.name for e in os.scandir(folder) if e.is_file())
    with open(os.path.join(state, "journal.log"), "a", encoding="utf-8") as log:
        for start in range(0, len(names), batch):
            done = []
            for name in names[start : start + batch]:
                path = os.path.join(folder, name)
                with open(path, "rb") as f:
                    raw = f.read()
                obj = own_data(torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True))
                buf = io.BytesIO()
                torch.save(obj, buf)
                temp = os.path.join(folder, f".{name}.tmp")
                with open(temp, "wb") as out:
                    out.write(buf.getvalue())
                    out.flush()
                    os.fsync(out.fileno())
                os.link(path, os.path.join(quarantine, name))
                done.append((temp, path))
            fsync_dir(quarantine)
            for temp, path in done:
                os.replace(temp, path)
            fsync_dir(folder)
            log.write("".join(f"{path}\tverified\n" for _temp, path in done))
            log.flush()


def tagged_set(folder, n):
    """``n`` SimpleTuner-like bare bf16 16x64x64 latents saved with storage location ``cuda:0``
    (the issue's set: every file device-tagged, 132,649 bytes), each distinct."""
    import torch

    gen = torch.Generator().manual_seed(20261121)
    pool = [torch.randn(*LOSSLESS_SHAPE, generator=gen).to(torch.bfloat16) for _ in range(4)]
    folder.mkdir(parents=True, exist_ok=True)
    size = 0
    with saved_on("cuda:0"):
        for i in range(n):
            t = pool[i % len(pool)]
            t.view(-1)[0], t.view(-1)[1] = float(i // 256), float(i % 256)  # exact in bf16
            path = folder / st_latent_name(f"img_{i:06d}")
            with open(path, "wb") as out:
                torch.save(t, out)
            size += path.stat().st_size
    return {"files": n, "tagged": n, "leaked": 0, "total_bytes": size}


def build(args, root):
    facts = {}
    if args.only in (None, "lossless"):
        make = tagged_set if args.set == "tagged" else lossless_set
        facts["lossless"] = make(root / "master", args.files)
    if args.only in (None, "recompute"):
        vae = build_tiny_vae(root / "tiny-vae")
        side = args.image_size
        ds = simpletuner(
            root / "simpletuner", args.images, encoder=f"diffusers-vae:{vae}", size=(side, side), target=(side, side)
        )
        facts["recompute"] = {"images": args.images, "image_size": side, "vae": str(vae), "config": str(ds.config)}
    return facts


def api():
    from cachedoctor.layouts import LayoutName, LayoutOptions
    from cachedoctor.repair.journal import new_run_id
    from cachedoctor.repair.model import ItemState
    from cachedoctor.repair.run import RepairOptions, repair, still_broken

    return LayoutName, LayoutOptions, new_run_id, ItemState, RepairOptions, None, repair, still_broken


def verified(results, n, what):
    ItemState = api()[3]
    ok = sum(r.state is ItemState.VERIFIED for r in results)
    if ok != n:
        bad = "; ".join(f"{r.path}: {r.state.value}: {r.message}" for r in results if r.state is not ItemState.VERIFIED)
        fail(f"{what}: {ok} of {n} items verified ({bad[:300]}); the figures would be meaningless")


def repair_call(roots, layout, options, **kw):
    LayoutName, LayoutOptions, _, _, RepairOptions, _, repair, _ = api()
    from cachedoctor.scan import ScanOptions

    options = {"scan": ScanOptions(deep=True), **options}  # as `cachedoctor repair` reads: deep
    return repair(
        roots,
        getattr(LayoutName, layout),
        LayoutOptions(**kw),
        RepairOptions(**options),
        ["cachedoctor", "repair", "--yes"],
        confirm=lambda o: True,
        show_plan=lambda o: None,
    )


def discard(state):
    if hasattr(state, "is_dir"):
        shutil.rmtree(state, ignore_errors=True)


def methods(args, ctx):
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    out, work, counter = [], ctx.root / "runs", [0]

    def fresh(folder=None):  # the master set, hard-linked (repair and the loops write new files only), untimed
        if folder is None:
            counter[0] += 1
            folder = work / f"run-{counter[0]:03d}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for src in sorted((ctx.root / "master").iterdir()):
            try:
                os.link(src, folder / src.name)
            except OSError:
                shutil.copyfile(src, folder / src.name)
        os.sync()
        for src in sorted(folder.iterdir()):  # warm: this machine's page cache drops idle pages
            src.read_bytes()
        return folder

    if "lossless" in ctx.facts:
        n, nbytes = args.files, ctx.facts["lossless"]["total_bytes"]

        def full(folder):
            outcome = repair_call([str(folder)], "NONE", {})
            verified(outcome.results, n, "repair DIR --yes")
            if api()[7](outcome):
                fail("repair DIR --yes: the rescan is not clean")

        def planned():
            folder = fresh()
            actions = repair_call([str(folder)], "NONE", {"dry_run": True}).plan.runnable()
            if len(actions) != n:
                fail(f"the dry run planned {len(actions)} actions for {n} files")
            return folder, actions

        def rewrite(state):  # repair's write stage as run.py drives it: journal, batches, record
            from cachedoctor.repair.act import run_lossless
            from cachedoctor.repair.journal import Journal

            folder, actions = state
            run_id = api()[2]()
            journal = Journal(str(folder))
            journal.start(run_id, ["bench"], None, None, False)
            journal.plan(actions)
            results = []

            def record(result):
                results.append(result)
                journal.record(result)

            def record_many(batch):
                results.extend(batch)
                journal.record_many(batch)

            many = {"record_batch": record_many} if hasattr(journal, "record_many") else {}
            run_lossless(actions, run_id, record, **many)
            journal.finish("done")
            journal.close()
            verified(results, n, "write stage")

        def bare(fsync):
            def run(folder):
                for p in sorted(folder.iterdir()):
                    obj = own_data(torch.load(p, map_location="cpu", weights_only=True))
                    with open(p.with_name("bare-" + p.name), "wb") as f:
                        torch.save(obj, f)
                        if fsync:
                            f.flush()
                            os.fsync(f.fileno())

            return run

        def loop_durable(folder):
            durable_loop(folder)

        warm = fresh()
        full(warm)  # warm-up: imports and first calls
        discard(warm)
        cli_dir = work / "cli"
        python = sys.executable
        cachedoctor = str(Path(python).with_name("cachedoctor"))
        out += [
            Method(
                "repair",
                "lossless: repair DIR --yes (scan+plan+rewrite+rescan)",
                full,
                fresh,
                n,
                nbytes,
                cleanup=discard,
            ),
            Method(
                "rewrite",
                "lossless: write stage (run_lossless + journal)",
                rewrite,
                planned,
                n,
                nbytes,
                cleanup=lambda st: discard(st[0]),
            ),
            Method(
                "loop",
                "lossless: bare torch.load + torch.save, no fsync",
                bare(False),
                fresh,
                n,
                nbytes,
                cleanup=discard,
            ),
            Method(
                "loop_fsync", "lossless: bare loop + fsync of each file", bare(True), fresh, n, nbytes, cleanup=discard
            ),
            Method(
                "durable",
                "lossless: equally durable bare loop (durable_loop)",
                loop_durable,
                fresh,
                n,
                nbytes,
                cleanup=discard,
            ),
        ]
        if not args.no_cli:
            out += [
                Method(
                    "cli_repair",
                    "lossless, whole process: cachedoctor repair DIR --yes -q",
                    prepare=lambda: fresh(cli_dir),
                    items=n,
                    nbytes=nbytes,
                    command=[cachedoctor, "repair", str(cli_dir), "--yes", "-q"],
                    late=True,
                ),
                Method(
                    "cli_durable",
                    "lossless, whole process: python repair_bench.py --bare-loop DIR",
                    prepare=lambda: fresh(cli_dir),
                    items=n,
                    nbytes=nbytes,
                    command=[python, __file__, "--bare-loop", str(cli_dir)],
                    late=True,
                ),
            ]

    if "recompute" in ctx.facts:
        import numpy as np
        from PIL import Image

        from cachedoctor.encoders import load_encoder
        from fixtures.builders.datasets import Dataset

        r = ctx.facts["recompute"]
        spec, side, m = f"diffusers-vae:{r['vae']}", r["image_size"], args.images
        root = ctx.root / "simpletuner"
        ds = Dataset(
            root,
            root / "multidatabackend.json",
            root / "data",
            root / "cache" / "vae",
            sorted((root / "data").glob("*.png")),
        )
        loop_out = ctx.root / "bare-loop-out"
        device = "cuda:0" if args.gpus or args.device.startswith("cuda") else args.device

        def reset():  # every latent missing again, the loop's output gone; untimed
            shutil.rmtree(ds.vae, ignore_errors=True)
            ds.vae.mkdir()
            shutil.rmtree(loop_out, ignore_errors=True)
            loop_out.mkdir()
            os.sync()

        def recompute(_):
            outcome = repair_call(
                [],
                "SIMPLETUNER",
                {
                    "encoders": (spec,),
                    "batch_size": args.batch_size,
                    "device": args.device,
                    "gpus": args.gpus,
                    "workers": args.workers,
                },
                config=str(ds.config),
            )
            verified(outcome.results, m, "repair --config (recompute)")

        def encode_loop(_):
            enc = load_encoder(spec)
            enc.load(device)
            s = side // 8 * enc.downscale  # SimpleTuner records latent = target / 8
            for i in range(0, m, args.batch_size):
                chunk = ds.images[i : i + args.batch_size]
                pixels = []
                for path in chunk:
                    with Image.open(path) as opened:
                        im = opened.convert("RGB").resize((s, s), Image.Resampling.LANCZOS)
                    pixels.append(
                        torch.from_numpy(np.asarray(im, dtype=np.uint8).copy()).permute(2, 0, 1).float() / 127.5 - 1.0
                    )
                latents = enc.scaling.apply(enc.encode(torch.stack(pixels))["latent"]).to(torch.bfloat16)
                for path, latent in zip(chunk, latents, strict=True):
                    with open(loop_out / ds.latent_path(path).name, "wb") as f:
                        torch.save(latent.clone(), f)

        reset()
        t0 = time.perf_counter()
        enc = load_encoder(spec)  # warm-up: the first batch of this shape
        enc.load(device)
        enc.encode(torch.zeros(args.batch_size, 3, side // 8 * enc.downscale, side // 8 * enc.downscale))
        print(f"recompute warm-up batch {time.perf_counter() - t0:.1f} s; torch threads {torch.get_num_threads()}")
        out += [
            Method("recompute", "recompute: repair --config --encoder", recompute, reset, m),
            Method("encode_loop", "recompute: bare PIL + resize + encode + save", encode_loop, reset, m),
        ]
    return out


BENCH = Bench(
    name="repair_bench",
    title="cachedoctor repair benchmark",
    schema="cachedoctor.bench.repair/2",
    build=build,
    methods=methods,
    repeat=3,
    statistic="best",
    budget=80,
    alternate=True,
    options=[
        opt("--files", type=int, default=2000, metavar="N", help="files needing a lossless fix (default 2000)"),
        opt("--images", type=int, default=200, metavar="M", help="images whose latents are recomputed"),
        opt("--batch-size", type=int, default=8, metavar="B", help="encoder batch, repair and loop alike"),
        opt("--image-size", type=int, default=256, metavar="S", help="SxS random-pixel PNGs (multiple of 8)"),
        opt("--device", default="cpu", help="recompute device (cuda: the bare loop runs on cuda:0)"),
        opt("--gpus", type=int, metavar="G", help="RepairOptions(gpus=G)"),
        opt("--workers", type=int, default=1, metavar="W", help="recompute worker processes (default 1)"),
        opt("--threads", type=int, metavar="T", help="torch.set_num_threads(T) here, repair and loops alike"),
        opt("--only", choices=("lossless", "recompute"), help="run one of the two measurements"),
        opt(
            "--set",
            choices=("tagged", "mixed"),
            default="tagged",
            help="lossless set: every file device-tagged (default), or half tagged, half leaked views",
        ),
        opt("--no-cli", action="store_true", help="skip the whole-process lossless rows"),
    ],
    quick={"files": 100, "images": 16, "image_size": 64, "repeat": 1},
    goals=[
        Goal("lossless: full repair vs the equally durable bare loop (items/s)", "repair", "durable", 0.8),
        Goal(
            "lossless, whole process: cachedoctor repair vs the durable loop (items/s)",
            "cli_repair",
            "cli_durable",
            0.8,
        ),
        Goal("lossless: write stage vs the equally durable bare loop (items/s)", "rewrite", "durable", info=True),
        Goal("lossless: write stage vs bare load+save, no fsync (items/s)", "rewrite", "loop", info=True),
        Goal("recompute: repair vs bare PIL+encode+save loop (items/s)", "recompute", "encode_loop", 0.9),
        Goal("lossless: full repair vs bare loop (items/s)", "repair", "loop", info=True),
        Goal("lossless: full repair vs write stage (items/s)", "repair", "rewrite", info=True),
    ],
)

if __name__ == "__main__":
    if sys.argv[1:2] == ["--bare-loop"] and len(sys.argv) == 3:
        durable_loop(sys.argv[2])
        sys.exit(0)
    sys.exit(runner.main(BENCH))
