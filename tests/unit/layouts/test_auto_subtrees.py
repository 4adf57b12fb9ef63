"""``--layout auto`` on a tree that mixes trainers: each part gets the layout whose sign it holds,
one layout line per subtree, and the rest is compared cache file with cache file only (issue 15:
the shipped ``fixtures/caches`` got ``onetrainer`` for all of it)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from cli_run import cli, scan_json
from test_layouts import CASES, DATASETS, _touch

from cachedoctor.layouts import LayoutName, LayoutOptions, TemplateFinder, plan_for, recompute_spec

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
CACHES = FIXTURES / "caches"
TRAINER_CASES = [n for n in CASES if not n.startswith("manifest")]  # a manifest is named, never detected


def _copy(root: Path, *names: str) -> Path:
    """The dataset fixture cases ``names`` under ``root``, with their recorded mtimes."""
    for name in names:
        shutil.copytree(DATASETS / name, root / name)
    mtimes = json.loads((DATASETS / "mtimes.json").read_text())
    (root / "mtimes.json").write_text(json.dumps({k: v for k, v in mtimes.items() if k.split("/")[0] in names}))
    _touch().apply(root)
    return root


def _parts(doc: dict) -> list[tuple[str, str | None]]:
    return [(p["layout"], p["root"]) for p in doc["dataset"]["parts"]]


def test_shipped_caches_get_onetrainer_for_its_caches_and_none_for_the_rest() -> None:
    doc = scan_json("--deep", "--no-state", "--workers", "1", str(CACHES))
    assert doc["dataset"]["layout"] == "mixed"
    assert _parts(doc) == [
        ("onetrainer", str(CACHES / "healthy" / "onetrainer")),
        ("onetrainer", str(CACHES / "onetrainer")),
        ("none", str(CACHES)),
    ]
    rows = json.loads((FIXTURES / "expected.json").read_text())  # every planted defect, nothing else
    found = sorted((str(Path(f["path"]).relative_to(CACHES)), f["kind"], f["fix"]) for f in doc["findings"])
    assert found == sorted((r["path"], r["kind"], r["fix"]) for r in rows)


def test_shipped_caches_table_has_one_layout_line_per_subtree() -> None:
    code, out, _ = cli("scan", "--no-state", "--workers", "1", str(CACHES))
    lines = [line for line in out.splitlines() if line.startswith("layout: ")]
    group = "image/27f295c1c03e75e474a08db5e2d41363f4b29abe04fd40efd5e465029741ea94/variation-0"
    assert code == 1 and len(lines) == 3
    assert lines[1] == f"layout: onetrainer for {CACHES / 'onetrainer'} (auto: {group}/aggregate.pt indexes the cache)"
    assert lines[2] == (
        f"layout: none for the rest of {CACHES} (auto: no trainer layout recognised; "
        "cache files compared with each other only)"
    )


def test_a_tree_of_every_trainer_finds_what_each_case_plants(tmp_path: Path) -> None:
    root = _copy(tmp_path, *CASES)
    doc = scan_json("--no-state", "--workers", "1", str(root))
    assert _parts(doc) == [(n.split("-")[0], str(root / n)) for n in sorted(TRAINER_CASES)] + [("none", str(root))]
    found = sorted(
        (f["kind"], os.path.relpath(f["path"], root), f["source"] and os.path.relpath(f["source"], root), f["fix"])
        for f in doc["findings"]
    )
    planted = [(f["kind"], f["path"], f["source"], f["fix"]) for n in TRAINER_CASES for f in CASES[n]["findings"]]
    assert found == sorted(planted)  # the manifest cases, layout none, add no false alarm


def test_one_layout_throughout_keeps_the_single_line_and_its_orphans(tmp_path: Path) -> None:
    train = _copy(tmp_path, "kohya-healthy") / "kohya-healthy" / "train"
    shutil.copytree(train / "10_subject", train / "5_more")
    (train / "1_gone").mkdir()  # a concept whose images were deleted: kohya's names, no sign
    shutil.copy(train / "10_subject" / "apple_0064x0064_sdxl.npz", train / "1_gone" / "apple_0064x0064_sdxl.npz")
    code, out, _ = cli("scan", "--no-state", "--workers", "1", "--format", "json", str(train))
    doc = json.loads(out)
    line = f"layout: kohya (auto: {train / '10_subject' / 'apple_0064x0064_sdxl.npz'} sits next to its image)"
    assert (doc["dataset"]["layout"], doc["dataset"]["reason"], _parts(doc)) == ("kohya", line, [("kohya", str(train))])
    assert [(f["kind"], f["path"]) for f in doc["findings"]] == [
        ("orphan-entry", str(train / "1_gone" / "apple_0064x0064_sdxl.npz"))
    ]


def test_a_config_found_below_that_cannot_be_used_leaves_its_part_to_none(tmp_path: Path) -> None:
    root = _copy(tmp_path, "kohya-healthy")
    (root / "st").mkdir()
    (root / "st" / "multidatabackend.json").write_text("{}")
    code, out, err = cli("scan", "--no-state", "--workers", "1", str(root))
    assert (code, err) == (0, "")
    assert (
        f"layout: none for {root / 'st'} (auto: multidatabackend.json describes the datasets, but "
        f"{root / 'st' / 'multidatabackend.json'}: not a SimpleTuner data-backend config: expected a JSON list "
        "of dataset objects; cache files compared with each other only)"
    ) in out.splitlines()
    assert f"layout: kohya for {root / 'kohya-healthy'} (auto: " in out
    # named by the user (the config right in the target), it still stops the scan
    code, _, err = cli("scan", "--no-state", str(root / "st"))
    assert code == 2 and "not a SimpleTuner data-backend config" in err


def test_repair_takes_each_entry_layout_from_its_part(tmp_path: Path) -> None:
    root = _copy(tmp_path, "kohya-healthy", "onetrainer-healthy")
    plan, _ = plan_for(LayoutName.AUTO, [str(root)], LayoutOptions())
    assert plan is not None and plan.layout == "mixed"
    latent = str(root / "kohya-healthy" / "train" / "10_subject" / "apple_0064x0064_sdxl.npz")
    variation = next((root / "onetrainer-healthy" / "cache").rglob("variation-0"))
    assert (plan.layout_for(latent), plan.layout_for(str(variation / "0.pt"))) == ("kohya", "onetrainer")
    assert plan.layout_for(str(root / "mtimes.json")) is None
    (entry,) = plan.by_path({latent})[latent]
    spec, why = recompute_spec(latent, entry, plan.layout_for, TemplateFinder({latent}))
    assert why is None and spec is not None and spec.writer == "kohya-npz"


@pytest.mark.parametrize("by", ["config", "target"])
def test_a_single_layout_lists_its_part_in_json(tmp_path: Path, by: str) -> None:
    root = _copy(tmp_path, "simpletuner-healthy") / "simpletuner-healthy"
    config = root / "config" / "multidatabackend.json"
    doc = scan_json("--no-state", "--workers", "1", *(["--config", str(config)] if by == "config" else [str(root)]))
    (part,) = doc["dataset"]["parts"]
    assert (part["layout"], part["root"], part["reason"]) == (
        "simpletuner",
        None if by == "config" else str(root),
        doc["dataset"]["reason"],
    )
