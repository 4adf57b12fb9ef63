"""S3's two timestamp forms parsed without dateutil, for the S3 client's response parser.

botocore parses every timestamp of every answer with ``dateutil.parser.parse``: each key of a
listing (``LastModified``, ISO 8601 to the millisecond) and the ``Last-Modified`` header of each
GET and HEAD (an HTTP date), 0.15-0.3 ms each. That is more than the rest of a listed key's
cost, and a tenth of a quick read's. S3 (and MinIO, R2, Ceph, moto) send exactly two forms;
:func:`parse_timestamp` reads those with one regular expression each and gives the very
``datetime`` botocore's parser gives (its zone as dateutil chooses it, fractions cut, not
rounded, to microseconds, as dateutil cuts them). Anything else, or a form whose fields are out of range,
goes to botocore's own parser, which answers or raises as it always did.
"""

from __future__ import annotations

import functools
import re
import time
from datetime import datetime, tzinfo
from typing import Any

from botocore.utils import parse_timestamp as botocore_parse
from dateutil.tz import tzlocal, tzutc

_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?Z")
_HTTP = re.compile(r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), (\d\d) ([A-Z][a-z]{2}) (\d{4}) (\d\d):(\d\d):(\d\d) GMT")
_UTC = tzutc()  # what dateutil gives for "GMT", as botocore asks it to, and for "Z" mostly
_MONTHS = {
    name: i
    for i, name in enumerate(
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], start=1
    )
}


def parse_timestamp(value: Any) -> datetime:
    """``botocore.utils.parse_timestamp(value)``, fast for S3's two forms."""
    if isinstance(value, str):
        try:
            iso = _ISO.fullmatch(value)
            if iso is not None:
                year, month, day, hour, minute, second, fraction = iso.groups()
                micro = int(fraction.ljust(6, "0")[:6]) if fraction else 0
                naive = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), micro)
                return naive.replace(tzinfo=_zulu(naive))
            http = _HTTP.fullmatch(value)
            if http is not None and http.group(2) in _MONTHS:
                day, name, year, hour, minute, second = http.groups()
                return datetime(int(year), _MONTHS[name], int(day), int(hour), int(minute), int(second), tzinfo=_UTC)
        except ValueError:  # out of range (a 30 February, a 24th hour): botocore's parser says what it says
            pass
    result: datetime = botocore_parse(value)
    return result


def _zulu(naive: datetime) -> tzinfo:
    """The zone dateutil gives a time written with "Z": it reads "Z" as "UTC", so on a machine
    whose zone is called UTC it is the local zone (``tzlocal()``, the same instant), else UTC."""
    if "UTC" in time.tzname:
        local = _local(time.tzname, time.timezone, time.altzone)
        if naive.replace(tzinfo=local).tzname() == "UTC":
            return local
    return _UTC


@functools.lru_cache(maxsize=4)
def _local(*zone: object) -> tzinfo:
    """One ``tzlocal()`` per local zone (``zone``: what ``time.tzset`` sets; dateutil makes a
    new, equal one each time, at 10 us a piece)."""
    return tzlocal()


__all__ = ["parse_timestamp"]
