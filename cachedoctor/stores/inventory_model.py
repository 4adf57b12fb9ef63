"""What an S3 Inventory is made of, as the readers share it: the manifest (:class:`Manifest`,
its data files), one object's :class:`Row`, the checks of a row's values, and the one error.

Its own module so that the format readers (``inventory_csv.py``, ``inventory_parquet.py``) and
``inventory.py``, which picks one of them, import it without importing each other.
"""

from __future__ import annotations

import calendar
import functools
import re
import time
from dataclasses import dataclass
from typing import NamedTuple

from cachedoctor.stores.interface import ObjectInfo, StoreError

#: The columns a listing needs, as CSV's ``fileSchema`` names them (Parquet: snake case).
REQUIRED = ("Bucket", "Key", "Size", "LastModifiedDate", "ETag")
#: An ETag as S3 writes it: an MD5 (or, encrypted, an opaque 32-hex digest), ``-N`` after a
#: multipart upload. Anything else cannot be S3's, and would go into an ``If-Match`` header.
ETAG = re.compile(r"[0-9a-fA-F]{32}(-[1-9][0-9]{0,4})?")
_MINUTE = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d)")
_TAIL = re.compile(r"(?:\.\d{1,9})?(?:Z|\+00:00)")
MAX_SIZE = 50 * 10**12  # S3's largest object is 50 TB
MAX_KEY = 1024  # bytes of UTF-8: S3's longest key


class InventoryError(StoreError):
    """An inventory that cannot be used (malformed, missing, an unreadable format): one line
    naming the manifest or data file, exit 2."""


class Row(NamedTuple):
    """One current object of the inventory (delete markers and older versions are left out).
    A tuple, compared by key first: 10**8 of them are made, sorted and merged."""

    key: str
    size: int
    etag: str
    mtime_ns: int  # whole seconds, as ``s3_errors.seconds_ns`` gives a LIST's or a HEAD's

    def info(self, bucket: str) -> ObjectInfo:
        return ObjectInfo(f"s3://{bucket}/{self.key}", self.size, self.etag, self.mtime_ns)


@dataclass(frozen=True, slots=True)
class DataFile:
    key: str  # in the destination bucket
    size: int
    md5: str | None


@dataclass(frozen=True, slots=True)
class Manifest:
    where: str  # as given (a path or an s3:// URL): every error names it
    source_bucket: str
    destination_bucket: str
    created_ms: int
    file_format: str  # CSV, Parquet or ORC (refused when read)
    schema: tuple[str, ...]  # CSV's column names; Parquet's and ORC's schema as one string
    files: tuple[DataFile, ...]

    @property
    def date(self) -> str:
        """When S3 began the inventory, as ``2026-01-02 03:04 UTC``."""
        return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.created_ms / 1000))


def checked_row(key: str, size: int | None, etag: str | None, mtime_ns: int | None, where: str, line: int) -> Row:
    """A row whose values are all S3 could have written, else :class:`InventoryError` naming
    the data file and the row."""

    def bad(what: str) -> InventoryError:
        return InventoryError(where, f"row {line}: {what}; the inventory data file is damaged")

    if not key or (len(key) > MAX_KEY // 4 and len(key.encode("utf-8", "surrogatepass")) > MAX_KEY):
        raise bad("no key, or a key longer than S3 allows")
    if size is None or not 0 <= size <= MAX_SIZE:
        raise bad("Size is not a number of bytes")
    if etag is None or not ETAG.fullmatch(etag):
        raise bad("ETag is not one S3 writes")
    if mtime_ns is None:
        raise bad("LastModifiedDate is not a date")
    return Row(key, size, etag.lower(), mtime_ns)


def size_of(text: str) -> int | None:
    """A Size column's text as a number (``None`` when it is not digits)."""
    return int(text) if text.isdigit() and len(text) <= 15 else None


def seconds_of(text: str) -> int | None:
    """``2026-01-02T03:04:05.000Z`` as whole seconds in ns (``None`` when it is no such date)."""
    seconds, tail = text[17:19], text[19:]
    if text[16:17] != ":" or not seconds.isdigit() or int(seconds) > 60:
        return None
    if tail != ".000Z" and not _TAIL.fullmatch(tail):
        return None
    start = _minute(text[:16])
    return None if start is None else (start + int(seconds)) * 1_000_000_000


@functools.lru_cache(maxsize=65536)
def _minute(text: str) -> int | None:
    """``2026-01-02T03:04`` as seconds since the epoch, or ``None`` (an inventory's 10**8 dates
    fall in far fewer minutes: each is worked out once)."""
    match = _MINUTE.fullmatch(text)
    if match is None:
        return None
    year, month, day, hours, minutes = (int(p) for p in match.groups())
    if not (1 <= month <= 12 and 1 <= day <= 31 and hours < 24 and minutes < 60):
        return None
    return calendar.timegm((year, month, day, hours, minutes, 0, 0, 0, 0))


__all__ = ["ETAG", "REQUIRED", "DataFile", "InventoryError", "Manifest", "Row", "checked_row", "seconds_of", "size_of"]
