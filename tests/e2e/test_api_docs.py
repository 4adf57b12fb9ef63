"""docs/api.md is the Python API's reference: every name of ``cachedoctor.api.__all__`` has its
section, every field of the dataclasses it returns is in that section, and its examples run on
the shipped fixtures, print what the doc shows and give the same report as the ``cachedoctor
scan`` command each names in its first comment."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import shlex
import shutil
from pathlib import Path

import pytest
from cli_run import cli

from cachedoctor import api

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
#: (python source, the output shown under it) for each example.
EXAMPLES = re.findall(r"```python\n(# cachedoctor .*?)```\n\n```text\n(.*?)```", DOC, re.S)


def _section(name: str) -> str:
    start = DOC.index(f"\n### `{name}`\n")
    end = DOC.find("\n### ", start + 1)
    return DOC[start : end if end != -1 else None]


@pytest.mark.parametrize("name", api.__all__)
def test_every_public_name_has_its_section(name: str) -> None:
    assert hasattr(api, name)
    assert _section(name).strip() != f"### `{name}`"


def test_the_doc_documents_nothing_that_is_not_public() -> None:
    assert sorted(re.findall(r"^### `(\w+)`$", DOC, re.M)) == sorted(api.__all__)


@pytest.mark.parametrize(
    "cls", [api.ScanReport, api.ScanSummary, api.Counts, api.DatasetSummary, api.Problem, api.Finding], ids=str
)
def test_every_field_of_a_returned_dataclass_is_documented(cls: type) -> None:
    section = _section(cls.__name__)
    assert [f.name for f in dataclasses.fields(cls) if f"`{f.name}`" not in section] == []


def test_the_public_callables_are_typed() -> None:
    for name in ("audit", "load_settings", "apply_severity", "require_existing"):
        annotations = getattr(api, name).__annotations__
        assert "return" in annotations and len(annotations) > 1, name
    assert (ROOT / "cachedoctor" / "py.typed").is_file()


def test_there_are_examples() -> None:
    assert len(EXAMPLES) == 3


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e[0].splitlines()[0])
def test_each_example_prints_what_the_doc_shows_and_agrees_with_the_cli(
    example: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run from the root of a copy of the fixtures (a scan may keep its state beside a cache)."""
    source, shown = example
    shutil.copytree(ROOT / "fixtures" / "caches", tmp_path / "fixtures" / "caches")
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("CACHEDOCTOR_")]:
        monkeypatch.delenv(name)
    printed = io.StringIO()
    scope: dict[str, object] = {}
    with contextlib.redirect_stdout(printed):
        exec(compile(source, "docs/api.md", "exec"), scope)
    assert printed.getvalue() == shown

    argv = shlex.split(source.splitlines()[0].removeprefix("# cachedoctor "))
    code, out, err = cli(*argv, "--format", "json", cwd=str(tmp_path))
    if "report" in scope:  # the same findings and exit code as the command line
        report = scope["report"]
        assert isinstance(report, api.ScanReport)
        assert (int(report.exit_code), err) == (code, "")
        assert [f.to_json() for f in report.findings] == json.loads(out)["findings"]
    else:  # the exception (its path, relative, and message) is the CLI's one-line error
        path, message = shown.rstrip("\n").split(" | ")
        assert (code, out, err) == (2, "", f"cachedoctor: error: {tmp_path / path}: {message}\n")
