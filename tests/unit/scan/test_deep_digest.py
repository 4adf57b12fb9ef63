"""A deep scan with the state database reads each file once: the digest it records is the one
the deep read took of the bytes it already had, not a second pass over the file.

Counted with the kernel's own counter (``/proc/self/io`` ``rchar``: bytes this process asked
``read`` for), in this process (``workers=1``). The deep read maps large files, so the counter
sees none of their bytes; a second hashing pass would read them all through ``read``.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest
import torch
import xxhash
from factories import save_pt, settle

from cachedoctor.scan import ScanOptions, scan

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/io is Linux's")

_SIZE = 32 << 20


def rchar() -> int:
    with open("/proc/self/io", encoding="ascii") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith("rchar:"))


def deep_scan_reads(folder: Path, state: str | None) -> int:
    before = rchar()
    result = scan([str(folder)], ScanOptions(deep=True, workers=1, state=state))
    after = rchar()
    assert result.errors == [] and result.stats.files_deep == 1
    return after - before


def test_deep_scan_with_state_reads_the_file_once_and_records_its_deep_digest(tmp_path: Path) -> None:
    warm, big = tmp_path / "warm", tmp_path / "big"
    save_pt(warm / "w.pt", torch.zeros(1 << 18))
    path = save_pt(big / "one.pt", torch.zeros(_SIZE // 4))
    settle(big)
    deep_scan_reads(warm, "auto")  # imports and first-use costs, paid once
    without_state = deep_scan_reads(big, None)
    with_state = deep_scan_reads(big, "auto")
    size = path.stat().st_size
    assert with_state - without_state < size // 8, (with_state, without_state, size)
    db = sqlite3.connect(big / ".cachedoctor" / "state.sqlite")
    (digest,) = db.execute("SELECT xxh3 FROM files WHERE name = ?", (b"one.pt",)).fetchone()
    db.close()
    assert digest == xxhash.xxh3_128_hexdigest(path.read_bytes())


def test_deep_scan_with_state_records_the_digest_of_files_read_into_memory(tmp_path: Path) -> None:
    """Files under the mapping size are read into the reused buffer: the digest the state
    database keeps is still their xxh3 (a scan without the database skips that pass)."""
    import numpy as np
    from safetensors.torch import save_file

    folder = tmp_path / "cache"
    x = torch.randn(4, 16, 16, generator=torch.Generator().manual_seed(3))
    save_pt(folder / "a.pt", x)
    np.savez(folder / "b.npz", latents=x.numpy())
    save_file({"latents": x}, str(folder / "c.safetensors"))
    settle(folder)
    without_state = scan([str(folder)], ScanOptions(deep=True, workers=1, state=None))
    with_state = scan([str(folder)], ScanOptions(deep=True, workers=1, state="auto"))
    for result in (without_state, with_state):
        assert result.errors == [] and result.stats.files_deep == 3 and result.findings == []
    db = sqlite3.connect(folder / ".cachedoctor" / "state.sqlite")
    recorded = dict(db.execute("SELECT name, xxh3 FROM files"))
    db.close()
    assert recorded == {
        p.name.encode(): xxhash.xxh3_128_hexdigest(p.read_bytes()) for p in folder.iterdir() if p.is_file()
    }
