"""``cachedoctor.api.audit`` gives a library caller the command line's answer and exit code."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch
from factories import latent, peers, save_pt, saved_on

from cachedoctor.api import audit
from cachedoctor.cli import run
from cachedoctor.cli.environment import Environment
from cachedoctor.exit_status import ExitStatus
from cachedoctor.report import ScanReport, ScanSummary
from cachedoctor.settings import load


def test_audit_matches_scan_with_a_baseline_and_a_severity_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cache = tmp_path / "cache"
    peers(cache)
    save_pt(cache / "leak.pt", torch.randn(7, 4, 8, 8).to(torch.bfloat16)[5])  # batch-leak: recorded in the baseline
    env = Environment(
        stdout=io.StringIO(),
        stderr=io.StringIO(),
        stdout_isatty=False,
        stderr_isatty=False,
        cwd=str(tmp_path),
        environ={},
    )
    assert run(["scan", str(cache), "--write-baseline", "base.json"], env) == ExitStatus.CLEAN
    with saved_on("cuda:0"):  # new since the baseline: device-tagged, a warning made an error by the config
        save_pt(cache / "gpu.pt", latent(seed=9))
    (tmp_path / "cachedoctor.toml").write_text('[severity]\ndevice-tagged = "error"\n')

    out = io.StringIO()
    env = Environment(
        stdout=out, stderr=io.StringIO(), stdout_isatty=False, stderr_isatty=False, cwd=str(tmp_path), environ={}
    )
    code = run(["scan", str(cache), "--baseline", "base.json", "--format", "json"], env)
    document = json.loads(out.getvalue())

    report = audit([str(cache)], load(str(tmp_path), {}), baseline="base.json")
    assert code == report.exit_code == ExitStatus.FINDINGS
    assert [f["kind"] for f in document["findings"]] == ["device-tagged"]
    assert [f.to_json() for f in report.findings] == document["findings"]
    assert report.findings[0].severity.value == "error" and report.suppressed == 1


def test_a_report_is_built_from_a_summary_alone() -> None:
    from cachedoctor.findings import Finding, Fix, Severity
    from cachedoctor.report.summary import Problem

    finding = Finding(path="/c/a.pt", kind="batch-leak", severity=Severity.WARNING, fix=Fix.CLONE_STORAGE, message="m")
    assert ScanReport(ScanSummary(["/c"], [finding])).exit_code == ExitStatus.CLEAN  # below --fail-on error
    assert ScanReport(ScanSummary(["/c"], [], errors=[Problem("/c/b.pt", "denied")])).exit_code == ExitStatus.ERROR


def test_audit_raises_usage_error_for_contradicting_settings(tmp_path: Path) -> None:
    from cachedoctor.api import audit
    from cachedoctor.errors import UsageError
    from cachedoctor.settings import load

    (tmp_path / "cache").mkdir()
    with pytest.raises(UsageError, match="needs state"):
        audit(None, load(cwd=str(tmp_path), environ={}, paths=["cache"], state=False, sample="5%"))
