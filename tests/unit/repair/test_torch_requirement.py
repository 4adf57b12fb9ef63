"""``cachedoctor.extras``: the torch check repair makes, and the floor it shares with pyproject.toml.

The installed torch is never touched: the check is run against a module name that is surely
missing, or against a small stand-in package (a module and its ``.dist-info``) planted on
``sys.path``, the same records a real install leaves.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cachedoctor.errors import UsageError
from cachedoctor.extras import TORCH_FLOOR, MissingExtra, require_torch, torch_floor

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
    assert str(info.value) == (
        'repair needs cachedoctor_no_such_module; install it with: pip install "cachedoctor[repair]"'
    )
    assert isinstance(info.value, UsageError)  # the CLI prints it as one line, exit 2


def test_a_torch_below_the_floor_is_named_with_its_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _plant(tmp_path, "2.0.1")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(MissingExtra) as info:
        require_torch("repair", module=STAND_IN)
    assert str(info.value) == (
        f"repair needs {STAND_IN} {torch_floor()} or newer and this environment has 2.0.1; "
        'install cachedoctor with it in an environment of its own: pipx install "cachedoctor[repair]"'
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
