"""Shared fixtures; the file factories live in ``factories.py``, which re-exports the builders
of ``fixtures/builders/`` (shared with the fixture generators and the benchmarks)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

# The repository root on sys.path, once, here: ``fixtures.builders`` is imported from the checkout
# (pytest puts tests/ there itself, for ``factories`` and friends). Appended, so an installed
# cachedoctor keeps its place in front.
REPO = str(Path(__file__).resolve().parent.parent)
if REPO not in sys.path:
    sys.path.append(REPO)

import pytest  # noqa: E402
from factories import PWNED_MARKER  # noqa: E402


@pytest.fixture
def marker(tmp_path: Path) -> Iterator[Path]:
    """Where a malicious payload would leave its trace; asserted absent after the test."""
    path = tmp_path / PWNED_MARKER
    yield path
    assert not path.exists(), "a malicious payload ran"
