"""A real S3 protocol server for the tests: moto's server mode in its own process on
127.0.0.1, a random port, started once per test session by the ``s3_server`` fixture
(``conftest.py``) and killed at its end. Tests talk to it with real s3fs and boto3 clients.

Credentials are dummies set in the test environment: moto accepts any unless started with
``auth=True`` (its ``INITIAL_NO_AUTH_ACTION_COUNT``), which the refused-credentials tests use.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

ACCESS_KEY = "cachedoctor-test"
SECRET_KEY = "cachedoctor-test-secret"
REGION = "us-east-1"


@dataclass
class MotoServer:
    url: str
    process: subprocess.Popen[bytes]
    buckets: list[str] = field(default_factory=list)

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )

    def env(self) -> dict[str, str]:
        """What a cachedoctor subprocess needs to reach this server as any user would."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ENDPOINT_URL": self.url,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(auth: bool = False, timeout: float = 30.0) -> MotoServer:
    """Start ``python -m moto.server`` on a free loopback port and wait until it answers."""
    port = free_port()
    env = dict(os.environ)
    if auth:
        env["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{url}/moto-api/", timeout=1):
                break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"moto server did not start on {url}") from None
            time.sleep(0.1)
    return MotoServer(url, process)
