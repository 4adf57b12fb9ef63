"""One repair is one run across all its cache roots, and one command undoes it (issue 14: a
config with two cache roots gave two quarantine runs and two undo commands)."""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
from pathlib import Path

import pytest
from cli_run import cli

from fixtures.touch import apply as apply_mtimes

DATASETS = Path(__file__).resolve().parents[2] / "fixtures" / "datasets"


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".cachedoctor" not in p.parts and not p.name.endswith(".lock")  # repair's per-file locks
    }


@pytest.mark.parametrize("by", ["config", "roots"])
def test_one_undo_restores_every_root(tmp_path: Path, by: str) -> None:
    root = tmp_path / "datasets"
    shutil.copytree(DATASETS / "simpletuner", root / "simpletuner")
    shutil.copy(DATASETS / "mtimes.json", root / "mtimes.json")
    apply_mtimes(root)
    config = root / "simpletuner" / "config" / "multidatabackend.json"
    before = _digests(root / "simpletuner" / "output")
    code, out, err = cli("repair", "--config", str(config), "--yes", "--format", "json")
    assert err == "", err
    result = json.loads(out)["result"]
    moved, undo = result["quarantine"], result["undo"]
    assert len(moved) == 2 and undo is not None, out  # orphans quarantined in the vae and the text roots
    run_ids = {Path(m).name for m in moved}
    assert len(run_ids) == 1, moved
    run_id = run_ids.pop()
    assert _digests(root / "simpletuner" / "output") != before
    roots = shlex.split(undo)[4:]
    args = ["--config", str(config)] if by == "config" else roots
    code, out, err = cli("quarantine", "restore", run_id, *args, "--yes")
    assert (code, err) == (0, ""), out
    assert f"from {run_id} in 2 cache root(s)" in out
    assert _digests(root / "simpletuner" / "output") == before


def test_restore_of_an_unknown_run_names_the_roots_in_one_line(tmp_path: Path) -> None:
    code, out, err = cli("quarantine", "restore", "20200101-000000-abcdef", str(tmp_path))
    assert code == 2 and f"{tmp_path}: no quarantine run '20200101-000000-abcdef' here" in err
    assert len(err.strip().splitlines()) == 1
