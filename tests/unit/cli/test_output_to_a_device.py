"""``--output /dev/null`` (or any device, FIFO or socket) is written to, never replaced: the
atomic temp-and-rename of a report would put a regular file where the device was, and as root
that is ``/dev/null`` itself (seen: a scan with ``--output /dev/null`` left /dev/null a file)."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from tests.cli_run import cli

KOHYA = str(Path(__file__).resolve().parents[3] / "fixtures" / "caches" / "kohya")


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_a_character_device_stays_a_device(tmp_path: Path) -> None:
    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    code, _, err = cli("scan", KOHYA, "--no-state", "--format", "json", "--output", str(null))
    assert (code, err) == (1, "")
    assert stat.S_ISCHR(null.stat().st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["null"]  # no temp file left beside it


def test_a_fifo_gets_the_report_and_stays_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    code, _, err = cli("scan", KOHYA, "--no-state", "--format", "json", "--output", str(fifo))
    reader.join(timeout=30)
    assert (code, err) == (1, "")
    assert stat.S_ISFIFO(fifo.stat().st_mode) and b'"cachedoctor.scan/1"' in got[0]
