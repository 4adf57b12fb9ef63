"""scan --write-baseline / --baseline: accept today's findings, fail only on new ones."""

from __future__ import annotations

import io
import json
from pathlib import Path

import torch
from factories import peers, save_pt

from cachedoctor.baseline import SCHEMA, finding_id
from cachedoctor.cli import run
from cachedoctor.cli.environment import Environment
from cachedoctor.findings import Finding, Fix, Severity


def cli(*argv: str, cwd: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdout_isatty=False, stderr_isatty=False, cwd=str(cwd), environ={})
    return run(list(argv), env), out.getvalue(), err.getvalue()


def leak(path: Path) -> None:
    save_pt(path, torch.randn(7, 4, 8, 8).to(torch.bfloat16)[1])


def test_round_trip(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    peers(cache)
    leak(cache / "old.pt")
    base = tmp_path / "baseline.json"
    scan = ("scan", str(cache), "-j", "1")
    assert cli(*scan, "--format", "json", cwd=tmp_path)[0] == 1

    code, out, err = cli(*scan, "--write-baseline", str(base), cwd=tmp_path)
    doc = json.loads(base.read_text())
    assert (code, err) == (0, "")
    assert " ".join(out.split()).startswith(
        f"baseline: 1 finding(s) recorded in {base}; later scans with --baseline {base} hide them "
    )
    assert "No findings" not in out  # they were recorded, not absent
    assert "No new findings: the 1 recorded in the baseline are hidden." in " ".join(out.split())
    assert doc["schema"] == SCHEMA and len(doc["ids"]) == 1 and len(doc["ids"][0]) == 64
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left

    code, out, err = cli(*scan, "--baseline", str(base), cwd=tmp_path)
    assert (code, err) == (0, "")
    assert " ".join(out.split()).startswith(f"baseline: 1 finding(s) left out by {base} ")
    assert "No findings" not in out
    assert "No new findings: the 1 recorded in the baseline are hidden." in " ".join(out.split())

    leak(cache / "new.pt")
    code, out, _ = cli(*scan, "--baseline", str(base), "--format", "json", cwd=tmp_path)
    findings = json.loads(out)["findings"]
    assert code == 1
    assert [(f["kind"], Path(f["path"]).name) for f in findings] == [("batch-leak", "new.pt")]


def test_id_is_relative_to_the_baseline_and_ignores_the_message(tmp_path: Path) -> None:
    def finding(root: Path, message: str, key: str = "latent") -> Finding:
        return Finding(
            "batch-leak",
            Severity.ERROR,
            str(root / "cache" / "a.pt"),
            message,
            Fix.CLONE_STORAGE,
            details={"key": key, "storage_bytes": len(message)},
        )

    a = finding_id(finding(tmp_path / "one", "x"), str(tmp_path / "one"))
    assert a == finding_id(finding(tmp_path / "two", "reworded"), str(tmp_path / "two"))
    assert a != finding_id(finding(tmp_path / "one", "x", key="other"), str(tmp_path / "one"))


def test_bad_baseline_is_one_line_exit_2(tmp_path: Path) -> None:
    peers(tmp_path / "cache")
    bad = tmp_path / "b.json"
    bad.write_text('{"schema": "other"}')
    for path in (bad, tmp_path / "missing.json"):
        code, out, err = cli("scan", str(tmp_path / "cache"), "--baseline", str(path), cwd=tmp_path)
        assert (code, out) == (2, "") and err.count("\n") == 1 and err.startswith(f"cachedoctor: error: {path}: ")
