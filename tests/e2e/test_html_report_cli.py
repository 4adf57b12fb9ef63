"""``scan --format html -o FILE`` on the shipped fixtures and on a multi-GPU run's cache: one file
that references nothing outside itself, whose numbers are the JSON report's, and that a headless
browser renders (skipped where no Chromium is installed)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cli_run import cli
from tests.html_page import Page, read_page

REPO = Path(__file__).resolve().parents[2]
CACHES = REPO / "fixtures" / "caches"
VAE = REPO / "fixtures" / "datasets" / "simpletuner-healthy" / "output" / "cache" / "vae"
RANKS = ("--layout", "none", "--world-size", "2", "--batch-size", "3")  # as test_rank_imbalance_cli builds it
#: tags that load something: none may appear (the charts are inline SVG, the style inline CSS)
LOADERS = {"script", "link", "img", "iframe", "object", "embed", "source", "video", "audio", "image", "use", "base"}


@pytest.fixture(autouse=True)
def no_step_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


def html_and_json(tmp_path: Path, *argv: str) -> tuple[str, Page, dict]:
    target = tmp_path / "report.html"
    code, out, err = cli("scan", "--no-state", "--format", "html", "-o", str(target), *argv, cwd=str(tmp_path))
    assert (out, err) == ("", "") and target.is_file()
    code_json, text, err = cli("scan", "--no-state", "--format", "json", *argv, cwd=str(tmp_path))
    assert (code_json, err) == (code, "")
    html = target.read_text(encoding="utf-8")
    return html, read_page(html), json.loads(text)


def assert_self_contained(html: str, page: Page) -> None:
    tags = {tag for tag, _ in page.tags}
    assert not tags & LOADERS, tags & LOADERS
    refs = [
        (tag, k, v)
        for tag, attrs in page.tags
        for k, v in attrs.items()
        if k in ("src", "href", "xlink:href", "srcset")
    ]
    assert refs == []
    assert "@import" not in html and "url(" not in html and not re.search(r"(?i)\b(https?|ftp|file):", html)
    assert html.count("<style>") == 1 and html.startswith("<!DOCTYPE html>")


def test_the_fixtures_report_is_one_file_whose_counts_are_the_jsons(tmp_path: Path) -> None:
    html, page, report = html_and_json(tmp_path, str(CACHES), "--deep")
    assert_self_contained(html, page)
    summary = report["summary"]
    assert summary["findings"] >= 15 and page.cell("s-findings") == str(summary["findings"])
    assert (page.cell("s-files-read"), page.cell("s-folders")) == (str(summary["files_read"]), str(summary["folders"]))
    kinds = {r.attrs["data-kind"]: (int(r.cells[2]), int(r.cells[3])) for r in page.rows("kinds") if r.attrs}
    files = {k: len({f["path"] for f in report["findings"] if f["kind"] == k}) for k in summary["by_kind"]}
    assert kinds == {k: (n, files[k]) for k, n in summary["by_kind"].items()}
    per_folder = {r.attrs["data-folder"]: int(r.cells[1]) for r in page.rows("folders") if r.attrs}
    assert sum(per_folder.values()) == summary["findings"]
    for folder, n in per_folder.items():
        assert n == sum(1 for f in report["findings"] if str(Path(f["path"]).parent) == folder)
    assert page.cell("s-exit") == str(summary["exit_code"]) == "1"


def test_a_multi_gpu_runs_report_draws_its_steps_per_rank(tmp_path: Path) -> None:
    cache = tmp_path / "vae"
    shutil.copytree(VAE, cache)
    html, page, report = html_and_json(tmp_path, str(cache), *RANKS)
    assert_self_contained(html, page)
    [finding] = report["findings"]
    steps = [r for r in page.tables["rank-steps-0"] if r.attrs.get("data-row") == "steps"]
    assert [int(c) for c in steps[0].cells[2:]] == finding["details"]["steps"] == [0, 1]
    buckets = {
        r.attrs["data-bucket"]: [int(c) for c in r.cells[2:]]
        for r in page.tables["rank-steps-0"]
        if r.attrs.get("data-bucket")
    }
    assert buckets == finding["details"]["by_bucket"]
    assert "rank 1: bucket 8x8: 1 steps" in page.titles


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium on PATH")
def test_chromium_renders_the_report_offline(tmp_path: Path) -> None:
    cache = tmp_path / "vae"
    shutil.copytree(VAE, cache)
    html_and_json(tmp_path, str(cache), *RANKS)
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    page = (tmp_path / "report.html").as_uri()
    dom = subprocess.run(
        [str(CHROMIUM), *flags, "--dump-dom", page], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    rendered = read_page(dom)
    assert sum(1 for tag, _ in rendered.tags if tag == "svg") == 3  # kinds, folders, steps per rank
    assert "1 error(s), 0 warning(s) in 1 file(s)." in rendered.text
    shot = tmp_path / "report.png"
    subprocess.run(
        [str(CHROMIUM), *flags, "--window-size=1200,1600", f"--screenshot={shot}", page],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
