"""``rank-imbalance`` end to end: the SimpleTuner fixture dataset scanned for an 8-GPU run, with
the run's size from the flags, from ``cachedoctor.toml``, and from SimpleTuner's ``config.json``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.cli_run import cli, scan_json

REPO = Path(__file__).resolve().parents[2]
DATASET = REPO / "fixtures" / "datasets" / "simpletuner-healthy"
CONFIG = DATASET / "config" / "multidatabackend.json"
PHOTOS = (
    "SimpleTuner stops at start-up: bucket(s) 1.33 (1), 1.0 (7), 0.75 (2) hold fewer than the effective "
    "batch of 32 (batch 4 x 8 ranks x 1 accumulation); lower the batch size or the GPU count, or add images"
)


def rank_findings(report: dict) -> list[tuple[str, str, str]]:
    return [
        (f["kind"], f["path"], f["message"])
        for f in report["findings"]
        if f["kind"] in ("rank-imbalance", "dropped-bucket")
    ]


def test_flags_predict_that_simpletuner_refuses_the_split() -> None:
    report = scan_json("--no-state", "--config", str(CONFIG), "--world-size", "8", "--batch-size", "4")
    found = rank_findings(report)
    assert [f[1] for f in found] == [
        str(DATASET / "cache" / "vae" / "renders"),
        str(DATASET / "output" / "cache" / "vae" / "sdxl" / "photos"),
    ]
    assert found[1] == ("rank-imbalance", str(DATASET / "output" / "cache" / "vae" / "sdxl" / "photos"), PHOTOS)
    photos = next(f for f in report["findings"] if f["path"].endswith("photos"))
    assert photos["details"] == {
        "dataset": "photos",
        "trainer": "simpletuner",
        "trainer_known": True,
        "world_size": 8,
        "batch_size": 4,
        "steps": [0] * 8,
        "buckets": {"1.33": 1, "1.0": 7, "0.75": 2},
    }
    assert report["summary"]["by_kind"]["rank-imbalance"] == 2


def test_one_gpu_at_batch_one_is_clean() -> None:
    report = scan_json("--no-state", "--config", str(CONFIG), "--world-size", "1", "--batch-size", "1")
    assert rank_findings(report) == []


def test_world_and_batch_size_from_cachedoctor_toml(tmp_path: Path) -> None:
    (tmp_path / "cachedoctor.toml").write_text("world-size = 8\nbatch-size = 4\n", encoding="utf-8")
    code, out, err = cli("scan", "--format", "json", "--no-state", "--config", str(CONFIG), cwd=str(tmp_path))
    assert (code, err) == (1, "")
    assert rank_findings(json.loads(out))[1][2] == PHOTOS


def test_world_and_batch_size_from_simpletuners_config_and_flags_win(tmp_path: Path) -> None:
    root = tmp_path / "st"
    shutil.copytree(DATASET, root)
    trainer = json.loads((root / "config" / "config.json").read_text(encoding="utf-8"))
    trainer.update({"--num_processes": 2, "train_batch_size": 2})
    (root / "config" / "config.json").write_text(json.dumps(trainer), encoding="utf-8")
    config = str(root / "config" / "multidatabackend.json")
    report = scan_json("--no-state", "--config", config)
    photos = next(f for f in report["findings"] if f["path"].endswith("photos"))
    assert photos["message"].startswith(
        "SimpleTuner stops at start-up: bucket(s) 1.33 (1), 0.75 (2) hold fewer than the effective batch of 4 "
        "(batch 2 x 2 ranks x 1 accumulation)"
    )
    assert rank_findings(scan_json("--no-state", "--config", config, "--world-size", "1", "--batch-size", "1")) == []


def test_only_the_world_size_is_a_note_not_a_finding() -> None:
    code, out, err = cli("scan", "--no-state", "--config", str(CONFIG), "--world-size", "8")
    assert (code, err) == (0, "")
    flat = " ".join(out.split())
    for dataset in ("photos", "renders"):
        note = f"note: dataset '{dataset}': no batch size (--batch-size) given or in the trainer's config; rank balance not judged"
        assert note in flat
    assert "No findings." in flat


def test_without_a_dataset_the_latent_shapes_read_are_the_buckets(tmp_path: Path) -> None:
    cache = tmp_path / "vae"
    shutil.copytree(DATASET / "output" / "cache" / "vae", cache)
    args = ("--layout", "none", "--world-size", "2", "--batch-size", "3")
    first = scan_json(str(cache), *args)
    [imbalance] = first["findings"]  # no dropped-bucket: which images an unknown trainer never trains is a guess
    assert (imbalance["kind"], imbalance["path"]) == ("rank-imbalance", str(cache))
    assert imbalance["details"]["trainer_known"] is False
    assert sum(imbalance["details"]["images"].values()) >= 1
    # a rescan takes both folders from the state database, with the counts recorded there
    again = scan_json(str(cache), *args)
    assert [f["details"] for f in again["findings"]] == [imbalance["details"]]
    assert again["summary"]["files_reused"] == first["summary"]["files_read"]


def test_counts_missing_from_the_state_database_are_taken_file_by_file(tmp_path: Path) -> None:
    """A scan without the run's size records its folders without latent shapes; the pre-flight
    after it (the same folders, now with the size) must judge them all the same."""
    cache = tmp_path / "vae"
    shutil.copytree(DATASET / "output" / "cache" / "vae", cache)
    args = ("--layout", "none", "--world-size", "2", "--batch-size", "3")
    fresh = scan_json(str(cache), *args, "--no-state")
    assert cli("scan", str(cache), "--layout", "none")[0] == 0  # records the folders without counts
    after = scan_json(str(cache), *args)
    assert [f["kind"] for f in after["findings"]] == ["rank-imbalance"]
    assert [f["details"] for f in after["findings"]] == [f["details"] for f in fresh["findings"]]
    assert after["summary"]["files_reused"] == fresh["summary"]["files_read"]  # from the rows, not read again


ONETRAINER = REPO / "fixtures" / "trainers" / "onetrainer" / "cache"
#: the OneTrainer fixture's 6 images, one per bucket but one (crop resolutions from its aggregate.pt)
OT_DROPPED = (
    "6 image(s) never train (OneTrainer's sampler, batch 2 on 2 rank(s)): bucket(s) 128x192 (2), "
    "192x128 (1), 64x192 (1), 128x128 (1), 192x64 (1) (OneTrainer cuts each bucket into global "
    "batches of batch x GPUs = 4; a smaller bucket makes none); add images, lower the batch size, "
    "or drop those buckets"
)


def test_onetrainer_on_two_gpus_drops_buckets_below_the_global_batch_and_keeps_ranks_even() -> None:
    report = scan_json("--no-state", str(ONETRAINER), "--world-size", "2", "--batch-size", "2")
    assert rank_findings(report) == [("dropped-bucket", str(ONETRAINER), OT_DROPPED)]
    # on one GPU at batch 2 the bucket of two makes a batch; the four single images still do not
    one = rank_findings(scan_json("--no-state", str(ONETRAINER), "--world-size", "1", "--batch-size", "2"))
    assert [f[2].split(":")[0] for f in one] == ["4 image(s) never train (OneTrainer's sampler, batch 2 on 1 rank(s))"]


def test_onetrainer_run_size_from_its_saved_training_config_and_flags_win(tmp_path: Path) -> None:
    # OneTrainer's defaults: the cache in workspace-cache/run, the config copy in workspace/run/config/
    cache = tmp_path / "workspace-cache" / "run"
    shutil.copytree(ONETRAINER, cache)
    saved = tmp_path / "workspace" / "run" / "config"
    saved.mkdir(parents=True)
    config = {"cache_dir": "workspace-cache/run", "batch_size": 2, "multi_gpu": True, "device_indexes": "0,1"}
    (saved / "2026-11-24_00-00-00.json").write_text(json.dumps(config), encoding="utf-8")
    found = rank_findings(scan_json("--no-state", str(cache)))
    assert found == [("dropped-bucket", str(cache), OT_DROPPED)]
    assert rank_findings(scan_json("--no-state", str(cache), "--world-size", "1", "--batch-size", "1")) == []


def test_simpletuner_process_count_from_the_accelerate_config_it_names(tmp_path: Path) -> None:
    root = tmp_path / "st"
    shutil.copytree(DATASET, root)
    accelerate = tmp_path / "accelerate.yaml"
    accelerate.write_text("compute_environment: LOCAL_MACHINE\nnum_machines: 1\nnum_processes: 2\n", encoding="utf-8")
    trainer = json.loads((root / "config" / "config.json").read_text(encoding="utf-8"))
    trainer.pop("num_processes", None)
    trainer.pop("--num_processes", None)
    trainer.update({"--accelerate_config": str(accelerate), "train_batch_size": 2})
    (root / "config" / "config.json").write_text(json.dumps(trainer), encoding="utf-8")
    report = scan_json("--no-state", "--config", str(root / "config" / "multidatabackend.json"))
    photos = next(f for f in report["findings"] if f["kind"] == "rank-imbalance" and f["path"].endswith("photos"))
    assert photos["details"]["world_size"] == 2
    assert photos["message"].startswith(
        "SimpleTuner stops at start-up: bucket(s) 1.33 (1), 0.75 (2) hold fewer than the effective batch of 4 "
        "(batch 2 x 2 ranks x 1 accumulation)"
    )


def test_repair_says_a_run_that_would_not_start_and_exits_1(tmp_path: Path) -> None:
    """`repair --yes && accelerate launch` must not launch a run SimpleTuner refuses: no file is
    wrong, nothing is repaired, and the exit code is still 1, with the finding said."""
    copy = tmp_path / "st"
    shutil.copytree(DATASET, copy)
    settings = copy / "config" / "config.json"
    data = json.loads(settings.read_text())
    data.update(num_processes=8, train_batch_size=4)
    settings.write_text(json.dumps(data))
    config = str(copy / "config" / "multidatabackend.json")
    for mode in ("--dry-run", "--yes"):
        code, out, err = cli("repair", "--config", config, mode, "--workers", "1")
        said = " ".join(out.split())
        assert (code, err) == (1, ""), mode
        assert "error: rank-imbalance: " in said and "SimpleTuner stops at start-up" in said
        assert "nothing to repair" in said
