"""A recomputed file in a container its trainer cannot read is never called verified.

The reported case: repair wrote torch.save bytes under a name whose trainer reads safetensors
(ai-toolkit's ``*.safetensors`` latents) and the read-back passed, because the bytes were a
healthy torch archive. The spec names the container the trainer reads; verify compares.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

from cachedoctor.layouts.interface import RecomputeSpec  # noqa: E402
from cachedoctor.repair.model import Action, ActionKind  # noqa: E402
from cachedoctor.repair.verify import problems_of  # noqa: E402


def _action(path: Path, container: str) -> Action:
    spec = RecomputeSpec(role="latent", source="img.png", writer="dict", container_format=container, key="latent")
    return Action(ActionKind.RECOMPUTE, str(path), str(path.parent), ("missing-entry",), spec=spec)


def test_torch_bytes_where_the_trainer_reads_safetensors_are_rejected(tmp_path: Path) -> None:
    temp = tmp_path / "a.safetensors.tmp"
    torch.save({"latent": torch.zeros(4, 8, 8)}, temp)
    problem = problems_of(_action(tmp_path / "a.safetensors", "safetensors"), str(temp))
    assert problem == "is a torch-zip file where the layout writes safetensors"


def test_the_container_the_trainer_reads_passes(tmp_path: Path) -> None:
    temp = tmp_path / "a.safetensors.tmp"
    safetensors_torch.save_file({"latent": torch.zeros(4, 8, 8)}, str(temp))
    assert problems_of(_action(tmp_path / "a.safetensors", "safetensors"), str(temp)) is None
