"""``partial-write``: a temp file left by an atomic write that never reached its rename.

SimpleTuner writes ``tmp`` + 8 random characters (no extension) in the cache folder and renames
it; a run killed mid-write leaves those. ``*.tmp`` and ``*.partial`` are the other common
conventions. The content is by definition unfinished, so it is not read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from cachedoctor.checks.interface import Check, Inspected
from cachedoctor.findings import Finding, Fix, Severity

_TEMP_NAME = re.compile(r"^tmp[A-Za-z0-9_]{8}$")
_TEMP_SUFFIXES = (".tmp", ".partial")


def is_temp_name(path: str) -> bool:
    name = path[path.rfind(os.sep) + 1 :] if os.altsep is None else os.path.basename(path)  # run per file
    return (name.startswith("tmp") and _TEMP_NAME.match(name) is not None) or name.lower().endswith(_TEMP_SUFFIXES)


class PartialWrite(Check):
    kind = "partial-write"
    severity = Severity.ERROR
    fix = Fix.QUARANTINE
    summary = "a temp file left by an interrupted atomic write (tmp + 8 characters, *.tmp, *.partial)"
    why = (
        'It is half of a file: anything that opens it fails (torch.load: "failed finding '
        'central directory"). It also marks a caching run that was killed (OOM, preemption, '
        "Ctrl-C): the entry it was meant to become is missing or still the old one, which "
        'SimpleTuner finds only at collate time, hours into training ("Some images were not '
        'correctly cached during the VAE Cache operations"). Meanwhile it takes the disk '
        "space of a full entry."
    )
    repair = (
        "quarantine: the temp file is moved into <cache "
        "root>/.cachedoctor/quarantine/<run>/, never deleted, and nothing is written in "
        "its place; the entry it was meant to become is judged on its own (with the "
        "dataset, a missing one is a missing-entry and is recomputed). `cachedoctor "
        "quarantine restore RUN CACHE_ROOT` undoes it. A .cachedoctor-*.tmp left by "
        "repair's own interrupted write is deleted instead (cleanup): it holds no user "
        "data."
    )

    def check_file(self, item: Inspected) -> Iterable[Finding]:
        if item.temp:
            yield self.finding(
                item.path,
                f"temp file of an interrupted write ({item.size} bytes); the final file was never renamed into place",
                size=item.size,
            )
