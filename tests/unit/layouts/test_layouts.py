"""Dataset comparison on the shipped layout fixtures (fixtures/datasets/).

Each case was written the way its trainer writes caches, with one defect of each kind planted
(``expected.json``, written by ``fixtures/make_datasets.py`` as it plants them), plus a healthy
twin. A test per (layout, kind) asserts exactly the findings of that kind; a test per case
asserts nothing else is reported. git keeps no mtimes, so the tree is copied and
``fixtures/touch.py`` sets the recorded ones before scanning.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from cachedoctor.cli import run
from cachedoctor.cli.environment import Environment

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
DATASETS = FIXTURES / "datasets"
EXPECTED = json.loads((DATASETS / "expected.json").read_text())
CASES = {case["name"]: case for case in EXPECTED["cases"]}
DATASET_KINDS = ("missing-entry", "orphan-entry", "stale-entry", "name-collision", "shape-mismatch")


def _touch() -> Any:
    spec = importlib.util.spec_from_file_location("fixture_touch", FIXTURES / "touch.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("datasets") / "datasets"
    shutil.copytree(DATASETS, root)
    assert _touch().apply(root) > 0
    return root


def cli(*argv: str, cwd: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdout_isatty=False, stderr_isatty=False, cwd=str(cwd))
    old = os.getcwd()
    os.chdir(cwd)
    try:
        code = run(list(argv), env)
    finally:
        os.chdir(old)
    return code, out.getvalue(), err.getvalue()


_RESULTS: dict[str, tuple[int, dict, str]] = {}


def scan_case(tree: Path, name: str) -> tuple[int, dict, str]:
    if name not in _RESULTS:
        code, out, err = cli("scan", *CASES[name]["args"], "--format", "json", "--workers", "1", cwd=tree)
        _RESULTS[name] = (code, json.loads(out) if out else {}, err)
    return _RESULTS[name]


def found(doc: dict, tree: Path, kind: str | None = None) -> list[tuple[str, str, str | None, str]]:
    def rel(p: str | None) -> str | None:
        return None if p is None else os.path.relpath(p, tree)

    return sorted(
        (f["kind"], rel(f["path"]), rel(f["source"]), f["fix"])
        for f in doc["findings"]
        if kind is None or f["kind"] == kind
    )


def planted(name: str, kind: str | None = None) -> list[tuple[str, str, str | None, str]]:
    return sorted(
        (f["kind"], f["path"], f["source"], f["fix"])
        for f in CASES[name]["findings"]
        if kind is None or f["kind"] == kind
    )


PAIRS = [
    (name, kind)
    for name, case in CASES.items()
    for kind in DATASET_KINDS
    if any(f["kind"] == kind for f in case["findings"])
]


@pytest.mark.parametrize(("case", "kind"), PAIRS, ids=[f"{c}-{k}" for c, k in PAIRS])
def test_planted_finding(tree: Path, case: str, kind: str) -> None:
    _, doc, _ = scan_case(tree, case)
    assert found(doc, tree, kind) == planted(case, kind)


@pytest.mark.parametrize("case", sorted(CASES))
def test_case_reports_exactly_what_was_planted(tree: Path, case: str) -> None:
    code, doc, err = scan_case(tree, case)
    assert err == ""
    assert found(doc, tree) == planted(case)
    severities = {f["severity"] for f in doc["findings"]}
    assert code == (1 if "error" in severities else 0)


def test_every_layout_plants_every_kind_that_applies() -> None:
    kinds = {name: {f["kind"] for f in case["findings"]} for name, case in CASES.items()}
    for name in ("simpletuner", "kohya", "manifest"):
        assert set(DATASET_KINDS) <= kinds[name], name
    # OneTrainer names entries by position: two items cannot share a file.
    assert set(DATASET_KINDS) - {"name-collision"} <= kinds["onetrainer"]
    for name in CASES:
        if name.endswith("-healthy"):
            assert CASES[name]["findings"] == []


@pytest.mark.parametrize("case", ["simpletuner", "kohya", "onetrainer"])
def test_worker_pool_finds_the_same(tree: Path, case: str) -> None:
    code, out, err = cli("scan", *CASES[case]["args"], "--format", "json", "--workers", "2", cwd=tree)
    assert err == ""
    assert found(json.loads(out), tree) == planted(case)


def test_dataset_scans_import_neither_torch_nor_numpy(tree: Path) -> None:
    import subprocess
    import sys

    argvs = [CASES[name]["args"] for name in ("simpletuner", "kohya", "onetrainer", "manifest")]
    code = (
        "import io, sys; from cachedoctor.cli import run; from cachedoctor.cli.environment import Environment; "
        f"codes = [run(['scan', *a, '--format', 'json', '-j', '1'], Environment(stdout=io.StringIO())) for a in {argvs!r}]; "
        "print(codes, sorted(m for m in ('torch', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tree)
    assert out.stdout.strip() == "[1, 1, 1, 1] []"
