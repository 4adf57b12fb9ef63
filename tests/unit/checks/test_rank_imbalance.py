"""``rank-imbalance`` and ``dropped-bucket`` on a run's buckets, and the census that finds them
in a dataset plan (before the scan consumes it)."""

from __future__ import annotations

from cachedoctor.checks import RunView
from cachedoctor.checks.dropped_bucket import DroppedBucket
from cachedoctor.checks.rank_imbalance import RankImbalance
from cachedoctor.findings import Fix, Severity
from cachedoctor.layouts.interface import DatasetPlan, Expected
from cachedoctor.layouts.samplers.census import gather
from cachedoctor.layouts.samplers.interface import Buckets, Sampling


def run_of(*buckets: Buckets) -> RunView:
    return RunView(None, None, None, buckets)


def test_uneven_simpletuner_split_is_an_error_naming_the_bucket() -> None:
    buckets = Buckets(
        "photos", {"1.0": 5, "0.75": 5}, 0, "simpletuner", None, 2, 2, {"max_train_steps": 500}, (), "/c/vae"
    )
    [finding] = RankImbalance().check_run(run_of(buckets))
    assert (finding.kind, finding.severity, finding.fix, finding.path) == (
        "rank-imbalance",
        Severity.ERROR,
        Fix.NONE,
        "/c/vae",
    )
    assert finding.message == (
        "2 ranks at batch 2 (SimpleTuner's sampler): ranks take 2 to 3 steps per epoch; bucket(s) 1.0 "
        "split unevenly. The short rank waits at a collective the others never reach (NCCL timeout): "
        "change the batch size or the GPU count, or drop or fill those buckets; or unset max_train_steps "
        "(SimpleTuner then pads each bucket to the same count on every rank)"
    )
    assert finding.details["steps"] == [3, 2]
    assert finding.details["by_bucket"] == {"1.0": [2, 1]}
    assert finding.details["images"] == {"1.0": 5}
    assert finding.details["trainer_known"] is True
    assert list(DroppedBucket().check_run(run_of(buckets))) == []


def test_even_split_is_no_finding() -> None:
    buckets = Buckets("photos", {"1.0": 8, "0.75": 4}, 0, "simpletuner", None, 2, 2, {}, (), "/c/vae")
    assert list(RankImbalance().check_run(run_of(buckets))) == []


def test_refused_split_names_the_short_buckets() -> None:
    buckets = Buckets("photos", {"1.0": 40, "1.33": 3}, 0, "simpletuner", None, 4, 8, {}, (), "/c/vae")
    [finding] = RankImbalance().check_run(run_of(buckets))
    assert finding.message == (
        "SimpleTuner stops at start-up: bucket(s) 1.33 (3) hold fewer than the effective batch of 32 "
        "(batch 4 x 8 ranks x 1 accumulation); lower the batch size or the GPU count, or add images"
    )
    assert finding.details["buckets"] == {"1.0": 40, "1.33": 3}


def test_unknown_trainer_is_modelled_as_sana_and_says_so() -> None:
    buckets = Buckets("manifest", {"8x8": 5, "12x16": 3}, None, None, None, 2, 2, {}, (0, 0, 0, 0, 0, 1, 1, 1), "/c")
    [imbalance] = RankImbalance().check_run(run_of(buckets))
    assert "(trainer unknown, modelled as Sana's sampler)" in imbalance.message
    assert imbalance.details["steps"] == [2, 1] and imbalance.details["trainer_known"] is False
    # which images an unknown trainer never trains is a guess (most shuffle): no dropped-bucket
    assert list(DroppedBucket().check_run(run_of(buckets))) == []


def test_kohya_is_never_uneven() -> None:
    buckets = Buckets("datasets[1]", {"64x64": 5, "96x64": 3}, 1, "kohya", None, 4, 8, {}, (), "/img")
    assert list(RankImbalance().check_run(run_of(buckets))) == []
    assert list(DroppedBucket().check_run(run_of(buckets))) == []


def test_onetrainer_on_eight_gpus_drops_a_bucket_one_gpu_would_train() -> None:
    # batch 4 on 8 GPUs: mgds batches each bucket by 32; the 20 portraits make no batch
    buckets = Buckets("onetrainer", {"512x512": 70, "512x768": 20}, None, "onetrainer", None, 4, 8, {}, (), "/c")
    assert list(RankImbalance().check_run(run_of(buckets))) == []
    [dropped] = DroppedBucket().check_run(run_of(buckets))
    assert dropped.message == (
        "20 image(s) never train (OneTrainer's sampler, batch 4 on 8 rank(s)): bucket(s) 512x768 (20) "
        "(OneTrainer cuts each bucket into global batches of batch x GPUs = 32; a smaller bucket makes "
        "none); add images, lower the batch size, or drop those buckets"
    )
    one_gpu = Buckets("onetrainer", {"512x512": 70, "512x768": 20}, None, "onetrainer", None, 4, 1, {}, (), "/c")
    assert list(DroppedBucket().check_run(run_of(one_gpu))) == []


def test_census_takes_onetrainers_bucket_counts_from_its_index() -> None:
    plan = DatasetPlan("onetrainer", ["/c"])
    plan.add(Expected("/c/image/g/variation-0/0.pt", "/img/a.png", "image", latent_hw=(64, 64)))
    plan.add(Expected("/c/image/g/variation-1/0.pt", "/img/a.png", "image", latent_hw=(64, 64)))
    plan.sampling.append(
        Sampling("onetrainer", "onetrainer", ("/c",), batch_size=2, world_size=1, counts={"512x512": 1})
    )
    [buckets], notes = gather(plan, None, None)
    assert (buckets.trainer, dict(buckets.counts), buckets.world_size, buckets.batch_size) == (
        "onetrainer",
        {"512x512": 1},
        1,
        2,
    )
    assert notes == []


def _plan(n_square: int, n_wide: int, sampling: list[Sampling]) -> DatasetPlan:
    plan = DatasetPlan("kohya", ["/img"])
    plan.sampling.extend(sampling)
    for i in range(n_square):
        plan.add(Expected(f"/img/10_a/s{i}.npz", f"/img/10_a/s{i}.png", latent_hw=(8, 8)))
    for i in range(n_wide):
        plan.add(Expected(f"/img/2_b/w{i}.npz", f"/img/2_b/w{i}.png", latent_hw=(8, 12)))
    plan.add(Expected("/img/10_a/s0_te.npz", "/img/10_a/s0.txt", "text"))
    return plan


def test_census_counts_buckets_with_each_subsets_repeats() -> None:
    subsets = [
        Sampling("kohya", "kohya", ("/img/10_a",), repeats=10, listed_times=10),
        Sampling("kohya", "kohya", ("/img/2_b",), repeats=2, listed_times=2),
    ]
    [buckets], notes = gather(_plan(3, 2, subsets), 4, 2)
    assert notes == []
    assert (buckets.name, buckets.trainer, buckets.world_size, buckets.batch_size) == ("kohya", "kohya", 4, 2)
    assert dict(buckets.counts) == {"8x8": 3, "8x12": 2}
    assert dict(buckets.listed or {}) == {"8x8": 30, "8x12": 4}
    assert list(buckets.sequence) == [0, 0, 0, 1, 1]


def test_census_flags_win_over_the_config_and_a_missing_one_is_a_note() -> None:
    plan = _plan(3, 0, [Sampling("photos", "simpletuner", ("/img",), batch_size=4, world_size=8)])
    [buckets], _ = gather(plan, 2, None)
    assert (buckets.world_size, buckets.batch_size) == (2, 4)
    assert gather(_plan(3, 0, []), 8, None) == (
        [],
        ["dataset 'kohya': no batch size (--batch-size) given or in the trainer's config; rank balance not judged"],
    )


def test_census_is_silent_when_nothing_says_multi_gpu() -> None:
    assert gather(_plan(3, 2, []), None, None) == ([], [])
    assert gather(None, 8, 4) == ([], [])  # no plan: the scan counts the latent shapes instead


def test_census_takes_simpletuners_own_bucket_index() -> None:
    index = {"1.0": 7, "0.75": 2}
    plan = _plan(3, 2, [Sampling("photos", "simpletuner", ("/img",), repeats=0, counts=index)])
    plan.layout = "simpletuner"
    [buckets], _ = gather(plan, 2, 1)
    assert dict(buckets.counts) == index and buckets.trainer == "simpletuner"


def test_latent_shapes_exclude_text_embeds() -> None:
    from cachedoctor.layouts.samplers.census import latent_hw

    assert latent_hw([("", (16, 64, 48))]) == (64, 48)
    assert latent_hw([("latents", (4, 32, 32)), ("latents_flipped", (4, 32, 32))]) == (32, 32)
    assert latent_hw([("", (1, 77, 2048))]) is None  # a [1, L, D] text embed
    assert latent_hw([("prompt_embeds", (4, 77, 2048))]) is None
