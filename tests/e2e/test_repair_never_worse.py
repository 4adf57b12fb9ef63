"""A repair never leaves a cache worse than it found it (issue 14).

The example adapter (``cachedoctor.encoders.example_adapter:factory:8``) gives 3-channel
"latents" where every shipped cache holds 4 channels. Once, a repair with it wrote files its own
rescan rejected (``shape-mismatch 1 -> 2``) and called them verified. Now each new file is judged
by the scan's checks before it is put in place, so for every layout: no finding kind has more
files after the repair than before, and each refused item names the encoder and the mismatch.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from cli_run import cli, scan_json

from fixtures.touch import apply as apply_mtimes

DATASETS = Path(__file__).resolve().parents[2] / "fixtures" / "datasets"
THREE_CHANNELS = "cachedoctor.encoders.example_adapter:factory:8"

#: dataset -> scan arguments, relative to the copied tree (fixtures/datasets/README.md)
CASES = {
    "simpletuner": ["--config", "simpletuner/config/multidatabackend.json"],
    "kohya": ["kohya/train", "--layout", "kohya"],
    "onetrainer": ["onetrainer/cache", "--layout", "onetrainer"],
    "manifest": ["manifest/cache", "--manifest", "manifest/items.jsonl"],
}


def _files_by_kind(args: list[str]) -> Counter:
    findings = scan_json("--deep", *args)["findings"]
    return Counter(
        {kind: len({f["path"] for f in findings if f["kind"] == kind}) for kind in {f["kind"] for f in findings}}
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_repair_with_a_mismatched_encoder_leaves_no_kind_worse(tmp_path: Path, name: str) -> None:
    root = tmp_path / "datasets"
    shutil.copytree(DATASETS, root)
    apply_mtimes(root)
    args = [str(root / a) if "/" in a else a for a in CASES[name]]
    before = _files_by_kind(args)
    code, out, err = cli("repair", *args, "--encoder", THREE_CHANNELS, "--yes", "--format", "json")
    assert err == "", err
    result = json.loads(out)["result"]
    after = _files_by_kind(args)
    worse = {k: (before[k], n) for k, n in after.items() if n > before[k]}
    assert worse == {} and result["worse"] == {}, out
    refused = [f["message"] for f in result["still_broken"] if f["state"] == "failed"]
    assert refused, out  # each layout's shipped dataset has a latent to recompute
    for message in refused:
        assert "encoder pool gives" in message and "Nothing written" in message, message
