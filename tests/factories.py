"""Factories that write cache files the way trainers write them (real torch.save, np.savez,
safetensors), and a helper that scans and returns findings as comparable tuples."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import time
import pickle
import zipfile
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from cachedoctor.scan import ScanOptions, scan

PWNED_MARKER = "cachedoctor-test-pwned"


def save_pt(path: Path, obj: object, *, fileobj: bool = True) -> Path:
    """torch.save as SimpleTuner does (to an open file object: archive prefix ``archive/``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if fileobj:
        with open(path, "wb") as f:
            torch.save(obj, f)
    else:
        torch.save(obj, path)
    return path


def pt_bytes(obj: object) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def latent(c: int = 4, h: int = 8, w: int = 8, dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(c, h, w, generator=g).to(dtype)


def peers(folder: Path, n: int = 4, **kw: object) -> list[Path]:
    """``n`` healthy SimpleTuner-style bare latents in ``folder``."""
    return [save_pt(folder / f"peer{i}.pt", latent(seed=i, **kw)) for i in range(n)]  # type: ignore[arg-type]


@contextlib.contextmanager
def saved_on(location: str) -> Iterator[None]:
    """Make torch.save tag every storage with ``location`` (as a GPU save would), then undo."""
    from torch import serialization

    registry = list(serialization._package_registry)
    serialization.register_package(0, lambda obj: location, lambda obj, loc: None)
    try:
        yield
    finally:
        serialization._package_registry[:] = registry


def rezip(src: bytes, drop: str | None = None, replace: dict[str, bytes] | None = None) -> bytes:
    """Re-zip a torch archive member by member (STORED), dropping or replacing members."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(src)) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            if drop and info.filename.endswith(drop):
                continue
            data = (replace or {}).get(info.filename.split("/", 1)[1], zin.read(info.filename))
            zout.writestr(info.filename, data)
    return out.getvalue()


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
    result = scan([str(t) for t in targets], ScanOptions(deep=deep, workers=workers))
    assert result.errors == []
    return [(f.kind, f.path, f.fix.value) for f in result.findings]


def write_npz(path: Path, **arrays: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays)
    return path


def gzipped(data: bytes) -> bytes:
    """SimpleTuner --compress_disk_cache: the whole torch.save output, gzipped."""
    return gzip.compress(data, mtime=0)


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


def data_offset(path: Path) -> int:
    """Where the tensor bytes of a torch.save zip start (its ``data/0`` member)."""
    with zipfile.ZipFile(path) as z:
        info = next(i for i in z.infolist() if i.filename.endswith("/data/0"))
    raw = path.read_bytes()
    name_len, extra_len = int.from_bytes(raw[info.header_offset + 26:info.header_offset + 28], "little"), \
        int.from_bytes(raw[info.header_offset + 28:info.header_offset + 30], "little")
    return info.header_offset + 30 + name_len + extra_len


def flip_data_byte(path: Path) -> None:
    """Damage the tensor data in place (size unchanged): only a deep read's CRC sees it."""
    raw = bytearray(path.read_bytes())
    raw[data_offset(path) + 5] ^= 0xFF
    path.write_bytes(bytes(raw))
