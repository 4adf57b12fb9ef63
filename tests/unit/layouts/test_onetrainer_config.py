"""OneTrainer's training config as the rank-imbalance census reads it: which config belongs to a
cache, and what it says about the run's size (``layouts/_onetrainer_config.py``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from cachedoctor.layouts import _onetrainer_config
from cachedoctor.layouts.samplers import from_config


def _config(path: Path, **values: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(values), encoding="utf-8")
    return path


def test_the_newest_config_naming_the_cache_wins(tmp_path: Path) -> None:
    cache = tmp_path / "workspace-cache" / "run"
    cache.mkdir(parents=True)
    saved = tmp_path / "workspace" / "run" / "config"
    old = _config(saved / "a.json", cache_dir="workspace-cache/run", batch_size=8)
    new = _config(
        saved / "b.json", cache_dir="workspace-cache/run", batch_size=2, multi_gpu=True, device_indexes="0,1,2"
    )
    _config(saved / "c.json", cache_dir="workspace-cache/other", batch_size=5)  # another run's cache
    os.utime(old, (1_000_000, 1_000_000))
    os.utime(new, (2_000_000, 2_000_000))
    os.utime(saved / "c.json", (3_000_000, 3_000_000))
    run = _onetrainer_config.find(str(cache))
    assert run == _onetrainer_config.OneTrainerRun(str(new), 2, 3, ())


def test_single_gpu_is_one_rank_and_every_visible_gpu_is_unknown(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    _config(tmp_path / "train.json", cache_dir=str(cache), batch_size=4)
    assert _onetrainer_config.find(str(cache)) == _onetrainer_config.OneTrainerRun(
        str(tmp_path / "train.json"), 4, 1, ()
    )
    _config(tmp_path / "train.json", cache_dir=str(cache), batch_size=4, multi_gpu=True, device_indexes="")
    sampling, notes = from_config.onetrainer([str(cache)], {"g": [(512, 512), (512, 768)]})
    assert sampling is not None and (sampling.world_size, sampling.batch_size) == (None, 4)
    assert sampling.counts == {"512x512": 1, "512x768": 1}
    assert notes == [
        f"{tmp_path / 'train.json'}: multi_gpu on every visible GPU; pass --world-size to judge the rank balance"
    ]


def test_balancing_other_than_one_pass_is_a_note(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    concepts = [
        {"name": "faces", "balancing": 2.0, "balancing_strategy": "REPEATS"},
        {"name": "plain", "balancing": 1.0, "balancing_strategy": "REPEATS"},
        {"name": "off", "balancing": 9, "balancing_strategy": "SAMPLES", "enabled": False},
    ]
    _config(cache / "config.json", cache_dir=str(cache), batch_size=1, concepts=concepts)
    _, notes = from_config.onetrainer([str(cache)], {"g": [[64, 64]]})
    assert notes == [
        f"{cache / 'config.json'}: concept balancing other than one pass (faces) is not modelled; the rank "
        "balance counts each cached image once per epoch"
    ]


def test_no_config_leaves_the_run_size_to_the_flags(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    _config(tmp_path / "other.json", cache_dir=str(tmp_path / "elsewhere"), batch_size=4)
    (tmp_path / "broken.json").write_text("{", encoding="utf-8")
    big = {"cache_dir": str(cache), "batch_size": 4, "pad": "x" * (_onetrainer_config._MAX_BYTES + 1)}
    (tmp_path / "metadata.json").write_text(json.dumps(big), encoding="utf-8")  # too big to be a config
    assert _onetrainer_config.find(str(cache)) is None
    sampling, notes = from_config.onetrainer([str(cache)], {"g": [(64, 64), None, "x"]})
    assert sampling is not None and (sampling.world_size, sampling.batch_size, dict(sampling.counts)) == (
        None,
        None,
        {"64x64": 1},
    )
    assert notes == []
    assert from_config.onetrainer([str(cache)], {"g": [None]}) == (None, [])
