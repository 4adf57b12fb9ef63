"""The run-level kinds (``rank-imbalance``, ``dropped-bucket``) in every machine format: their
path is a cache folder, not a file, and their details (the per-rank step table) must survive
JSON, JUnit and GitHub annotations as they do the table.

The cache: 5 latents of one bucket (16x16) and 3 of another (16x24), no dataset, 2 ranks at
batch 2 (trainer unknown, so Sana's sampler with each bucket spread over the ranks as evenly as it
goes): rank 0 holds three 16x16 and one 16x24 (1 batch), rank 1 two of each (2 batches): ranks
take 1 and 2 steps. No dropped-bucket: which images an unknown trainer never trains is a guess.
"""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema
from factories import latent, save_pt

from cachedoctor.cli import run
from cachedoctor.cli.environment import Environment

JUNIT_XSD = xmlschema.XMLSchema(str(Path(__file__).resolve().parents[2] / "schemas" / "junit.xsd"))
SIZE = ("--world-size", "2", "--batch-size", "2", "--no-state", "--workers", "1")


@pytest.fixture(autouse=True)
def no_step_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    folder = tmp_path / "cache"
    for i in range(5):
        save_pt(folder / f"a{i}.pt", latent(h=16, w=16, seed=i))
    for i in range(3):
        save_pt(folder / f"b{i}.pt", latent(h=16, w=24, seed=10 + i))
    return folder


def scan(cwd: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdout_isatty=False, stderr_isatty=False, cwd=str(cwd))
    return run(["scan", *argv], env), out.getvalue(), err.getvalue()


def test_json_carries_the_per_rank_table(cache: Path, tmp_path: Path) -> None:
    code, out, err = scan(tmp_path, str(cache), *SIZE, "--format", "json")
    assert (code, err) == (1, "")
    by_kind = {f["kind"]: f for f in json.loads(out)["findings"]}
    assert sorted(by_kind) == ["rank-imbalance"]
    imbalance = by_kind["rank-imbalance"]
    assert (imbalance["path"], imbalance["severity"], imbalance["fix"], imbalance["source"]) == (
        str(cache),
        "error",
        "none",
        None,
    )
    assert imbalance["details"]["steps"] == [1, 2]
    assert (imbalance["details"]["world_size"], imbalance["details"]["batch_size"]) == (2, 2)
    assert imbalance["details"]["trainer"] == "sana" and imbalance["details"]["trainer_known"] is False


def test_jsonl_has_one_line_per_run_level_finding(cache: Path, tmp_path: Path) -> None:
    code, out, _ = scan(tmp_path, str(cache), *SIZE, "--format", "jsonl")
    kinds = [json.loads(line).get("kind") for line in out.splitlines()]
    assert code == 1 and [k for k in kinds if k] == ["rank-imbalance"]


def test_junit_fails_the_rank_imbalance_case(cache: Path, tmp_path: Path) -> None:
    code, out, err = scan(tmp_path, str(cache), *SIZE, "--format", "junit")
    assert (code, err) == (1, "")
    JUNIT_XSD.validate(out)
    suite = ET.fromstring(out)[0]
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    failure = cases["rank-imbalance"].find("failure")
    assert failure is not None and failure.get("message") == "1 finding(s)"
    assert failure.text.startswith("[error] cache: 2 ranks at batch 2 (trainer unknown, modelled as Sana's sampler)")
    assert all(len(cases[k]) == 0 for k in ("dropped-bucket", "config-hazard"))  # passed, nothing logged


def test_github_annotates_the_folder(cache: Path, tmp_path: Path) -> None:
    code, out, _ = scan(tmp_path, str(cache), *SIZE, "--format", "github")
    lines = out.splitlines()
    assert code == 1
    assert any(line.startswith("::error file=cache,title=rank-imbalance::2 ranks at batch 2") for line in lines)
    assert not any("dropped-bucket" in line for line in lines)


def test_without_the_run_size_nothing_is_predicted(cache: Path, tmp_path: Path) -> None:
    code, out, _ = scan(tmp_path, str(cache), "--no-state", "--workers", "1", "--format", "json")
    assert code == 0 and json.loads(out)["findings"] == []
