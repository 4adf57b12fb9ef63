"""``s3_times.parse_timestamp`` against botocore's own parser (dateutil), which it stands in for
in the S3 client: the same ``datetime`` (value and tzinfo) for S3's two forms, the same answer
or the same error for anything else; and the listing's and a HEAD's times, read through it,
equal to what a plain boto3 client reads from moto."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("s3fs")

from botocore.utils import parse_timestamp as botocore_parse

from cachedoctor.stores.interface import Location
from cachedoctor.stores.s3 import S3Settings, S3Store
from cachedoctor.stores.s3_errors import seconds_ns
from cachedoctor.stores.s3_times import parse_timestamp

S3_FORMS = [
    "2026-12-07T16:12:35.000Z",  # a listing's LastModified (S3, moto: milliseconds)
    "2026-12-07T16:12:35Z",
    "2026-12-07T16:12:35.5Z",
    "2026-12-07T16:12:35.123456Z",
    "2026-12-07T16:12:35.123456789Z",  # past microseconds: cut, not rounded
    "2024-02-29T23:59:59.999Z",
    "Mon, 07 Dec 2026 16:12:35 GMT",  # a GET's or HEAD's Last-Modified header
    "Thu, 29 Feb 2024 00:00:00 GMT",
    "Sun, 07 Dec 2026 16:12:35 GMT",  # a weekday that is not the date's: the date counts
]

OTHER_FORMS = [
    "2026-12-07T16:12:35+02:00",
    "2026-12-07 16:12:35",
    "Mon, 7 Dec 2026 16:12:35 GMT",
    "Monday, 07-Dec-26 16:12:35 GMT",
    "1765123955",
    "1765123955.25",
    1765123955,
]

OUT_OF_RANGE = [
    "2026-02-30T00:00:00.000Z",
    "2026-12-07T24:00:00Z",
    "Mon, 32 Dec 2026 16:12:35 GMT",
    "Mon, 07 Dez 2026 16:12:35 GMT",
]


@pytest.fixture(params=["UTC", "Etc/UTC", "GMT", "Europe/London", "America/New_York"])
def local_zone(request: pytest.FixtureRequest) -> Iterator[str]:
    """The machine's zone, which decides the zone dateutil gives a "Z" time (tzlocal or tzutc)."""
    saved = os.environ.get("TZ")
    os.environ["TZ"] = request.param
    time.tzset()
    try:
        yield request.param
    finally:
        if saved is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = saved
        time.tzset()


@pytest.mark.parametrize("value", S3_FORMS + OTHER_FORMS)
def test_the_same_datetime_as_botocores_parser(value: Any, local_zone: str) -> None:
    got, want = parse_timestamp(value), botocore_parse(value)
    assert got == want
    assert repr(got) == repr(want)  # the tzinfo too (tzlocal() or tzutc()), not only the instant


@pytest.mark.parametrize("value", OUT_OF_RANGE)
def test_an_impossible_date_fails_as_botocores_parser_fails(value: str) -> None:
    with pytest.raises(ValueError) as want:
        botocore_parse(value)
    with pytest.raises(ValueError) as got:
        parse_timestamp(value)
    assert str(got.value) == str(want.value)


def test_listed_and_head_times_are_the_ones_boto3_reads(s3_server: Any) -> None:
    client = s3_server.client()
    client.create_bucket(Bucket="s3-times")
    client.put_object(Bucket="s3-times", Key="cache/a.pt", Body=b"x" * 10)
    store = S3Store("s3-times", S3Settings(endpoint_url=s3_server.url))
    (listed,) = list(store.list(Location.parse("s3://s3-times/cache")))
    head = store.head("s3://s3-times/cache/a.pt")
    want_listed = client.list_objects_v2(Bucket="s3-times", Prefix="cache/")["Contents"][0]["LastModified"]
    want_head = client.head_object(Bucket="s3-times", Key="cache/a.pt")["LastModified"]
    assert listed.mtime_ns == seconds_ns(want_listed)
    assert head is not None and head.mtime_ns == seconds_ns(want_head) == listed.mtime_ns
