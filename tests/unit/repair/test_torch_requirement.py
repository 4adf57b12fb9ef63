"""``cachedoctor.extras``: the torch check repair makes, and the floor it shares with pyproject.toml.

The installed torch is never touched: the check is run against a module name that is surely
missing, or against a small stand-in package (a module and its ``.dist-info``) planted on
``sys.path``, the same records a real install leaves.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from cachedoctor.errors import UsageError
from cachedoctor.extras import TORCH_FLOOR, MissingExtra, require_torch, torch_floor
from cachedoctor.install_hint import install_command
from cachedoctor.layouts.prepare import kohya, musubi

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[3]
STAND_IN = "cachedoctor_stand_in_torch"


def _plant(where: Path, version: str) -> None:
    """An importable ``STAND_IN`` whose installed distribution says ``version``."""
    (where / f"{STAND_IN}.py").write_text("")
    info = where / f"{STAND_IN}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {STAND_IN}\nVersion: {version}\n")


def test_the_floor_is_the_repair_extras_and_torch_left_the_core() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert f"torch>={torch_floor()}" in project["optional-dependencies"]["repair"]
    assert [r for r in project["dependencies"] if r.startswith("torch")] == []
    assert torch_floor() == ".".join(map(str, TORCH_FLOOR))


def test_a_missing_torch_names_the_extra_that_installs_it() -> None:
    with pytest.raises(MissingExtra) as info:
        require_torch("repair", module="cachedoctor_no_such_module")
    assert str(info.value) == (f"repair needs cachedoctor_no_such_module; install it with: {install_command('repair')}")
    assert isinstance(info.value, UsageError)  # the CLI prints it as one line, exit 2


def test_a_torch_below_the_floor_is_named_with_its_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _plant(tmp_path, "2.0.1")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(MissingExtra) as info:
        require_torch("repair", module=STAND_IN)
    assert str(info.value) == (
        f"repair needs {STAND_IN} {torch_floor()} or newer and this environment has 2.0.1; "
        f"install cachedoctor with it in an environment of its own: {install_command('repair', 'pipx')}"
    )


@pytest.mark.parametrize("version", [f"{torch_floor()}.0", "2.13.0+cpu", "3.0.0"])
def test_a_torch_at_or_above_the_floor_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    _plant(tmp_path, version)
    monkeypatch.syspath_prepend(str(tmp_path))
    require_torch("repair", module=STAND_IN)


def test_a_torch_without_metadata_is_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A source build on PYTHONPATH has no .dist-info: importable is enough."""
    (tmp_path / f"{STAND_IN}.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    require_torch("repair", module=STAND_IN)


@pytest.mark.parametrize(
    ("resize", "needed_by"),
    [
        (lambda: kohya.resize(np.zeros((8, 8, 3), np.uint8), (4, 4), "area"), "kohya's resize"),
        (lambda: musubi.bucket_array(Image.new("RGB", (8, 8)), (4, 4)), "musubi-tuner's resize"),
    ],
    ids=["kohya", "musubi"],
)
def test_a_recompute_without_opencv_names_the_encoders_extra(
    monkeypatch: pytest.MonkeyPatch, resize: Callable[[], object], needed_by: str
) -> None:
    """kohya's and musubi-tuner's INTER_AREA resize need cv2, which [repair] lacks: the item fails
    with the install line of [encoders], not with ``No module named 'cv2'``."""
    monkeypatch.setitem(sys.modules, "cv2", None)
    with pytest.raises(MissingExtra) as info:
        resize()
    assert str(info.value) == f"{needed_by} needs OpenCV (cv2); install it with: {install_command('encoders')}"


def test_the_repair_extra_is_torch_and_safetensors_and_encoders_adds_the_model_libraries() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert extras["repair"] == [f"torch>={torch_floor()}", "safetensors>=0.4"]
    assert [r.split(">=")[0] for r in extras["encoders"]] == [
        "cachedoctor[repair]",
        "opencv-python-headless",
        "diffusers",
        "transformers",
    ]
