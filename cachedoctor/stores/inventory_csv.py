"""Rows of a CSV S3 Inventory data file: gzip, no header, the columns the manifest's
``fileSchema`` names (``Bucket, Key, Size, LastModifiedDate, ETag``, ...), every field quoted.

Keys are URL-encoded with a space as ``+`` (form encoding: cloud-custodian's issue #1997 found
it the hard way), so they are decoded with ``unquote_plus``. The file is streamed: the
gzip stream is decompressed as it arrives, one line of at most :data:`MAX_LINE` characters at
a time (a file that is one endless line cannot fill the memory), and its compressed bytes are
hashed on the way, so a truncated or altered file is found against the manifest's
``MD5checksum`` once its last row is read.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import zlib
from collections.abc import Iterator
from typing import IO
from urllib.parse import unquote_plus

from cachedoctor.stores.inventory_model import (
    REQUIRED,
    DataFile,
    InventoryError,
    Manifest,
    Row,
    checked_row,
    seconds_of,
    size_of,
)

#: The longest line read: a key is at most 1024 bytes, 3 times that URL-encoded, plus the rest.
MAX_LINE = 64 << 10
CHUNK = 1 << 20  # characters decompressed and split at a time


class _Hashing(io.RawIOBase):
    """The bytes of ``raw``, counted and MD5-hashed as they are read."""

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__()
        self.raw = raw
        self.md5 = hashlib.md5(usedforsecurity=False)
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        data = self.raw.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        self.md5.update(data)
        self.count += n
        return n

    def drain(self) -> None:
        while self.readinto(bytearray(1 << 16)):
            pass


def csv_rows(manifest: Manifest, file: DataFile, name: str, stream: IO[bytes]) -> Iterator[Row]:
    """The current objects of one gzipped CSV data file (``name``: the file, for errors)."""
    columns = {column: i for i, column in enumerate(manifest.schema)}
    missing = [c for c in REQUIRED if c not in columns]
    if missing:
        raise InventoryError(
            manifest.where,
            f"the inventory has no {', '.join(missing)} column; add them to the inventory configuration's fields",
        )
    key, size, date, etag, bucket = (columns[c] for c in ("Key", "Size", "LastModifiedDate", "ETag", "Bucket"))
    latest, marker = columns.get("IsLatest"), columns.get("IsDeleteMarker")
    width = len(columns)
    hashing = _Hashing(stream)
    text = io.TextIOWrapper(gzip.GzipFile(fileobj=io.BufferedReader(hashing, 1 << 20)), "utf-8", newline="")
    line = 0
    try:
        for fields in csv.reader(_lines(text, name), strict=True):
            line += 1
            if len(fields) != width:
                raise InventoryError(name, f"row {line}: {len(fields)} fields, the manifest's fileSchema names {width}")
            if fields[bucket] != manifest.source_bucket:
                raise InventoryError(
                    name, f"row {line}: bucket {fields[bucket]!r}, the manifest's is {manifest.source_bucket!r}"
                )
            if (marker is not None and fields[marker].lower() == "true") or (
                latest is not None and fields[latest].lower() == "false"
            ):
                continue  # a delete marker, or a version that is not the object now
            encoded = fields[key]
            yield checked_row(
                unquote_plus(encoded, errors="strict") if "%" in encoded or "+" in encoded else encoded,
                size_of(fields[size]),
                fields[etag],
                seconds_of(fields[date]),
                name,
                line,
            )
        hashing.drain()
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, csv.Error) as exc:
        raise InventoryError(name, f"not a gzipped CSV inventory file ({exc})") from None
    if hashing.count != file.size or (file.md5 is not None and hashing.md5.hexdigest() != file.md5):
        raise InventoryError(name, "its bytes are not the ones the manifest's size and MD5checksum describe")


def _lines(text: io.TextIOWrapper, name: str) -> Iterator[str]:
    """The lines of ``text``, read a chunk at a time and split in C; a line still unfinished
    after :data:`MAX_LINE` characters is refused."""
    rest = ""
    while True:
        chunk = text.read(CHUNK)
        if not chunk:
            break
        lines = (rest + chunk).split("\n")
        rest = lines.pop()
        if len(rest) > MAX_LINE:
            raise InventoryError(name, f"a row longer than {MAX_LINE} characters: not an S3 Inventory file")
        yield from lines
    if rest:
        yield rest


__all__ = ["MAX_LINE", "csv_rows"]
