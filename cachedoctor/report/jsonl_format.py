"""``--format jsonl``: one finding per line, for ``jq``, log shippers and streaming consumers."""

from __future__ import annotations

import json
from typing import TextIO

from cachedoctor.report.interface import Renderer
from cachedoctor.report.outcome import ScanReport


class JsonlRenderer(Renderer):
    def render(self, report: ScanReport, out: TextIO, *, color: bool) -> None:
        for finding in report.findings:
            out.write(json.dumps(finding.to_json(), separators=(",", ":")))
            out.write("\n")
