"""``partial-write``: a temp file left by an atomic write that never reached its rename.

SimpleTuner writes ``tmp`` + 8 random characters (no extension) in the cache folder and renames
it; a run killed mid-write leaves those. ``*.tmp`` and ``*.partial`` are the other common
conventions. The content is by definition unfinished, so it is not read.
"""

from __future__ import annotations

import os
import re
from typing import Iterable

from cachedoctor.checks.interface import Check, Inspected
from cachedoctor.findings import Finding, Fix, Severity

_TEMP_NAME = re.compile(r"^tmp[A-Za-z0-9_]{8}$")
_TEMP_SUFFIXES = (".tmp", ".partial")


def is_temp_name(path: str) -> bool:
    name = os.path.basename(path)
    return bool(_TEMP_NAME.match(name)) or name.lower().endswith(_TEMP_SUFFIXES)


class PartialWrite(Check):
    kind = "partial-write"
    severity = Severity.ERROR
    fix = Fix.QUARANTINE
    summary = "a temp file left by an interrupted atomic write (tmp + 8 characters, *.tmp, *.partial)"

    def check_file(self, item: Inspected) -> Iterable[Finding]:
        if item.temp:
            yield self.finding(item.path, f"temp file of an interrupted write ({item.size} bytes); the final file was never renamed into place",
                               size=item.size)
