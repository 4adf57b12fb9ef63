"""Factories that write cache files the way trainers write them (real torch.save, np.savez,
safetensors), and test helpers (a scan returning findings as comparable tuples, ``settle``,
a malicious payload). The file builders live in ``fixtures/builders/latents.py``, shared with
the fixture generators and the benchmarks; their names stay importable from here."""

from __future__ import annotations

import os
import pickle
import time
from pathlib import Path

from fixtures.builders.latents import (  # noqa: F401  (re-exported for the tests)
    data_offset,
    flip_data_byte,
    gzipped,
    latent,
    leaked_view,
    peers,
    pt_bytes,
    rezip,
    save_pt,
    saved_on,
    write_npz,
)

PWNED_MARKER = "cachedoctor-test-pwned"


class Payload:
    """Pickles to a call of os.system that would create the marker file if ever unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


def malicious_torch_zip(marker: Path) -> bytes:
    """A real torch zip whose data.pkl holds a tensor and an os.system payload."""
    good = pt_bytes({"latent": latent()})
    evil = pickle.dumps({"latent": None, "x": Payload(marker)}, protocol=2)
    return rezip(good, replace={"data.pkl": evil})


def findings_of(*targets: Path, deep: bool = False, workers: int = 1) -> list[tuple[str, str, str]]:
    from cachedoctor.scan import ScanOptions, scan

    result = scan([str(t) for t in targets], ScanOptions(deep=deep, workers=workers))
    assert result.errors == []
    return [(f.kind, f.path, f.fix.value) for f in result.findings]


def settle(folder: Path) -> None:
    """Wait until the file system's clock has moved past every file's mtime and ctime, so the
    next scan records them as settled, not racy (a test writes and scans in one tick)."""
    newest = max(max(p.stat().st_mtime_ns, p.stat().st_ctime_ns) for p in folder.rglob("*") if p.is_file())
    probe = folder.parent / f".{folder.name}-clock"
    deadline = time.monotonic() + 5
    while True:
        probe.write_bytes(b"")
        if probe.stat().st_mtime_ns > newest:
            return
        assert time.monotonic() < deadline
        time.sleep(0.005)
