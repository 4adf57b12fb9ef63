"""``--format junit`` and ``--format github`` through ``run(argv, env)`` on caches with planted defects.

The JUnit output is validated against ``schemas/junit.xsd`` (the Jenkins/Ant dialect CI reporters
read); the GitHub output is compared line for line with the workflow commands the runner parses.
"""

from __future__ import annotations

import datetime
import io
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch
import xmlschema
from factories import latent, peers, save_pt, saved_on

from cachedoctor import __version__
from cachedoctor.checks import CHECKS
from cachedoctor.cli import run
from cachedoctor.cli.environment import Environment
from cachedoctor.findings import Finding, Fix, Severity
from cachedoctor.report import OutputFormat, ScanReport, renderer_for
from cachedoctor.report.github_format import escape_data, escape_property
from cachedoctor.report.junit_format import xml_text
from cachedoctor.scan import ScanOptions, scan

JUNIT_XSD = xmlschema.XMLSchema(str(Path(__file__).resolve().parents[2] / "schemas" / "junit.xsd"))
KINDS = [c.kind for c in CHECKS]
LEAK_MESSAGE = "<root> is a view of a larger batch: the file stores 3584 bytes for 512 (7.0x)"
GPU_MESSAGE = "tensors are tagged cuda:1: loading without map_location fails on a CPU machine or lands them on that GPU"
GITHUB_LINES = [
    f"::error file=cache/leak.pt,title=batch-leak::{LEAK_MESSAGE} (fix: clone-storage)",
    f"::warning file=cache/gpu.pt,title=device-tagged::{GPU_MESSAGE} (fix: rewrite-cpu)",
    "::notice title=cachedoctor::1 error(s), 1 warning(s) in 2 file(s)",
]


@pytest.fixture(autouse=True)
def no_step_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests may run on GitHub Actions themselves: never append to the real step summary."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


def cli(cwd: Path, *argv: str, tty: bool = False) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdout_isatty=tty, stderr_isatty=tty, cwd=str(cwd))
    return run(list(argv), env), out.getvalue(), err.getvalue()


def leak(path: Path) -> Path:
    """A per-item file holding a saved view of a 7-item batch: one ``batch-leak`` error."""
    return save_pt(path, torch.randn(7, 4, 8, 8).to(torch.bfloat16)[1])


def on_gpu(path: Path) -> Path:
    """A latent tagged ``cuda:1`` as a GPU save tags it: one ``device-tagged`` warning."""
    with saved_on("cuda:1"):
        return save_pt(path, latent(seed=5))


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """``tmp_path/cache``: four healthy peers, ``leak.pt`` (error) and ``gpu.pt`` (warning)."""
    folder = tmp_path / "cache"
    peers(folder)
    leak(folder / "leak.pt")
    on_gpu(folder / "gpu.pt")
    return folder


def parse_junit(xml: str) -> ET.Element:
    """Validate against the schema, then return the one ``<testsuite>``."""
    JUNIT_XSD.validate(xml)
    root = ET.fromstring(xml)
    assert root.tag == "testsuites" and [s.get("name") for s in root] == ["cachedoctor scan"]
    return root[0]


def junit(cwd: Path, *argv: str) -> tuple[int, ET.Element, str]:
    code, out, err = cli(cwd, "scan", *argv, "--format", "junit")
    return code, parse_junit(out), err


def cases(suite: ET.Element) -> dict[str, ET.Element]:
    return {case.get("name"): case for case in suite.findall("testcase")}


def counts(suite: ET.Element) -> tuple[str, ...]:
    return tuple(suite.get(a) for a in ("tests", "failures", "errors", "skipped"))


# --- JUnit ------------------------------------------------------------------------------------


def test_junit_one_case_per_kind_and_the_leak_fails(cache: Path, tmp_path: Path) -> None:
    code, suite, err = junit(tmp_path, str(cache))
    assert (code, err) == (1, "")
    assert [c.get("name") for c in suite.findall("testcase")] == KINDS
    assert all(c.get("classname") == f"cachedoctor.{c.get('name')}" for c in suite.findall("testcase"))
    assert counts(suite) == (str(len(CHECKS)), "1", "0", "0")
    by_name = cases(suite)
    failure = by_name["batch-leak"].find("failure")
    assert (failure.get("message"), failure.get("type")) == ("1 finding(s)", "batch-leak")
    assert failure.text == f"[error] cache/leak.pt: {LEAK_MESSAGE} (fix: clone-storage)"
    gpu = by_name["device-tagged"]  # a warning under the default --fail-on error: passes, logged
    assert gpu.find("failure") is None
    assert gpu.find("system-out").text == (
        f"below --fail-on error:\n[warning] cache/gpu.pt: {GPU_MESSAGE} (fix: rewrite-cpu)"
    )
    assert all(len(by_name[k]) == 0 for k in KINDS if k not in ("batch-leak", "device-tagged"))
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["cachedoctor.version"] == __version__ and props["cachedoctor.fail_on"] == "error"
    assert props["cachedoctor.layout"].startswith("layout: none")
    assert datetime.datetime.fromisoformat(suite.get("timestamp")).tzinfo is not None
    assert suite.find("system-out").text.startswith("1 error(s), 1 warning(s) in 2 file(s).")


def test_junit_fail_on_decides_failure_or_log(cache: Path, tmp_path: Path) -> None:
    code, suite, _ = junit(tmp_path, str(cache), "--fail-on", "warning")
    assert code == 1 and counts(suite)[:3] == (str(len(CHECKS)), "2", "0")
    failure = cases(suite)["device-tagged"].find("failure")
    assert failure.get("message") == "1 finding(s)" and "cache/gpu.pt" in failure.text
    code, suite, _ = junit(tmp_path, str(cache), "--fail-on", "never")
    assert code == 0 and counts(suite)[1] == "0"
    assert "cache/leak.pt" in cases(suite)["batch-leak"].find("system-out").text


def test_junit_warning_only_cache_passes_default_gate(tmp_path: Path) -> None:
    peers(tmp_path / "cache")
    on_gpu(tmp_path / "cache" / "gpu.pt")
    code, suite, _ = junit(tmp_path, str(tmp_path / "cache"))
    assert code == 0 and counts(suite)[1] == "0"
    code, suite, _ = junit(tmp_path, str(tmp_path / "cache"), "--fail-on", "warning")
    assert code == 1 and counts(suite)[1] == "1"


def test_junit_clean_cache_is_all_passed_cases(tmp_path: Path) -> None:
    peers(tmp_path / "cache")
    code, suite, _ = junit(tmp_path, str(tmp_path / "cache"))
    assert code == 0 and counts(suite) == (str(len(CHECKS)), "0", "0", "0")
    assert all(len(case) == 0 for case in suite.findall("testcase"))


def test_junit_unreadable_file_is_one_error_case(tmp_path: Path) -> None:
    peers(tmp_path / "cache")
    # unreadable even for root (a link to a name too long to resolve: ENAMETOOLONG); a symlink
    # loop under another name is left alone, under a cache name (loop.pt) it is a broken-link finding
    (tmp_path / "cache" / "loop").symlink_to("a" * 300)
    code, suite, err = junit(tmp_path, str(tmp_path / "cache"))
    assert code == 2 and "loop" in err
    assert counts(suite)[:3] == (str(len(CHECKS) + 1), "0", "1")
    error = cases(suite)["unreadable files"].find("error")
    assert (error.get("message"), error.get("type")) == ("1 file(s) could not be read", "unreadable")
    assert error.text.startswith("cache/loop: cannot stat")


def test_junit_path_with_markup_quotes_and_control_round_trips(tmp_path: Path) -> None:
    peers(tmp_path / "cache")
    leak(tmp_path / "cache" / "we<ird&\"q'\x01>.pt")
    code, suite, _ = junit(tmp_path, str(tmp_path / "cache"))
    text = cases(suite)["batch-leak"].find("failure").text
    assert code == 1 and text.startswith("[error] cache/we<ird&\"q'>.pt: ")  # \x01 cannot be XML: dropped


def test_junit_and_github_survive_undecodable_file_names(tmp_path: Path) -> None:
    peers(tmp_path / "cache")
    leak(tmp_path / "cache" / os.fsdecode(b"bad\xff.pt"))  # a lone surrogate in Python; UTF-8 refuses it
    code, out, err = cli(tmp_path, "scan", str(tmp_path / "cache"), "--format", "junit", "-o", str(tmp_path / "r.xml"))
    assert (code, out, err) == (1, "", "")
    failure = cases(parse_junit((tmp_path / "r.xml").read_text("utf-8")))["batch-leak"].find("failure")
    assert "cache/bad\ufffd.pt: " in failure.text
    code, _, _ = cli(tmp_path, "scan", str(tmp_path / "cache"), "--format", "github", "-o", str(tmp_path / "r.txt"))
    assert code == 1 and "file=cache/bad\ufffd.pt," in (tmp_path / "r.txt").read_text("utf-8")


def test_xml_text_keeps_what_xml_can_carry() -> None:
    assert xml_text("a\tb\nc\rd<&>\"'é\U0001f600") == "a\tb\nc\rd<&>\"'é\U0001f600"
    assert xml_text("x\x00\x08\x0b\x0c\x1f\ufffe\uffffy") == "xy"
    assert xml_text("bad\udcff") == "bad\ufffd"


def test_junit_output_file_holds_the_report(cache: Path, tmp_path: Path) -> None:
    target = tmp_path / "junit.xml"
    code, out, err = cli(tmp_path, "scan", str(cache), "--format", "junit", "--output", str(target))
    assert (code, out, err) == (1, "", "")
    assert counts(parse_junit(target.read_text("utf-8")))[1] == "1"
    code, out, _ = cli(tmp_path, "scan", str(cache), "--format", "junit", "-o", str(target), tty=True)
    assert code == 1 and "batch-leak (1)" in out and "<testsuites" not in out  # the table on a terminal


# --- the schema itself ------------------------------------------------------------------------

MINIMAL = (
    '<testsuites><testsuite name="s" tests="1" failures="0" errors="0">'
    '<testcase name="c" classname="k"/></testsuite></testsuites>'
)


def test_schema_accepts_a_minimal_report() -> None:
    assert JUNIT_XSD.is_valid(MINIMAL)


@pytest.mark.parametrize(
    "bad",
    [
        MINIMAL.replace(' name="c"', ""),  # a test case without a name
        MINIMAL.replace('tests="1"', 'tests="many"'),  # a count that is no number
        MINIMAL.replace('failures="0" ', ""),  # a required count missing
        MINIMAL.replace('<testcase name="c" classname="k"/>', '<failure message="x"/>'),  # failure outside a case
        MINIMAL.replace(
            '<testcase name="c" classname="k"/>', '<testcase name="c"><system-out>o</system-out><failure/></testcase>'
        ),  # out of order
        MINIMAL.replace("testsuites>", "results>"),  # not JUnit at all
    ],
    ids=["no-name", "bad-count", "no-failures", "stray-failure", "order", "root"],
)
def test_schema_rejects_invalid_reports(bad: str) -> None:
    assert not JUNIT_XSD.is_valid(bad)


# --- GitHub -----------------------------------------------------------------------------------


def test_github_annotations_for_the_planted_defects(cache: Path, tmp_path: Path) -> None:
    code, out, err = cli(tmp_path, "scan", str(cache), "--format", "github")
    assert (code, err) == (1, "")
    assert out.splitlines() == GITHUB_LINES


def test_github_clean_cache_is_one_notice(tmp_path: Path) -> None:
    peers(tmp_path / "cache")
    assert cli(tmp_path, "scan", str(tmp_path / "cache"), "--format", "github") == (
        0,
        "::notice title=cachedoctor::no findings\n",
        "",
    )


def test_github_escapes_path_properties(tmp_path: Path) -> None:
    peers(tmp_path / "cache")
    leak(tmp_path / "cache" / "odd,name:1%.pt")
    code, out, _ = cli(tmp_path, "scan", str(tmp_path / "cache"), "--format", "github")
    assert code == 1
    assert out.splitlines()[0] == (
        f"::error file=cache/odd%2Cname%3A1%25.pt,title=batch-leak::{LEAK_MESSAGE} (fix: clone-storage)"
    )


def test_github_escapes_messages_so_one_finding_stays_one_line(tmp_path: Path) -> None:
    peers(tmp_path / "cache")
    result = scan([str(tmp_path / "cache")], ScanOptions(workers=1))
    result.findings[:] = [
        Finding(
            "stale-entry",
            Severity.WARNING,
            str(tmp_path / "cache" / "a,b:c.pt"),
            "line one\nline two: 100%\r",
            Fix.RECOMPUTE,
            source=str(tmp_path / "img,1.png"),
        )
    ]
    out = io.StringIO()
    renderer_for(OutputFormat.GITHUB, str(tmp_path)).render(ScanReport(result), out, color=False)
    assert out.getvalue().splitlines() == [
        "::warning file=cache/a%2Cb%3Ac.pt,title=stale-entry::line one%0Aline two: 100%25%0D "
        "(item: img,1.png; fix: recompute)",
        "::notice title=cachedoctor::0 error(s), 1 warning(s) in 1 file(s)",
    ]
    assert escape_data("a%b\r\nc:d,e") == "a%25b%0D%0Ac:d,e"
    assert escape_property("a%b\r\nc:d,e") == "a%25b%0D%0Ac%3Ad%2Ce"


def test_github_unreadable_file_is_an_error_annotation(tmp_path: Path) -> None:
    peers(tmp_path / "cache")
    (tmp_path / "cache" / "loop").symlink_to("a" * 300)  # unreadable even for root (ENAMETOOLONG)
    code, out, _ = cli(tmp_path, "scan", str(tmp_path / "cache"), "--format", "github")
    lines = out.splitlines()
    assert code == 2 and len(lines) == 2
    assert lines[0].startswith("::error file=cache/loop,title=unreadable file::could not be read: cannot stat")
    assert lines[1] == "::notice title=cachedoctor::no findings; 1 file(s) could not be read, so the scan is incomplete"


def test_github_appends_the_step_summary(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "step_summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    code, out, _ = cli(tmp_path, "scan", str(cache), "--format", "github")
    assert code == 1 and out.splitlines() == GITHUB_LINES  # the table goes to the file, not stdout
    text = summary.read_text("utf-8")
    assert text.startswith("earlier step\n### cachedoctor scan\n\n1 error(s), 1 warning(s) in 2 file(s).\n\n")
    assert (
        "| kind | severity | files | fix |\n| --- | --- | --- | --- |\n"
        "| batch-leak | error | 1 | clone-storage |\n| device-tagged | warning | 1 | rewrite-cpu |\n"
    ) in text


def test_github_unwritable_step_summary_is_a_warning(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path))  # a folder: cannot be opened for append
    code, out, _ = cli(tmp_path, "scan", str(cache), "--format", "github")
    lines = out.splitlines()
    assert code == 1 and lines[:2] == GITHUB_LINES[:2] and lines[3] == GITHUB_LINES[2]
    assert lines[2].startswith("::warning title=cachedoctor::cannot append to GITHUB_STEP_SUMMARY")


def test_github_output_file_holds_the_report(cache: Path, tmp_path: Path) -> None:
    target = tmp_path / "annotations.txt"
    code, out, err = cli(tmp_path, "scan", str(cache), "--format", "github", "--output", str(target))
    assert (code, out, err) == (1, "", "")
    assert target.read_text("utf-8").splitlines() == GITHUB_LINES
