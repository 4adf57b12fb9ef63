"""A scan split into shards (``scan --shard K/N`` parts joined by ``cachedoctor merge``, or the
engine's parts joined in one process) reports exactly what one scan of the whole cache reports:
findings, summary and exit code, on the shipped caches, on a dataset compared with its cache, and
on the run-level rules that need every shard's latent shapes. Parts that do not belong together
are refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cachedoctor.api import audit
from cachedoctor.api_parts import load_parts, merge_parts, scan_shard
from cachedoctor.scan.engine import scan, scan_part
from cachedoctor.scan.merge import merge
from cachedoctor.scan.options import ScanOptions
from cachedoctor.settings import load
from cachedoctor.sharding.interface import Shard, shard_of
from tests.cli_run import cli, scan_json

REPO = Path(__file__).resolve().parents[2]
CACHES = REPO / "fixtures" / "caches"
HEALTHY_DATASET = REPO / "fixtures" / "datasets" / "simpletuner-healthy"


def without_time(doc: dict) -> dict:
    """The report less the one thing a split run may not share: how long it took."""
    return {**doc, "summary": {k: v for k, v in doc["summary"].items() if k != "elapsed_s"}}


@pytest.fixture
def caches(tmp_path: Path) -> Path:
    root = tmp_path / "caches"
    shutil.copytree(CACHES, root)
    return root


@pytest.mark.parametrize("count", [2, 3, 7])
@pytest.mark.parametrize("deep", [False, True])
def test_merged_parts_are_the_whole_scan(caches: Path, count: int, deep: bool) -> None:
    from cachedoctor.report import ScanReport

    options = ScanOptions(deep=deep)
    whole = without_time(ScanReport(scan([str(caches)], options)).document())
    parts = [scan_part([str(caches)], ScanOptions(deep=deep, shard=Shard(k, count))) for k in range(count)]
    merged = without_time(ScanReport(merge(parts, options)).document())
    assert merged == whole
    assert whole["findings"] and whole["summary"]["exit_code"] == 1  # the shipped caches hold planted defects
    # every file was judged by one shard: the shards' counts add up to the whole scan's
    assert sum(p.stats.files_seen for p in parts) == whole["summary"]["files_seen"]
    assert sum(p.stats.files_read for p in parts) == whole["summary"]["files_read"]


def test_each_shard_reports_only_the_folders_it_owns(caches: Path) -> None:
    parts = [scan_part([str(caches)], ScanOptions(shard=Shard(k, 3))) for k in range(3)]
    for part in parts:
        for finding in part.findings:
            assert part.shard.owns(str(Path(finding.path).parent)), (part.shard, finding.path)
    assert sum(len(p.findings) for p in parts) > 0


def test_latent_shapes_of_every_shard_make_the_runs_buckets(tmp_path: Path) -> None:
    """Without a dataset the run's buckets are the latent shapes read, on every shard: the merge
    judges rank balance over all of them, as one scan does."""
    from cachedoctor.report import ScanReport

    cache = tmp_path / "vae"
    shutil.copytree(HEALTHY_DATASET / "output" / "cache" / "vae", cache)
    options = ScanOptions(world_size=2, batch_size=3)
    whole = without_time(ScanReport(scan([str(cache)], options)).document())
    [imbalance] = whole["findings"]
    assert imbalance["kind"] == "rank-imbalance"
    folders = [str(cache / "sdxl" / "photos"), str(cache / "sdxl" / "photos" / "portraits")]
    n = next(n for n in range(2, 64) if len({shard_of(f, n) for f in folders}) == 2)  # a split that parts them
    parts = [scan_part([str(cache)], ScanOptions(world_size=2, batch_size=3, shard=Shard(k, n))) for k in range(n)]
    one = scan_part([str(cache)], ScanOptions(world_size=2, batch_size=3))
    assert len([p for p in parts if p.shapes]) == 2  # the two folders fell to two shards, which counted their shapes
    assert sum(n for p in parts for n in (p.shapes or {}).values()) == sum((one.shapes or {}).values())
    merged = without_time(ScanReport(merge(parts, options)).document())
    assert merged == whole


def test_a_dataset_compared_with_its_cache_merges_to_the_whole_report(tmp_path: Path) -> None:
    """SimpleTuner's config: dataset entries are settled by the shard owning their folder, and the
    run's rules (from the config's buckets) are judged once."""
    root = tmp_path / "ds"
    shutil.copytree(HEALTHY_DATASET, root)
    config = root / "config" / "multidatabackend.json"
    latents = sorted((root / "output").rglob("*.pt"))
    latents[0].unlink()  # one missing entry
    kw = {"config": str(config), "state": False, "world_size": 8, "batch_size": 4}
    whole = without_time(audit(None, load(**kw)).document())
    assert "missing-entry" in whole["summary"]["by_kind"] and "rank-imbalance" in whole["summary"]["by_kind"]
    files = []
    for k in range(3):
        part = scan_shard(load(**kw), Shard(k, 3))
        path = tmp_path / f"part-{k}.json"
        path.write_text(json.dumps(part.to_json()), encoding="utf-8")
        files.append(str(path))
    assert without_time(merge_parts(load_parts(files)).document()) == whole


def test_cli_parts_merge_into_the_scans_report_and_exit_code(caches: Path, tmp_path: Path) -> None:
    parts = tmp_path / "parts"
    parts.mkdir()
    for k in range(3):
        code, out, err = cli("scan", "--no-state", "--shard", f"{k}/3", "-o", str(parts / f"{k}.json"), str(caches))
        assert (code, out, err) == (0, "", "")
    code, out, err = cli("merge", "--format", "json", str(parts))
    whole = scan_json("--no-state", str(caches))
    assert err == "" and code == whole["summary"]["exit_code"] == 1
    assert without_time(json.loads(out)) == without_time(whole)
    code2, out2, _ = cli(
        "scan",
        "--format",
        "json",
        "--merge",
        str(parts / "0.json"),
        "--merge",
        str(parts / "1.json"),
        "--merge",
        str(parts / "2.json"),
    )
    assert code2 == 1 and without_time(json.loads(out2)) == without_time(whole)


def write_part(tmp_path: Path, name: str, *argv: str, env: dict[str, str] | None = None) -> str:
    path = tmp_path / name
    code, out, err = cli("scan", "--no-state", "-o", str(path), *argv)
    assert (code, err) == (0, ""), err
    return str(path)


def test_a_missing_shard_is_refused(caches: Path, tmp_path: Path) -> None:
    a = write_part(tmp_path, "a.json", "--shard", "0/3", str(caches))
    b = write_part(tmp_path, "b.json", "--shard", "2/3", str(caches))
    code, out, err = cli("merge", a, b)
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "shard 1 of 3 is missing (2 part(s) given)" in err


def test_a_shard_given_twice_is_refused(caches: Path, tmp_path: Path) -> None:
    a = write_part(tmp_path, "a.json", "--shard", "0/2", str(caches))
    b = write_part(tmp_path, "b.json", "--shard", "0/2", str(caches))
    code, _, err = cli("merge", a, b)
    assert code == 2 and err.count("\n") == 1 and f"{b}: is shard 0/2 again (so is {a})" in err


def test_parts_of_another_shard_count_are_refused(caches: Path, tmp_path: Path) -> None:
    a = write_part(tmp_path, "a.json", "--shard", "0/2", str(caches))
    b = write_part(tmp_path, "b.json", "--shard", "1/3", str(caches))
    code, _, err = cli("merge", a, b)
    assert code == 2 and err.count("\n") == 1 and f"{b}: is shard 1/3, and {a} one of 2" in err


def test_parts_scanned_with_other_options_are_refused(caches: Path, tmp_path: Path) -> None:
    a = write_part(tmp_path, "a.json", "--shard", "0/2", str(caches))
    b = write_part(tmp_path, "b.json", "--shard", "1/2", "--deep", str(caches))
    code, _, err = cli("merge", a, b)
    assert code == 2 and err.count("\n") == 1 and f"{b}: was scanned with other targets or options than {a}" in err


def test_parts_of_another_run_are_refused(caches: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "1001")
    a = write_part(tmp_path, "a.json", "--shard", "0/2", str(caches))
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "1002")
    b = write_part(tmp_path, "b.json", "--shard", "1/2", str(caches))
    code, _, err = cli("merge", a, b)
    assert code == 2 and err.count("\n") == 1 and f"{b}: belongs to run 1002, and {a} to run 1001" in err


def test_a_file_that_is_no_part_is_refused(caches: Path, tmp_path: Path) -> None:
    a = write_part(tmp_path, "a.json", "--shard", "0/2", str(caches))
    report = tmp_path / "report.json"
    report.write_text(json.dumps(scan_json("--no-state", str(caches))), encoding="utf-8")
    code, _, err = cli("merge", a, str(report))
    assert code == 2 and err.count("\n") == 1
    assert f"{report}: is not a part written by `cachedoctor scan --shard K/N`" in err


@pytest.mark.parametrize("text", ["3/3", "1", "a/2", "-1/2", "0/0"])
def test_a_shard_outside_its_count_is_one_line(caches: Path, text: str) -> None:
    code, out, err = cli("scan", "--no-state", "--shard", text, str(caches))
    assert (code, out) == (2, "") and err.count("\n") == 1 and f"--shard {text}" in err
