"""``manifest build`` works for every layout: from each new trainer's golden cache and its own
dataset config, a manifest whose ``scan --manifest`` is clean, and exact about staleness (by the
source's content, so a changed image is stale whatever its time)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from cli_run import cli
from PIL import Image

GOLDEN = Path(__file__).resolve().parents[2] / "fixtures" / "trainers"
#: trainer folder -> (its dataset config, the cache folder the manifest covers, an image to change)
CASES = {
    "musubi": ("zi.toml", "zi/cache", "zi/images/a_wide.png"),
    "aitoolkit": ("sd15.yaml", "sd15/images", "sd15/images/a_land.png"),
    "diffusion_pipe": ("dataset.toml", "images/cache", "images/a.png"),
}


@pytest.mark.parametrize("trainer", sorted(CASES))
def test_manifest_of_each_trainer_scans_clean_and_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trainer: str
) -> None:
    root = tmp_path / trainer
    shutil.copytree(GOLDEN / trainer, root, ignore=shutil.ignore_patterns("make_golden.py"))
    monkeypatch.chdir(root)
    config, caches, image = CASES[trainer]
    code, out, err = cli("manifest", "build", "--config", config, "-o", "items.jsonl")
    assert (code, err) == (0, ""), out + err
    rows = [json.loads(line) for line in Path("items.jsonl").read_text().splitlines()]
    assert rows and all("xxh3" in r or r.get("track") is False for r in rows)
    code, out, err = cli("scan", "--no-state", "--manifest", "items.jsonl", caches)
    assert (code, err) == (0, ""), out
    with Image.open(image) as opened:  # new pixels, the old time: only the content says so
        opened.transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(image)
    os.utime(image, (1e9, 1e9))
    code, out, err = cli("scan", "--no-state", "--format", "json", "--manifest", "items.jsonl", caches)
    kinds = {(f["kind"], f["source"]) for f in json.loads(out)["findings"]}
    assert kinds and {k for k, _ in kinds} == {"stale-entry"} and {s for _, s in kinds} == {str(root / image)}
