"""``repair`` where torch cannot be imported (a plain ``pip install cachedoctor``).

torch is made unimportable the way Python itself allows (``sys.modules["torch"] = None``), for
the call only: what would need it stops in one line before anything is changed, what does not
need it (the plan, a quarantine) runs. ``tests/e2e/test_install.py`` does the same in a real
environment built from the wheel.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from cli_run import cli
from factories import malicious_torch_zip, peers, save_pt

from cachedoctor.install_hint import install_command

# The install line for this installation (an editable one from the clone, when the suite runs):
# tests/unit/repair/test_install_hint.py pins each form.
NEEDS_TORCH = f"cachedoctor: error: repair needs torch; install it with: {install_command('repair')}\n"


def cli_without_torch(*argv: str) -> tuple[int, str, str]:
    """``cli(*argv)`` with ``import torch`` failing for its duration (the files are made before)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "torch", None)
        return cli(*argv)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _leaky_cache(folder: Path) -> Path:
    peers(folder, dtype=torch.float32)
    return save_pt(folder / "leak.pt", torch.randn(7, 4, 8, 8)[1])  # a batch-leak: clone-storage


def test_a_lossless_repair_stops_in_one_line_and_changes_nothing(tmp_path: Path) -> None:
    _leaky_cache(tmp_path)
    before = _files(tmp_path)
    assert cli_without_torch("repair", str(tmp_path), "--yes", "--no-state") == (2, "", NEEDS_TORCH)
    assert _files(tmp_path) == before


@pytest.mark.parametrize(
    "asks", [["--encoder", "cachedoctor.encoders.example_adapter:factory:8"], ["--gpus", "1"], ["--device", "cuda"]]
)
def test_asking_for_a_recompute_or_gpus_stops_before_the_scan(tmp_path: Path, asks: list[str]) -> None:
    peers(tmp_path)
    assert cli_without_torch("repair", str(tmp_path), "--dry-run", "--no-state", *asks) == (2, "", NEEDS_TORCH)


def test_the_dry_run_plans_without_torch(tmp_path: Path) -> None:
    leak = _leaky_cache(tmp_path)
    code, out, err = cli_without_torch("repair", str(tmp_path), "--dry-run", "--no-state")
    assert (code, err) == (1, "")
    assert "clone-storage" in out and leak.name in _files(tmp_path)


def test_a_quarantine_only_repair_runs_without_torch(tmp_path: Path, marker: Path) -> None:
    peers(tmp_path)
    (tmp_path / "evil.pt").write_bytes(malicious_torch_zip(marker))  # unsafe-pickle: quarantine
    code, out, err = cli_without_torch("repair", str(tmp_path), "--yes", "--no-state")
    assert (code, err) == (0, "")
    assert not (tmp_path / "evil.pt").exists()
    assert [p.name for p in (tmp_path / ".cachedoctor" / "quarantine").rglob("evil.pt")] == ["evil.pt"]


def test_a_lossless_repair_needs_none_of_the_encoders_extra(tmp_path: Path) -> None:
    """``[repair]`` is torch and safetensors only: a lossless fix runs with diffusers,
    transformers and OpenCV unimportable (the ``[encoders]`` extra not installed)."""
    leak = _leaky_cache(tmp_path)
    with pytest.MonkeyPatch.context() as patch:
        for library in ("diffusers", "transformers", "cv2"):
            patch.setitem(sys.modules, library, None)
        code, out, err = cli("repair", str(tmp_path), "--yes", "--no-state")
    assert (code, err) == (0, "")
    assert "clone-storage" in out and "done: 1 verified, 0 skipped, 0 blocked, 0 failed" in out
    assert leak.exists()
