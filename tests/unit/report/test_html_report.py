"""``--format html``: every number the page shows equals the JSON report of the same scan (the
summary, findings per kind and folder, steps per rank and bucket, channels against their peers);
untrusted file names and messages are escaped; the GitHub step summary names the file and stays
under GitHub's 1 MiB."""

from __future__ import annotations

import io
import json
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from cachedoctor.cli import run
from cachedoctor.cli.environment import Environment
from cachedoctor.findings import Finding, Fix, Severity
from cachedoctor.report import OutputFormat, ScanReport, ScanSummary, renderer_for
from cachedoctor.report.github_format import SUMMARY_LIMIT, fit
from cachedoctor.report.summary import Problem
from fixtures.builders.natural_latents import DEFECTS, healthy_set
from tests.factories import latent, peers, save_pt, saved_on
from tests.html_page import Page, read_page

#: a run-level finding names the dataset's cache folder itself (docs/json.md)
FOLDER_KINDS = ("rank-imbalance", "dropped-bucket")


@pytest.fixture(autouse=True)
def no_step_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests may run on GitHub Actions themselves: never append to the real step summary."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


def cli(cwd: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdout_isatty=False, stderr_isatty=False, cwd=str(cwd))
    return run(list(argv), env), out.getvalue(), err.getvalue()


def both(cwd: Path, *argv: str) -> tuple[dict, Page, str]:
    """The JSON report and the HTML page of one scan (run twice: the formats are separate runs)."""
    code, out, err = cli(cwd, "scan", "--no-state", "-j", "1", "--format", "json", *argv)
    assert err == "", err
    report = json.loads(out)
    code_html, html, err = cli(cwd, "scan", "--no-state", "-j", "1", "--format", "html", *argv)
    assert (code_html, err) == (code, "")
    return report, read_page(html), html


def folder_of(f: dict) -> str:
    return f["path"] if f["kind"] in FOLDER_KINDS else os.path.dirname(f["path"])


def defects(root: Path) -> Path:
    """Two folders: ``a`` with healthy peers, a leaked view and a GPU-tagged latent; ``b`` with a
    truncated file: a batch-leak error, a device-tagged warning and a corrupt-archive error."""
    peers(root / "a")
    save_pt(root / "a" / "leak.pt", torch.randn(7, 4, 8, 8).to(torch.bfloat16)[1])
    with saved_on("cuda:1"):
        save_pt(root / "a" / "gpu.pt", latent(seed=5))
    peers(root / "b")
    whole = (root / "b" / "peer0.pt").read_bytes()
    (root / "b" / "torn.pt").write_bytes(whole[: len(whole) // 2])
    return root


def test_the_summary_kinds_folders_and_findings_equal_the_json(tmp_path: Path) -> None:
    root = defects(tmp_path / "cache")
    report, page, _ = both(tmp_path, str(root))
    summary = report["summary"]
    assert page.cell("s-files-read") == str(summary["files_read"])
    assert page.cell("s-folders") == str(summary["folders"])
    assert page.cell("s-bytes-read").split(" ")[0] == str(summary["bytes_read"])
    assert page.cell("s-findings") == str(summary["findings"]) == "3"
    assert page.cell("s-files-with-findings") == str(summary["files_with_findings"])
    for key in ("error", "warning", "info"):
        assert page.cell(f"s-{key}s" if key != "info" else "s-info") == str(summary["by_severity"][key])
    assert page.cell("s-exit") == str(summary["exit_code"]) == "1"
    assert page.cell("s-mode") == "quick"
    # findings per kind: count and distinct files, as the JSON's by_kind and findings say
    kinds = {r.cells[0]: r.cells for r in page.rows("kinds") if r.attrs.get("data-kind")}
    assert {k: int(c[2]) for k, c in kinds.items()} == summary["by_kind"]
    files = {k: len({f["path"] for f in report["findings"] if f["kind"] == k}) for k in summary["by_kind"]}
    assert {k: int(c[3]) for k, c in kinds.items()} == files
    # findings per folder, and each severity's share of them
    folders = {r.attrs["data-folder"]: [int(c) for c in r.cells[1:5]] for r in page.rows("folders") if r.attrs}
    expected: dict[str, list[int]] = {}
    for f in report["findings"]:
        row = expected.setdefault(folder_of(f), [0, 0, 0, 0])
        row[0] += 1
        row[1 + ("error", "warning", "info").index(f["severity"])] += 1
    assert folders == expected == {str(root / "a"): [2, 1, 1, 0], str(root / "b"): [1, 1, 0, 0]}
    # every finding listed under its kind with its path (relative to the cwd) and message
    listed = {
        (attrs["data-kind"], r.cells[0], r.cells[1]) for attrs, rows in page.by_class("findings") for r in rows[1:]
    }
    assert listed == {(f["kind"], os.path.relpath(f["path"], tmp_path), f["message"]) for f in report["findings"]}
    assert "2 error(s), 1 warning(s) in 3 file(s)." in page.text  # the verdict


def rank_cache(root: Path) -> Path:
    """Latents of five sizes (buckets) whose shares split unevenly over 4 ranks at batch 2."""
    rng = np.random.default_rng(0)
    i = 0
    root.mkdir(parents=True)
    for (h, w), n in {(8, 8): 13, (8, 12): 7, (12, 8): 5, (16, 16): 9, (8, 16): 3}.items():
        for _ in range(n):
            np.savez(root / f"img_{i:04d}.npz", latents=rng.standard_normal((4, h, w)).astype(np.float32))
            i += 1
    return root


def test_the_steps_per_rank_and_bucket_equal_the_json(tmp_path: Path) -> None:
    root = rank_cache(tmp_path / "cache")
    report, page, _ = both(tmp_path, str(root), "--layout", "none", "--world-size", "4", "--batch-size", "2")
    [finding] = [f for f in report["findings"] if f["kind"] == "rank-imbalance"]
    d = finding["details"]
    assert d["steps"] == [3, 3, 3, 4] and set(d["by_bucket"]) == {"8x8", "8x12", "12x8"}  # the planted split
    table = page.tables["rank-steps-0"]
    assert table[0].cells == ["", "images", "rank 0", "rank 1", "rank 2", "rank 3"]
    [steps] = [r for r in table if r.attrs.get("data-row") == "steps"]
    assert [int(c) for c in steps.cells[2:]] == d["steps"]
    buckets = {r.attrs["data-bucket"]: r.cells for r in table if r.attrs.get("data-row") == "bucket"}
    assert {b: [int(c) for c in cells[2:]] for b, cells in buckets.items()} == d["by_bucket"]
    assert {b: int(cells[1]) for b, cells in buckets.items()} == d["images"]
    # the chart: one titled segment per non-zero share, and the rest of each rank's steps in grey
    drawn = [t for t in page.titles if t.startswith("rank ")]
    for r, total in enumerate(d["steps"]):
        for b, values in d["by_bucket"].items():
            assert (f"rank {r}: bucket {b}: {values[r]} steps" in drawn) == (values[r] > 0)
        even = total - sum(values[r] for values in d["by_bucket"].values())
        assert f"rank {r}: buckets every rank takes alike: {even} steps" in drawn


def outlier_cache(root: Path) -> Path:
    """31 natural latents, one unscaled (std 5.5x) and one of another VAE (one channel off)."""
    root.mkdir(parents=True)
    latents = healthy_set(0, 31, h=16, w=16)
    latents[7] = DEFECTS["unscaled"](latents[7])
    latents[12] = DEFECTS["other-vae"](latents[12], seed=1)
    for i, x in enumerate(latents):
        np.savez(root / f"img_{i:06d}.npz", latents=x)
    return root


def test_the_channels_against_their_peers_equal_the_json(tmp_path: Path) -> None:
    root = outlier_cache(tmp_path / "cache")
    report, page, _ = both(tmp_path, str(root), "--deep")
    found = [f for f in report["findings"] if f["kind"] == "distribution-outlier"]
    assert [Path(f["path"]).name for f in found] == ["img_000007.npz", "img_000012.npz"]
    columns = ("means", "peer_means", "peer_mean_spread", "stds", "peer_stds", "peer_std_spread")
    for n, f in enumerate(found):
        holder = [a for t, a in page.tags if t == "div" and a.get("id") == f"channels-{n}"]
        assert holder[0]["data-path"] == f["path"]
        rows = [r for r in page.tables[f"channel-stats-{n}"] if "data-channel" in r.attrs]
        assert len(rows) == f["details"]["channels"] == 4
        for c, row in enumerate(rows):
            assert [float(x) for x in row.cells[1:]] == [f["details"][col][c] for col in columns]
    # red dots: every std channel of the unscaled latent, channel 3's std of the other VAE's
    red = [a.get("class") == "off" for t, a in page.tags if t == "circle"]
    assert red == [False] * 4 + [True] * 4 + [False] * 4 + [False, False, False, True]
    assert found[1]["details"]["channel"] == 3 and found[1]["details"]["stat"] == "std"
    for f in found:
        dots = [t for t in page.titles if t.startswith("channel ")]
        for c in range(4):  # each dot's title: the file's value and the peers' median
            mean, peer = f["details"]["means"][c], f["details"]["peer_means"][c]
            assert f"channel {c}: {mean:.4g} (peers {peer:.4g})" in dots


def test_untrusted_file_names_and_messages_are_escaped(tmp_path: Path) -> None:
    hostile = "<img src=x onerror=alert(1)>.pt"
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / hostile).write_bytes(b"PK\x03\x04 not a zip")
    code, html, err = cli(tmp_path, "scan", "--no-state", "--format", "html", str(tmp_path / "cache"))
    assert (code, err) == (1, "")
    page = read_page(html)
    assert "img" not in {tag for tag, _ in page.tags} and "onerror" not in {k for _, a in page.tags for k in a}
    assert "&lt;img src=x onerror=alert(1)&gt;.pt" in html
    assert any(f"cache/{hostile}" == r.cells[0] for rows in page.tables.values() for r in rows if r.cells)
    # a message (untrusted: it quotes the file) that would close a script or a style element
    message = "</script><script>alert(1)</script></style><svg onload=alert(2)>"
    finding = Finding("corrupt-archive", Severity.ERROR, str(tmp_path / "x.pt"), message, Fix.QUARANTINE)
    out = io.StringIO()
    renderer_for(OutputFormat.HTML, str(tmp_path)).render(ScanReport(ScanSummary(["."], [finding])), out, color=False)
    written = read_page(out.getvalue())
    tags = Counter(tag for tag, _ in written.tags)
    assert (tags["script"], tags["style"]) == (0, 1) and not any("onload" in attrs for _, attrs in written.tags)
    assert message in written.text  # shown as text, whole


def test_the_step_summary_names_the_html_file_and_embeds_the_rank_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = rank_cache(tmp_path / "cache")
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    args = (
        "--layout",
        "none",
        "--world-size",
        "4",
        "--batch-size",
        "2",
        "--format",
        "html",
        "-o",
        str(tmp_path / "report.html"),
    )
    code, out, err = cli(tmp_path, "scan", "--no-state", str(root), *args)
    assert (code, out, err) == (1, "", "")
    size = (tmp_path / "report.html").stat().st_size
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("### cachedoctor HTML report\n\n1 error(s), 0 warning(s) in 1 file(s). The full report is ")
    assert f"`report.html` (one self-contained HTML file, {size / 1024:.1f} KB)" in text
    assert (
        "| | rank 0 | rank 1 | rank 2 | rank 3 |\n| --- | --- | --- | --- | --- |\n| steps | 3 | 3 | 3 | 4 |\n" in text
    )
    assert "| bucket 8x8 | 2 | 1 | 1 | 1 |\n| bucket 8x12 | 0 | 1 | 1 | 1 |\n| bucket 12x8 | 0 | 0 | 0 | 1 |\n" in text
    # to stdout there is no file to name: the summary is left alone
    summary.unlink()
    assert cli(tmp_path, "scan", "--no-state", str(root), *args[:-2])[0] == 1 and not summary.exists()


def test_the_step_summary_is_cut_to_stay_under_one_mib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "summary.md"
    summary.write_bytes(b"x" * (SUMMARY_LIMIT - 2000))  # earlier output of the step: 2000 bytes are left
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    unread = [Problem(f"/cache/{i:05d}.pt", "permission denied") for i in range(200)]  # ~10 KB of lines
    report = ScanReport(ScanSummary(["/cache"], [], errors=unread))
    code_out = io.StringIO()
    renderer_for(OutputFormat.GITHUB, str(tmp_path)).render(report, code_out, color=False)
    added = summary.read_bytes()[SUMMARY_LIMIT - 2000 :].decode()
    assert summary.stat().st_size <= SUMMARY_LIMIT < 1024 * 1024
    assert added.startswith("### cachedoctor scan\n\nno findings; 200 file(s) could not be read")
    assert "- could not read `/cache/00000.pt`: permission denied\n" in added and "/cache/00199.pt" not in added
    assert added.endswith(
        "(the step summary is limited to 1 MiB: the rest was cut; --format json or html has it all)\n\n"
    )
    assert fit("short\n", 2000) == "short\n" and fit("a" * 50, 10) == ""
