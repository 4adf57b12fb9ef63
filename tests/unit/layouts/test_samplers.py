"""The samplers' models (``layouts/samplers/``) on hand-computed cases, and against the numbers
each trainer's own sampler code gave on the same buckets (``samplers_golden.json``, made offline:
see its ``about``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cachedoctor.layouts.samplers.interface import Buckets
from cachedoctor.layouts.samplers.registry import SAMPLERS, sampler_for

GOLDEN = json.loads((Path(__file__).with_name("samplers_golden.json")).read_text(encoding="utf-8"))
SIMPLETUNER, SANA, KOHYA = SAMPLERS["simpletuner"], SAMPLERS["sana"], SAMPLERS["kohya"]
ONETRAINER = SAMPLERS["onetrainer"]
NO_PAD = {"max_train_steps": 1000}  # SimpleTuner pads each bucket's split only without max_train_steps


def test_simpletuner_unpadded_split_leaves_one_rank_a_step_short() -> None:
    # 2 ranks, buckets of 5 and 5, batch 2, max_train_steps set: rank 0 holds 3 + 3, rank 1 2 + 2.
    # Rank 0: a (2 of 3), b (2 of 3), a (its last one, topped up), then the sampler retires b with
    # one image unseen: 3 steps. Rank 1: a, b, then both are empty: 2 steps.
    split = SIMPLETUNER.split(Buckets("d", {"a": 5, "b": 5}, 0, options=NO_PAD), 2, 2)
    assert split.refused is None
    assert split.steps == (3, 2)
    assert split.by_bucket == {"a": (2, 1), "b": (1, 1)}
    assert split.responsible() == ["a"]
    assert split.notes == (
        "after a topped-up batch SimpleTuner's sampler retires the next bucket for the rest of the "
        "epoch: bucket(s) b lose their unseen images in some epochs",
    )


def test_simpletuner_repeats_run_the_sampler_again_within_the_epoch() -> None:
    # repeats 1: two sampler passes per training epoch, each starting one bucket further on
    split = SIMPLETUNER.split(Buckets("d", {"a": 5, "b": 5}, 1, options=NO_PAD), 2, 2)
    assert split.steps == (6, 4)


def test_simpletuner_padded_split_is_even() -> None:
    split = SIMPLETUNER.split(Buckets("d", {"a": 5, "b": 5}, 0), 2, 2)
    assert split.steps == (3, 3) and not split.uneven


def test_simpletuner_refuses_a_bucket_below_the_effective_batch() -> None:
    # buckets of 5 and 3 on 2 ranks at batch 2: the effective batch is 4, and 3 < 4
    split = SIMPLETUNER.split(Buckets("d", {"a": 5, "b": 3}, 0, options=NO_PAD), 2, 2)
    assert split.refused == (
        "SimpleTuner stops at start-up: bucket(s) b (3) hold fewer than the effective batch of 4 "
        "(batch 2 x 2 ranks x 1 accumulation)"
    )
    # repeats count in that test: 3 x (1 + 1) = 6 >= 4
    assert SIMPLETUNER.split(Buckets("d", {"a": 5, "b": 3}, 1, options=NO_PAD), 2, 2).refused is None


def test_simpletuner_oversubscription_repeats_short_buckets_evenly() -> None:
    # 3 images, effective batch 4: repeated once (6), scheduled up to 8, 4 per rank: 2 batches each
    options = {"allow_dataset_oversubscription": True, "max_train_steps": 10}
    split = SIMPLETUNER.split(Buckets("d", {"a": 3}, 0, options=options), 2, 2)
    assert split.refused is None and split.steps == (2, 2)


def test_simpletuner_prunes_small_buckets_only_with_minimum_image_size() -> None:
    buckets = {"a": 8, "b": 1}
    kept = SIMPLETUNER.split(Buckets("d", buckets, 0, options={"minimum_image_size": 64}), 1, 2)
    assert kept.dropped == {"b": 1} and kept.refused is None and kept.steps == (4,)
    assert SIMPLETUNER.split(Buckets("d", buckets, 0), 1, 2).refused is not None


def test_sana_shards_items_before_batching() -> None:
    # dataset order a a a a a b b b; 2 ranks take positions 0-3 and 4-7; batch 2, drop_last
    split = SANA.split(Buckets("d", {"a": 5, "b": 3}, sequence=[0, 0, 0, 0, 0, 1, 1, 1]), 2, 2)
    assert split.steps == (2, 1)
    assert split.by_bucket == {"a": (2, 0), "b": (0, 1)}
    assert split.dropped == {"a": 1, "b": 1}  # rank 1's lone a and its third b, every epoch


def test_sana_without_an_order_spreads_each_bucket_evenly() -> None:
    # a: 5 -> 3 and 2; b: 3 -> 1 and 2 (its remainder dealt on to rank 1): both ranks hold 4, as
    # their equal ranges would; batch 2: rank 0 takes 1 + 0 steps, rank 1 1 + 1
    split = SANA.split(Buckets("d", {"a": 5, "b": 3}), 2, 2)
    assert split.steps == (1, 2)
    # batch 1 cannot be uneven whatever the order: the ranges are equal
    assert SANA.split(Buckets("d", {"a": 5, "b": 3, "c": 1}), 2, 1).steps == (4, 4)


def test_kohya_ranks_are_evened_by_accelerate() -> None:
    split = KOHYA.split(Buckets("d", {"a": 5, "b": 3}, listed={"a": 10, "b": 3}), 2, 2)
    assert split.steps == (4, 4) and not split.uneven and split.dropped == {}
    assert split.notes == (
        "accelerate repeats 1 batch(es) from the start of the epoch so every rank takes the same number of steps",
    )


def test_unknown_trainer_falls_back_to_sana() -> None:
    assert sampler_for("invokeai") == (SANA, False)
    assert sampler_for(None) == (SANA, False)
    assert sampler_for("kohya") == (KOHYA, True)
    assert sampler_for("onetrainer") == (ONETRAINER, True)


@pytest.mark.parametrize("case", GOLDEN["simpletuner"]["cases"], ids=lambda c: f"W{c['world_size']}B{c['batch_size']}")
def test_simpletuner_matches_its_sampler(case: dict[str, Any]) -> None:
    options = NO_PAD if case["max_train_steps"] else {}
    buckets = Buckets("d", case["counts"], case["repeats"], options=options)
    split = SIMPLETUNER.split(buckets, case["world_size"], case["batch_size"])
    second = split.epochs[0] if split.epochs else split.steps
    assert [list(split.steps), list(second)] == case["epochs"]


@pytest.mark.parametrize("case", GOLDEN["sana"]["cases"], ids=lambda c: f"W{c['world_size']}B{c['batch_size']}")
def test_sana_matches_its_sampler(case: dict[str, Any]) -> None:
    sequence = case["sequence"]
    counts = {label: sequence.count(i) for i, label in enumerate(case["labels"])}
    split = SANA.split(Buckets("d", counts, sequence=sequence), case["world_size"], case["batch_size"])
    assert list(split.steps) == case["steps"]
    assert split.dropped == case["never_trained"]


@pytest.mark.parametrize("case", GOLDEN["kohya"]["cases"], ids=lambda c: f"W{c['world_size']}B{c['batch_size']}")
def test_kohya_matches_accelerate(case: dict[str, Any]) -> None:
    split = KOHYA.split(Buckets("d", case["listed"]), case["world_size"], case["batch_size"])
    assert list(split.steps) == case["steps"]


def test_onetrainer_batches_at_the_global_batch_and_never_unevens_the_ranks() -> None:
    # 4 ranks at batch 2: AspectBatchSorting cuts global batches of 8. 512x512: 19 images, 2
    # global batches (16), 3 sit out each epoch; 448x576: 7 < 8, no batch at all, never trains.
    # Each global batch gives every rank one step: 2 steps on every rank.
    split = ONETRAINER.split(Buckets("d", {"512x512": 19, "448x576": 7}), 4, 2)
    assert split.steps == (2, 2, 2, 2) and not split.uneven
    assert split.by_bucket == {"512x512": (2, 2, 2, 2), "448x576": (0, 0, 0, 0)}
    assert split.dropped == {"448x576": 7}
    assert split.notes == (
        "each epoch 3 image(s) of fuller buckets sit out (each bucket's remainder below the global "
        "batch of 8, drawn afresh every epoch)",
    )
    # the same buckets on one GPU at batch 2: both buckets train (9 + 3 steps), 1 + 1 sit out
    one = ONETRAINER.split(Buckets("d", {"512x512": 19, "448x576": 7}), 1, 2)
    assert one.steps == (12,) and one.dropped == {}


@pytest.mark.parametrize("case", GOLDEN["onetrainer"]["cases"], ids=lambda c: f"W{c['world_size']}B{c['batch_size']}")
def test_onetrainer_matches_mgds(case: dict[str, Any]) -> None:
    split = ONETRAINER.split(Buckets("d", case["counts"]), case["world_size"], case["batch_size"])
    assert list(split.steps) == case["steps"]
    assert {b: list(s) for b, s in split.by_bucket.items()} == case["by_bucket"]
    assert split.dropped == case["never_trained"]
    global_batch = case["world_size"] * case["batch_size"]
    sat_out = {b: n % global_batch for b, n in case["counts"].items() if n % global_batch}
    assert sat_out == case["left_out_epoch_0"]


def test_golden_cases_include_uneven_and_repeated_ones() -> None:
    assert sum(1 for c in GOLDEN["simpletuner"]["cases"] if c["repeats"]) >= 10
    uneven = [c for c in GOLDEN["simpletuner"]["cases"] if any(len(set(e)) > 1 for e in c["epochs"])]
    assert len(uneven) >= 5
    assert sum(1 for c in GOLDEN["sana"]["cases"] if len(set(c["steps"])) > 1) >= 10
    assert sum(1 for c in GOLDEN["onetrainer"]["cases"] if c["never_trained"] and c["world_size"] > 1) >= 3


def test_simpletuner_repeats_cost_one_cycle_not_one_pass_each() -> None:
    """A dataset's ``repeats`` is untrusted: 10**30 passes are a cycle of sampler epochs run once
    and multiplied (each epoch depends only on the bucket it starts at)."""
    one = SIMPLETUNER.split(Buckets("d", {"a": 8}, 0), 2, 2)
    many = SIMPLETUNER.split(Buckets("d", {"a": 8}, 10**30), 2, 2)
    assert one.steps == (2, 2) and many.steps == (2 * (10**30 + 1), 2 * (10**30 + 1))
