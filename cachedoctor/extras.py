"""What the ``[repair]`` and ``[encoders]`` extras add, and the checks that a command needing them makes.

A plain ``pip install cachedoctor`` leaves torch out on purpose: scan (quick and deep), the CI
gate, manifests, quarantine and ``recover``'s survey read files as bytes (numpy for the deep
NaN/Inf count), and installing a torch beside a trainer's own can replace it. Only writing a
tensor needs torch: a lossless rewrite (``torch.load(weights_only=True)``, then ``torch.save``)
needs torch and safetensors, the ``[repair]`` extra, and nothing more. A recompute runs an
encoder: the built-in adapters need diffusers or transformers, and kohya's and musubi-tuner's
resize OpenCV; the ``[encoders]`` extra adds those to ``[repair]``, so a lossless repair never
pulls (or imports) the model libraries. This module says which extra is missing, in one line,
before anything is changed.

The check never imports torch: :func:`importlib.util.find_spec` finds it and the installed
distribution's metadata gives its version, so a ``--dry-run`` or a quarantine-only repair stays
as light as a scan.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from typing import Any

from cachedoctor.errors import UsageError
from cachedoctor.install_hint import install_command

#: The extra that adds torch and safetensors: what a lossless repair needs.
REPAIR_EXTRA = "repair"
#: The extra that adds, to ``[repair]``, what a recompute runs: diffusers, transformers, OpenCV.
ENCODERS_EXTRA = "encoders"
# How to get either, as the user would type it for this installation (a clone, a git URL, a
# wheel, an index): cachedoctor.install_hint. When the trainer's torch is too old, the same with
# pipx, in an environment of its own, since upgrading it there would change the trainer's.
#: The oldest torch the repair code is run with; the ``[repair]`` extra's floor in pyproject.toml
#: (a test holds the two equal). Why this one: docs/repair.md#installing-what-repair-needs.
TORCH_FLOOR = (2, 6)


class MissingExtra(UsageError):
    """A command needs a package of the ``[repair]`` or ``[encoders]`` extra that is not installed, or is too old.
    The message names what needs it and the command that installs it; the CLI prints it as one
    line and exits 2."""


def torch_floor() -> str:
    """``"2.6"``: the floor as pip writes it."""
    return ".".join(map(str, TORCH_FLOOR))


def torch_problem(module: str = "torch") -> str | None:
    """Why ``module`` (torch) cannot serve a repair here, or ``None`` when it can.

    An importable torch without distribution metadata (a source build on ``PYTHONPATH``) is
    trusted; one whose version is below :data:`TORCH_FLOOR` is not.
    """
    if importlib.util.find_spec(module) is None:
        return "not installed"
    try:
        version = importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        return None
    release = _release(version)
    if release is not None and release < TORCH_FLOOR:
        return f"this environment has {version}"
    return None


def require_torch(needed_by: str, module: str = "torch") -> None:
    """Raise :class:`MissingExtra` unless a torch at or above the floor can be imported.

    ``needed_by`` says what needs it ("repair"); ``module`` exists for the tests, which name a
    module that is surely missing instead of uninstalling torch.
    """
    problem = torch_problem(module)
    if problem is None:
        return
    if problem == "not installed":
        raise MissingExtra(f"{needed_by} needs {module}; install it with: {install_command(REPAIR_EXTRA)}")
    raise MissingExtra(
        f"{needed_by} needs {module} {torch_floor()} or newer and {problem}; "
        f"install cachedoctor with it in an environment of its own: {install_command(REPAIR_EXTRA, 'pipx')}"
    )


def import_cv2(needed_by: str) -> Any:
    """OpenCV's ``cv2`` module, for ``needed_by`` (a trainer's resize that a recompute copies).

    A missing one raises :class:`MissingExtra` naming the ``[encoders]`` extra: the item that
    needed it fails with that line, instead of ``No module named 'cv2'``.
    """
    try:
        import cv2  # opencv-python-headless: the [encoders] extra
    except ImportError as e:
        raise MissingExtra(f"{needed_by} needs OpenCV (cv2); install it with: {install_command(ENCODERS_EXTRA)}") from e
    return cv2


def _release(version: str) -> tuple[int, int] | None:
    """``"2.13.0+cpu"`` -> ``(2, 13)``; ``None`` for a version string that is not ``N.N...``."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


__all__ = [
    "ENCODERS_EXTRA",
    "REPAIR_EXTRA",
    "TORCH_FLOOR",
    "MissingExtra",
    "import_cv2",
    "require_torch",
    "torch_floor",
    "torch_problem",
]
