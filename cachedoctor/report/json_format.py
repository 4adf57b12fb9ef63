"""``--format json``: one ``cachedoctor.scan/1`` document."""

from __future__ import annotations

import json
from typing import TextIO

from cachedoctor.report.interface import Renderer
from cachedoctor.report.outcome import ScanReport


class JsonRenderer(Renderer):
    def render(self, report: ScanReport, out: TextIO, *, color: bool) -> None:
        json.dump(report.document(), out, indent=2, sort_keys=False)
        out.write("\n")
