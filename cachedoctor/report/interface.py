"""Renderers turn a :class:`ScanReport` into text; the set of formats is a closed enum."""

from __future__ import annotations

import abc
import enum
from typing import TextIO

from cachedoctor.report.outcome import ScanReport


class OutputFormat(str, enum.Enum):
    TABLE = "table"
    JSON = "json"
    JSONL = "jsonl"
    JUNIT = "junit"  # JUnit XML for CI test reporters (GitLab, Jenkins, GitHub actions)
    GITHUB = "github"  # GitHub Actions workflow commands (annotations) and step summary
    HTML = "html"  # one self-contained page with charts, for people (best written with -o FILE)


class Renderer(abc.ABC):
    @abc.abstractmethod
    def render(self, report: ScanReport, out: TextIO, *, color: bool) -> None:
        """Write the report to ``out``. ``color``: styles and colour, as the environment settled
        them (``--color``, ``NO_COLOR``, ``FORCE_COLOR``, a terminal); the machine formats ignore it."""
