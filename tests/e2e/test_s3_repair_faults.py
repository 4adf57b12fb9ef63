"""A remote ``repair``, ``recover --apply`` or ``quarantine restore|purge`` whose endpoint keeps
failing (every connection closed unanswered, or every request answered 503 SlowDown) ends in one
line naming the prefix and saying to try again later, exit 2, as ``scan`` does: no traceback,
nothing written to the bucket, no lock object left. Before, a repair's first request (the HEAD
that tells an object from a prefix, or the lock's PUT) ended in a ``TransientError`` traceback
and exit 1.

Through moto behind the fault-injecting proxy (``s3_proxy.py``); the bucket is listed on moto
itself, before and after. The repair runs as a real ``python -m cachedoctor`` process with the
store's own retry policy; the other commands, and the faults that start after the lock is taken,
run the CLI in process with a fast policy (``store_for`` keeps the store the CLI then uses).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("s3fs")

from cli_run import cli
from factories import latent, pt_bytes
from s3_proxy import S3Proxy
from s3_repair_helpers import Bucket

from cachedoctor.stores.connect import forget, store_for
from cachedoctor.stores.s3 import RetryPolicy, S3Settings

FAST = RetryPolicy(attempts=3, base=0.001, cap=0.002, stall=0.5, stall_attempts=2)
#: What the line gives as the cause, per fault: every connection closed, every request a 503
#: (SlowDown in its body; a HEAD's answer has none).
CAUSE = {
    "close": ("Connection was closed before we received a valid response",),
    "throttle": ("(SlowDown)", "(503) when calling the HeadObject operation"),
}
FOREVER = 10**6


@pytest.fixture
def bucket(s3_server: Any, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Bucket:
    """A prefix with something for a repair to do (a torn object) beside a healthy one."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))  # journal and scan state
    planted = Bucket(s3_server.client(), s3_bucket)
    planted.put("torn.pt", pt_bytes(latent(seed=3))[:-40])
    planted.put("ok.pt", pt_bytes(latent(seed=2)))
    return planted


@pytest.fixture
def proxy(s3_server: Any) -> Iterator[S3Proxy]:
    with S3Proxy(s3_server.url) as running:
        yield running
    forget()


def objects(bucket: Bucket) -> dict[str, str]:
    """Every object in the bucket with its ETag, listed on moto itself (not through the proxy)."""
    pages = bucket.client.get_paginator("list_objects_v2").paginate(Bucket=bucket.name)
    return {item["Key"]: item["ETag"] for page in pages for item in page.get("Contents", ())}


def journals() -> list[Path]:
    return list(Path(os.environ["XDG_CACHE_HOME"]).rglob("journal.sqlite*"))


def fast(proxy: S3Proxy, bucket: Bucket) -> None:
    """The store the in-process CLI will use, with a fast retry policy."""
    store_for(bucket.url(), S3Settings(endpoint_url=proxy.url), FAST)


def one_line(err: str, start: str, fault: str) -> None:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"cachedoctor: error: {start}"), err
    assert any(cause in err for cause in CAUSE[fault]) and err.endswith("; try again later\n"), err


@pytest.mark.parametrize("fault", ["close", "throttle"])
@pytest.mark.parametrize(
    ("argv", "start"),
    [
        # the HEAD that tells an object from a prefix: the scan's words for a HEAD
        (("--yes", ""), "{url}: cannot be read (still failing after 6 attempts: "),
        # a prefix ending in /: the lock's PUT is the first request
        (("--yes", "/"), "{url}/.cachedoctor/lock: the lock cannot be taken (still failing after 6 attempts: "),
        # a dry run takes no lock: its listing, as the scan's
        (("--dry-run", ""), "{url}: the listing failed (still failing after 6 attempts: "),
    ],
    ids=["yes", "yes-prefix-slash", "dry-run"],
)
def test_a_repair_whose_endpoint_keeps_failing_is_one_line_and_writes_nothing(
    proxy: S3Proxy, bucket: Bucket, fault: str, argv: tuple[str, str], start: str
) -> None:
    before = objects(bucket)
    proxy.fail(fault, times=FOREVER)
    option, tail = argv
    done = subprocess.run(
        [sys.executable, "-m", "cachedoctor", "repair", option, bucket.url() + tail, "--s3-endpoint-url", proxy.url],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    one_line(done.stderr, start.format(url=bucket.url()), fault)
    assert proxy.injected[fault] >= 6 and objects(bucket) == before  # no lock object, nothing written
    assert journals() == []


@pytest.mark.parametrize("fault", ["close", "throttle"])
def test_recover_apply_whose_endpoint_keeps_failing_is_one_line(proxy: S3Proxy, bucket: Bucket, fault: str) -> None:
    fast(proxy, bucket)
    before = objects(bucket)
    proxy.fail(fault, times=FOREVER)
    code, out, err = cli("recover", "--apply", "--yes", bucket.url(), "--s3-endpoint-url", proxy.url)
    assert (code, out) == (2, "")
    one_line(err, f"{bucket.url()}: the listing failed (still failing after 3 attempts: ", fault)
    assert objects(bucket) == before and journals() == []


def quarantined(proxy: S3Proxy, bucket: Bucket) -> None:
    """A repair run (no fault) that moved the torn object to the quarantine."""
    fast(proxy, bucket)
    code, out, err = cli("repair", "--yes", bucket.url(), "--s3-endpoint-url", proxy.url)
    assert (code, err) == (0, ""), out
    assert bucket.get(bucket.url("torn.pt")) is None


@pytest.mark.parametrize("fault", ["close", "throttle"])
@pytest.mark.parametrize("command", ["restore", "purge"])
def test_a_quarantine_restore_or_purge_whose_endpoint_keeps_failing_is_one_line(
    proxy: S3Proxy, bucket: Bucket, fault: str, command: str
) -> None:
    quarantined(proxy, bucket)
    before = objects(bucket)
    proxy.fail(fault, times=FOREVER)
    code, out, err = cli("quarantine", command, "latest", "--yes", bucket.url(), "--s3-endpoint-url", proxy.url)
    assert (code, out) == (2, "")
    one_line(err, f"{bucket.url()}: the listing failed (still failing after 3 attempts: ", fault)
    assert objects(bucket) == before


# -- the listing answers, and one kind of request keeps failing: each request made before
# anything is changed, one at a time (the lock taken for it is deleted again) --------------------


@pytest.mark.parametrize("fault", ["close", "throttle"])
@pytest.mark.parametrize(
    ("method", "key", "start"),
    [
        # the lock's GET, reading what the lock says once it is taken (an interrupted run?)
        ("GET", "cache/.cachedoctor/lock", "{url}/.cachedoctor/lock: cannot be read ("),
        # the HEAD of the bucket root's lock (a repair of an overlapping prefix?)
        ("HEAD", "{bucket}/.cachedoctor/lock", "{url}: the locks of overlapping prefixes cannot be read ("),
        # the scan's reads of the objects
        ("GET", "cache/torn.pt", "{url}/torn.pt: could not be read"),
    ],
    ids=["lock-get", "overlap-head", "object-get"],
)
def test_a_repair_whose_first_requests_keep_failing_changes_nothing(
    proxy: S3Proxy, bucket: Bucket, fault: str, method: str, key: str, start: str
) -> None:
    fast(proxy, bucket)
    before = objects(bucket)
    proxy.fail(fault, times=FOREVER, method=method, key=key.format(bucket=bucket.name))
    code, out, err = cli("repair", "--yes", bucket.url(), "--s3-endpoint-url", proxy.url)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith(f"cachedoctor: error: {start.format(url=bucket.url())}"), err
    assert proxy.injected[fault] >= 3 and objects(bucket) == before  # the lock taken and deleted again


@pytest.mark.parametrize("fault", ["close", "throttle"])
def test_a_restore_whose_heads_keep_failing_restores_nothing(proxy: S3Proxy, bucket: Bucket, fault: str) -> None:
    quarantined(proxy, bucket)
    before = objects(bucket)
    proxy.fail(fault, times=FOREVER, method="HEAD", key="cache/torn.pt")
    code, out, err = cli("quarantine", "restore", "latest", "--yes", bucket.url(), "--s3-endpoint-url", proxy.url)
    assert (code, out) == (2, "")
    one_line(err, f"{bucket.url()}: cannot be read ({bucket.url('torn.pt')}: still failing after 3 ", fault)
    assert objects(bucket) == before


@pytest.mark.parametrize("fault", ["close", "throttle"])
def test_a_quarantine_whose_records_cannot_be_read_is_one_line(proxy: S3Proxy, bucket: Bucket, fault: str) -> None:
    quarantined(proxy, bucket)
    before = objects(bucket)
    proxy.fail(fault, times=FOREVER, method="GET", key=".records.jsonl")
    code, out, err = cli("quarantine", "purge", "latest", "--yes", bucket.url(), "--s3-endpoint-url", proxy.url)
    assert (code, out) == (2, "")
    one_line(err, f"{bucket.url()}/.cachedoctor/quarantine/", fault)
    assert objects(bucket) == before


def test_a_lock_that_cannot_be_deleted_is_named_with_what_clears_it(proxy: S3Proxy, bucket: Bucket) -> None:
    """The lock is taken, then every request on it fails: it is left, and the line says so."""
    fast(proxy, bucket)
    proxy.fail("throttle", times=FOREVER, method="HEAD", key="cache/.cachedoctor/lock")
    code, out, err = cli("repair", "--yes", bucket.url(), "--s3-endpoint-url", proxy.url)
    assert (code, out) == (2, "")
    lock = bucket.url(".cachedoctor/lock")
    assert err.count("\n") == 1 and err.startswith(f"cachedoctor: error: {lock}: cannot be deleted ("), err
    assert err.endswith(
        f"; the lock is left; once the endpoint answers, `cachedoctor recover {bucket.url()} --apply` clears it\n"
    )
    assert bucket.keys(".cachedoctor/") == [".cachedoctor/lock"]


def test_a_lock_put_whose_answer_is_lost_is_the_repairs_own(proxy: S3Proxy, bucket: Bucket) -> None:
    """The lock's PUT went through and its answer was lost: the retry finds the lock there, and it
    is this repair's own (before, the repair stopped, held by itself)."""
    fast(proxy, bucket)
    proxy.fail("lost", times=1, method="PUT", key="cache/.cachedoctor/lock")
    code, out, err = cli("repair", "--yes", bucket.url(), "--s3-endpoint-url", proxy.url, columns=400)
    assert (code, err) == (0, ""), out
    assert proxy.injected["lost"] == 1
    assert "done: 1 verified, 0 skipped, 0 blocked, 0 failed" in out
    assert bucket.get(bucket.url("torn.pt")) is None and bucket.keys(".cachedoctor/lock") == []
