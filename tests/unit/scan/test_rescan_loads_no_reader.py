"""A rescan in which nothing changed reads no file, so it must not pay for loading the readers:
the whole-process rescan goal (bench/rescan_bench.py) depends on it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from factories import peers

_CODE = """
import json, sys
from cachedoctor.scan import ScanOptions, scan
result = scan([{cache!r}], ScanOptions(workers={workers}, state="auto"))
print(json.dumps([result.stats.files_seen - result.stats.files_reused, sorted(m for m in sys.modules if m.startswith("cachedoctor.formats"))]))
"""


def _scan_in_a_fresh_process(cache: Path, workers: int) -> tuple[int, list[str]]:
    out = subprocess.run(
        [sys.executable, "-c", _CODE.format(cache=str(cache), workers=workers)],
        capture_output=True,
        text=True,
        check=True,
    )
    read, modules = json.loads(out.stdout)
    return read, modules


def test_a_rescan_of_an_unchanged_cache_imports_no_reader(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    peers(cache, 3)
    first_read, first_modules = _scan_in_a_fresh_process(cache, workers=1)
    assert first_read == 3 and "cachedoctor.formats" in first_modules  # the first scan reads: readers loaded
    for workers in (1, 2):
        read, modules = _scan_in_a_fresh_process(cache, workers)
        assert (read, modules) == (0, [])
