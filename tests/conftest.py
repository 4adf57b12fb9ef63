"""Shared fixtures; the file factories live in ``factories.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from factories import PWNED_MARKER


@pytest.fixture
def marker(tmp_path: Path) -> Iterator[Path]:
    """Where a malicious payload would leave its trace; asserted absent after the test."""
    path = tmp_path / PWNED_MARKER
    yield path
    assert not path.exists(), "a malicious payload ran"
