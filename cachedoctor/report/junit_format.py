"""``--format junit``: JUnit XML, the one report format every CI server already reads.

GitLab (``artifacts:reports:junit``), Jenkins (``junit``/xunit) and the GitHub test-report
actions all render it, so a cache scan shows up beside the unit tests without a plugin.
Each finding kind cachedoctor knows is one test case, so a clean kind is a *passed* case: the
report says what was checked, not only what broke. Findings at or above ``--fail-on`` are the
case's ``<failure>``; findings below it leave the case passing and go to its ``<system-out>``,
so the report agrees with the exit code. Files that could not be read are one ``<error>``
case: the scan is incomplete (exit 2), which is not the same as a cache defect.

Built with :mod:`xml.etree.ElementTree` (no dependency): it escapes markup and quotes; the
characters XML 1.0 cannot carry at all (most C0 controls) are stripped first, since a path may
hold any byte but a report with one of them would not parse.
"""

from __future__ import annotations

import datetime
import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Callable
from typing import TextIO

from cachedoctor import __version__
from cachedoctor.findings import Finding
from cachedoctor.report.interface import Renderer
from cachedoctor.report.outcome import ScanReport
from cachedoctor.report.text import displayable, relative

SUITE_NAME = "cachedoctor scan"
UNREADABLE = "unreadable files"

# Everything outside XML 1.0's Char production (tab, LF and CR are allowed; U+FFFE/U+FFFF are not).
_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(text: str) -> str:
    """``text`` as XML 1.0 can carry it: undecodable bytes as U+FFFD, forbidden characters dropped."""
    return _NOT_XML.sub("", displayable(text))


class JunitRenderer(Renderer):
    def __init__(self, cwd: str) -> None:
        self.cwd = cwd

    def render(self, report: ScanReport, out: TextIO, *, color: bool) -> None:
        root = self.build(report)
        ET.indent(root)
        out.write('<?xml version="1.0" encoding="UTF-8"?>\n')
        out.write(ET.tostring(root, encoding="unicode"))
        out.write("\n")

    def build(self, report: ScanReport) -> ET.Element:
        """The ``<testsuites>`` element: one suite, one case per kind (+ one for unreadable files)."""
        from cachedoctor.checks import CHECKS

        grouped: dict[str, list[Finding]] = defaultdict(list)
        for f in sorted(report.findings, key=Finding.sort_key):
            grouped[f.kind].append(f)
        kinds = [c.kind for c in CHECKS]
        kinds += sorted(k for k in grouped if k not in kinds)  # a kind no check owns still shows

        elapsed = f"{report.scan.elapsed:.3f}"
        suite = ET.Element("testsuite", name=SUITE_NAME, timestamp=_started(report.scan.elapsed), time=elapsed)
        properties = ET.SubElement(suite, "properties")
        for name, value in self._properties(report):
            ET.SubElement(properties, "property", name=name, value=xml_text(value))
        failures = 0
        for kind in kinds:
            failures += self._case(suite, kind, grouped.get(kind, []), report)
        errors = self._unreadable(suite, report)
        verdict = ET.SubElement(suite, "system-out")
        verdict.text = xml_text(_verdict(report, lambda p: relative(p, self.cwd)))

        counts = {"tests": str(len(kinds) + errors), "failures": str(failures), "errors": str(errors)}
        suite.attrib.update(counts, skipped="0")
        root = ET.Element("testsuites", {"name": "cachedoctor", "time": elapsed, **counts})
        root.append(suite)
        return root

    def _case(self, suite: ET.Element, kind: str, findings: list[Finding], report: ScanReport) -> int:
        """Append ``kind``'s test case; 1 if it failed, else 0."""
        case = ET.SubElement(suite, "testcase", classname=f"cachedoctor.{kind}", name=kind, time="0")
        failing = [f for f in findings if report.fail_on.trips(f.severity)]
        below = [f for f in findings if not report.fail_on.trips(f.severity)]
        if failing:
            failure = ET.SubElement(case, "failure", message=f"{len(failing)} finding(s)", type=kind)
            failure.text = "\n".join(self._line(f) for f in failing)
        if below:
            text = ET.SubElement(case, "system-out")
            text.text = f"below --fail-on {report.fail_on.value}:\n" + "\n".join(self._line(f) for f in below)
        return 1 if failing else 0

    def _unreadable(self, suite: ET.Element, report: ScanReport) -> int:
        """Append the unreadable-files case when there are any; the number of errors (0 or 1)."""
        problems = report.scan.errors
        if not problems:
            return 0
        case = ET.SubElement(suite, "testcase", classname="cachedoctor.scan", name=UNREADABLE, time="0")
        error = ET.SubElement(case, "error", message=f"{len(problems)} file(s) could not be read", type="unreadable")
        error.text = "\n".join(xml_text(f"{relative(p.path, self.cwd)}: {p.message}") for p in problems)
        return 1

    def _line(self, f: Finding) -> str:
        item = f", item: {relative(f.source, self.cwd)}" if f.source else ""
        return xml_text(f"[{f.severity.value}] {relative(f.path, self.cwd)}: {f.message} (fix: {f.fix.value}{item})")

    @staticmethod
    def _properties(report: ScanReport) -> list[tuple[str, str]]:
        props = [
            ("cachedoctor.version", __version__),
            ("cachedoctor.fail_on", report.fail_on.value),
            ("cachedoctor.deep", str(report.scan.deep).lower()),
        ]
        if report.layout_line:
            props.append(("cachedoctor.layout", report.layout_line))
        props += [("cachedoctor.note", note) for note in report.notes]
        return props


def _started(elapsed: float) -> str:
    """When the scan started (now minus its duration), local time with its UTC offset, to the second."""
    now = datetime.datetime.now().astimezone()
    return (now - datetime.timedelta(seconds=elapsed)).replace(microsecond=0).isoformat()


def _verdict(report: ScanReport, show: Callable[[str], str]) -> str:
    """The table's closing sentence: counts and what to run next."""
    sev = report.by_severity()
    files = len({f.path for f in report.findings})
    info = f", {sev['info']} info" if sev["info"] else ""
    head = (
        f"{sev['error']} error(s), {sev['warning']} warning(s){info} in {files} file(s)."
        if report.findings
        else report.clean_verdict()
    )
    return f"{head} {report.next_step(show)}".strip()
