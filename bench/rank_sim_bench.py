#!/usr/bin/env python3
"""The rank simulation (bench/README.md): a dataset plan of N latent entries (default 1,000,000)
over many aspect buckets, counted per bucket (``layouts/samplers/census.py``, the pass the scan
makes before it starts) and dealt to 8 ranks by each trainer's model, as the two run-level
checks do. In memory: the plan is built untimed, no file is written. Goal: census plus every
model under 2 s."""

from __future__ import annotations

import random
import sys
from dataclasses import replace

import runner
from runner import Bench, Goal, Method, fail, opt

MODELS = ("simpletuner", "sana", "kohya", "onetrainer")


def build(args, root):
    return {"items": args.items, "buckets": args.buckets, "world_size": args.world_size, "batch_size": args.batch_size}


def make_plan(args):
    from cachedoctor.layouts.interface import DatasetPlan, Expected

    rng = random.Random(17)
    sizes = [(8 * rng.randint(6, 24), 8 * rng.randint(6, 24)) for _ in range(args.buckets)]
    weights = [0.1 + rng.random() ** 2 for _ in sizes]  # every bucket fills SimpleTuner's effective batch
    plan = DatasetPlan("manifest", ["/cache"])
    folder: dict = {}
    plan.expected["/cache"] = folder
    for i, hw in enumerate(rng.choices(sizes, weights=weights, k=args.items)):
        path = f"/cache/{i:07d}.pt"
        folder[path] = [Expected(path, f"/images/{i:07d}.png", latent_hw=hw)]
    return plan


def setup(args, ctx):
    ctx.plan = make_plan(args)


def methods(args, ctx):
    from cachedoctor.checks import RunView
    from cachedoctor.checks.dropped_bucket import DroppedBucket
    from cachedoctor.checks.rank_imbalance import RankImbalance
    from cachedoctor.layouts.samplers.census import gather
    from cachedoctor.layouts.samplers.registry import SAMPLERS

    w, b, n = args.world_size, args.batch_size, args.items

    def census(_):
        buckets, _notes = gather(ctx.plan, w, b)
        return {"buckets": len(buckets[0].counts)}

    def model(name):
        def run(buckets):
            if name == "simpletuner":  # its unpadded split: the state machine runs on uneven shares
                buckets = replace(buckets, options={"max_train_steps": 1000})
            split = SAMPLERS[name].split(buckets, w, b)
            if split.refused is not None:
                fail(f"{name}: {split.refused}; the figure would time the refusal")
            return {"steps_min": min(split.steps), "steps_max": max(split.steps)}

        return run

    def whole(_):
        buckets, _notes = gather(ctx.plan, w, b)
        run = RunView(ctx.plan, w, b, tuple(buckets))
        found = [*RankImbalance().check_run(run), *DroppedBucket().check_run(run)]
        return {"findings": len(found)}

    def counted():
        return gather(ctx.plan, w, b)[0][0]

    return [
        Method("whole", "census + both checks (sana model: trainer unknown)", whole, items=n),
        Method("census", "census alone (gather)", census, items=n),
        *(
            Method(name, f"{name} model on the counted buckets", model(name), prepare=counted, items=n)
            for name in MODELS
        ),
    ]


BENCH = Bench(
    name="rank_sim_bench",
    title="cachedoctor rank simulation benchmark",
    schema="cachedoctor.bench.rank_sim/1",
    build=build,
    setup=setup,
    methods=methods,
    repeat=5,
    statistic="best",
    budget=120,
    alternate=True,
    options=[
        opt("--items", type=int, default=1_000_000, metavar="N", help="latent entries (default 1,000,000)"),
        opt("--buckets", type=int, default=200, metavar="K", help="aspect buckets (default 200)"),
        opt("--world-size", type=int, default=8, metavar="W", help="ranks (default 8)"),
        opt("--batch-size", type=int, default=4, metavar="B", help="batch size per rank (default 4)"),
    ],
    quick={"items": 20_000, "repeat": 1},
    describe=lambda a: {"items": a.items, "buckets": a.buckets, "version": 1},
    goals=[
        Goal(
            "census + both checks, seconds",
            value=lambda f: f.get("whole", {}).get("seconds_best"),
            target=2.0,
            unit=" s",
        ),
        Goal("census alone, seconds", value=lambda f: f.get("census", {}).get("seconds_best"), info=True, unit=" s"),
        *(
            Goal(f"{m} model, seconds", value=lambda f, m=m: f.get(m, {}).get("seconds_best"), info=True, unit=" s")
            for m in MODELS
        ),
    ],
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCH))
