#!/usr/bin/env python3
"""cachedoctor repair against the bare loops a user would otherwise write (bench/README.md):
lossless rewrites of N files, and recomputes of M missing latents through a tiny real VAE."""

from __future__ import annotations

import os
import shutil
import sys
import time

import runner
from runner import Bench, Goal, Method, fail, opt

from fixtures.builders.datasets import simpletuner
from fixtures.builders.latents import lossless_set
from fixtures.builders.tiny_models import build_tiny_vae


def build(args, root):
    facts = {}
    if args.only in (None, "lossless"):
        facts["lossless"] = lossless_set(root / "master", args.files)
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
    from cachedoctor.repair.run import RepairOptions, _run_local, repair, still_broken

    return LayoutName, LayoutOptions, new_run_id, ItemState, RepairOptions, _run_local, repair, still_broken


def verified(results, n, what):
    ItemState = api()[3]
    ok = sum(r.state is ItemState.VERIFIED for r in results)
    if ok != n:
        bad = "; ".join(f"{r.path}: {r.state.value}: {r.message}" for r in results if r.state is not ItemState.VERIFIED)
        fail(f"{what}: {ok} of {n} items verified ({bad[:300]}); the figures would be meaningless")


def repair_call(roots, layout, options, **kw):
    LayoutName, LayoutOptions, _, _, RepairOptions, _, repair, _ = api()
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

    def fresh():  # the master set, hard-linked (repair and the loops write new files only), untimed
        counter[0] += 1
        folder = work / f"run-{counter[0]:03d}"
        folder.mkdir(parents=True)
        for src in sorted((ctx.root / "master").iterdir()):
            try:
                os.link(src, folder / src.name)
            except OSError:
                shutil.copyfile(src, folder / src.name)
        os.sync()
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

        def rewrite(state):
            actions = state[1]
            run_id = api()[2]()
            verified([api()[5](a, run_id) for a in actions], n, "per-file rewrite")

        def bare(fsync):
            def run(folder):
                for p in sorted(folder.iterdir()):
                    obj = torch.load(p, map_location="cpu", weights_only=True).clone()
                    with open(p.with_name("bare-" + p.name), "wb") as f:
                        torch.save(obj, f)
                        if fsync:
                            f.flush()
                            os.fsync(f.fileno())

            return run

        warm = fresh()
        full(warm)  # warm-up: imports and first calls
        discard(warm)
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
                "lossless: per-file rewrite (_run_local per action)",
                rewrite,
                planned,
                n,
                nbytes,
                cleanup=lambda st: discard(st[0]),
            ),
            Method(
                "loop", "lossless: bare torch.load + clone + torch.save", bare(False), fresh, n, nbytes, cleanup=discard
            ),
            Method(
                "loop_fsync", "lossless: bare loop + fsync of each file", bare(True), fresh, n, nbytes, cleanup=discard
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
    ],
    quick={"files": 100, "images": 16, "image_size": 64, "repeat": 1},
    goals=[
        Goal("lossless: per-file rewrite vs bare load+clone+save (items/s)", "rewrite", "loop", 0.8),
        Goal("recompute: repair vs bare PIL+encode+save loop (items/s)", "recompute", "encode_loop", 0.9),
        Goal("lossless: full repair vs bare loop (items/s)", "repair", "loop", info=True),
        Goal("lossless: per-file rewrite vs bare loop + fsync (items/s)", "rewrite", "loop_fsync", info=True),
        Goal("lossless: full repair vs per-file rewrite (items/s)", "repair", "rewrite", info=True),
    ],
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCH))
