"""The shipped fixtures: every planted defect (fixtures/expected.json, written by the generator
as it plants them) is found exactly, and nothing else is; the healthy copies give nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cachedoctor.scan import ScanOptions, scan

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CACHES = FIXTURES / "caches"


def _expected(deep: bool) -> list[tuple[str, str, str]]:
    rows = json.loads((FIXTURES / "expected.json").read_text())
    return sorted((r["path"], r["kind"], r["fix"]) for r in rows if deep or not r["deep_only"])


@pytest.mark.parametrize("deep", [False, True])
@pytest.mark.parametrize("workers", [1, 2])
def test_every_planted_defect_and_nothing_else(deep: bool, workers: int) -> None:
    result = scan([str(CACHES)], ScanOptions(deep=deep, workers=workers))
    assert result.errors == []
    found = sorted((str(Path(f.path).relative_to(CACHES)), f.kind, f.fix.value) for f in result.findings)
    assert found == _expected(deep)


def test_healthy_copies_are_clean() -> None:
    result = scan([str(CACHES / "healthy")], ScanOptions(deep=True, workers=1))
    assert (result.findings, result.errors) == ([], [])
    assert result.stats.files_read > 30


def test_planted_rows_exist_on_disk() -> None:
    for path, _, _ in _expected(deep=True):
        assert (CACHES / path).is_file(), path
