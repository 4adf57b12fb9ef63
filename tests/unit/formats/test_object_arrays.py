"""An object array is a pickle, not an array: ``unsafe-pickle`` is its only finding (issue 14:
an object-array ``latents`` member also got a bogus ``corrupt-archive``, and crashed repair's
planner, which took a bucket from its shape ``(1,)``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cli_run import cli, scan_json


def _plant(path: Path, fmt: str) -> None:
    obj = np.empty(1, dtype=object)
    obj[0] = {"latents": [1.0, 2.0]}  # builtins only: np.load(allow_pickle=True) would still unpickle it
    if fmt == "npz":
        np.savez(path, latents=obj, original_size=np.array([64, 64]))
    else:
        np.save(path, obj, allow_pickle=True)


@pytest.mark.parametrize("fmt", ["npz", "npy"])
def test_object_array_is_unsafe_pickle_only(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"pic.{fmt}"
    _plant(path, fmt)
    for deep in ((), ("--deep",)):
        findings = scan_json(str(tmp_path), *deep)["findings"]
        assert [(f["path"], f["kind"]) for f in findings] == [(str(path), "unsafe-pickle")], findings


def test_kohya_object_array_latents_is_quarantined_not_a_crash(tmp_path: Path) -> None:
    from PIL import Image

    Image.new("RGB", (64, 64), (10, 20, 30)).save(tmp_path / "pic.png")
    victim = tmp_path / "pic_0064x0064_sdxl.npz"
    _plant(victim, "npz")
    code, out, err = cli("repair", str(tmp_path), "--layout", "kohya", "--yes")
    assert err == "" and "Traceback" not in out, out
    assert not victim.exists(), out  # never left where a trainer would np.load it
    quarantined = list((tmp_path / ".cachedoctor" / "quarantine").rglob("pic_0064x0064_sdxl.npz"))
    assert len(quarantined) == 1, out
