"""``config-hazard`` end to end: the installed console script, a real subprocess, ``scan --config``
on a SimpleTuner dataset whose config turns on ``vae_cache_clear_each_epoch`` for an 8-process run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = shutil.which("cachedoctor", path=os.path.dirname(sys.executable)) or shutil.which("cachedoctor")
HEALTHY = Path(__file__).resolve().parents[2] / "fixtures" / "datasets" / "simpletuner-healthy"


@pytest.mark.slow
def test_scan_config_reports_the_setting_and_fails_on_warning(tmp_path: Path) -> None:
    assert SCRIPT is not None, "the cachedoctor console script is not installed (pip install -e .)"
    root = tmp_path / "st"
    shutil.copytree(HEALTHY, root)
    config = root / "config" / "multidatabackend.json"
    run = [SCRIPT, "scan", "--config", str(config), "--workers", "1", "--fail-on", "warning", "--progress", "none"]
    datasets = json.loads(config.read_text())
    next(d for d in datasets if d["id"] == "photos")["vae_cache_clear_each_epoch"] = True
    config.write_text(json.dumps(datasets))
    trainer = root / "config" / "config.json"
    trainer.write_text(json.dumps({**json.loads(trainer.read_text()), "num_processes": 8}))
    done = subprocess.run(run, capture_output=True, text=True, cwd=tmp_path)
    assert (done.returncode, done.stderr) == (1, ""), done.stdout + done.stderr
    assert "config-hazard │ warning  │ 1     │ none" in done.stdout
    flat = " ".join(done.stdout.split())
    assert (
        "st/config/multidatabackend.json: dataset 'photos': vae_cache_clear_each_epoch: true on 8 ranks: "
        "SimpleTuner deletes this VAE cache" in flat
    )
    assert 'set "vae_cache_clear_each_epoch": false (bghira/SimpleTuner#848, bghira/SimpleTuner#1474)' in flat
