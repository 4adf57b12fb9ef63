"""A bucket's listing from its S3 Inventory instead of LIST requests.

Listing 10**8 keys is 10**5 sequential LIST requests; S3 Inventory delivers the same listing
daily or weekly as a few data files, described by a ``manifest.json`` (the format:
https://docs.aws.amazon.com/AmazonS3/latest/userguide/storage-inventory-location.html). This
module reads the manifest and yields the inventory's objects, one :class:`Row` each, unsorted, in
bounded memory: ``inventory_csv.py`` streams gzipped CSV, ``inventory_parquet.py`` reads Parquet
by row groups (pyarrow, the ``[inventory]`` extra), ORC is refused. ``inventory_sort.py`` sorts
what a scan target needs (an inventory is in no order); ``scan/inventory_targets.py`` makes a
scan's listing of it.

The manifest is a local path or an ``s3://`` URL. Data files are the manifest's ``files[].key``
in its destination bucket; beside a local manifest (or in ``../data/``, the layout S3 writes),
a copied data file of the same name is read instead, so an inventory fetched once can serve
many scans. Everything here is untrusted input: a malformed manifest, a missing or altered
data file, a row whose size or ETag is not one S3 writes, is :class:`InventoryError` (one line
naming the file, exit 2).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any

from cachedoctor.stores.interface import Location, RemoteError, is_remote
from cachedoctor.stores.inventory_model import DataFile, InventoryError, Manifest, Row

if TYPE_CHECKING:
    from cachedoctor.stores.s3 import S3Settings

#: A manifest lists data files, not objects: even a bucket of 10**9 keys has a small one.
MANIFEST_LIMIT = 16 << 20
_MD5 = re.compile(r"[0-9a-fA-F]{32}")


def read_manifest(where: str, s3: S3Settings | None = None) -> Manifest:
    """The manifest at ``where`` (a path or an ``s3://`` URL), checked."""
    if is_remote(where):
        data = _remote_bytes(where, s3)
    else:
        try:
            with open(where, "rb") as f:
                data = f.read(MANIFEST_LIMIT + 1)
        except OSError as exc:
            raise InventoryError(where, f"cannot read the inventory manifest ({exc.strerror or exc})") from None
    if len(data) > MANIFEST_LIMIT:
        raise InventoryError(where, f"larger than {MANIFEST_LIMIT >> 20} MB: not an S3 Inventory manifest.json")
    try:
        raw = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise InventoryError(where, "not JSON: expected an S3 Inventory manifest.json") from None
    return _checked(where, raw)


def _checked(where: str, raw: Any) -> Manifest:
    def bad(what: str) -> InventoryError:
        return InventoryError(where, f"not an S3 Inventory manifest: {what}")

    if not isinstance(raw, dict):
        raise bad("expected a JSON object")
    text = {k: raw.get(k) for k in ("sourceBucket", "destinationBucket", "creationTimestamp", "fileFormat")}
    for key, value in text.items():
        if not isinstance(value, str) or not value:
            raise bad(f"no {key}")
    created = str(text["creationTimestamp"])
    if not created.isdigit() or len(created) > 15:
        raise bad("creationTimestamp is not milliseconds since the epoch")
    destination = str(text["destinationBucket"])
    destination = destination.split(":::", 1)[-1] if destination.startswith("arn:") else destination
    if "/" in destination or not destination:
        raise bad(f"destinationBucket {text['destinationBucket']!r} is not a bucket")
    file_format = str(text["fileFormat"])
    if file_format.upper() not in ("CSV", "PARQUET", "ORC"):
        raise bad(f"fileFormat {file_format!r} (expected CSV, Parquet or ORC)")
    schema = raw.get("fileSchema")
    if not isinstance(schema, str) or not schema:
        raise bad("no fileSchema")
    columns = tuple(c.strip() for c in schema.split(",")) if file_format.upper() == "CSV" else (schema,)
    files = raw.get("files")
    if not isinstance(files, list):
        raise bad("no files list")
    return Manifest(
        where,
        str(text["sourceBucket"]),
        destination,
        int(created),
        file_format.upper() if file_format.upper() != "PARQUET" else "Parquet",
        columns,
        tuple(_data_file(f, bad) for f in files),
    )


def _data_file(entry: Any, bad: Any) -> DataFile:
    if not isinstance(entry, dict) or not isinstance(entry.get("key"), str) or not entry["key"]:
        raise bad("a files entry has no key")
    size, md5 = entry.get("size"), entry.get("MD5checksum")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise bad(f"{entry['key']}: size is not a number of bytes")
    if md5 is not None and (not isinstance(md5, str) or not _MD5.fullmatch(md5)):
        raise bad(f"{entry['key']}: MD5checksum is not an MD5")
    return DataFile(entry["key"], size, md5.lower() if md5 else None)


def rows(manifest: Manifest, s3: S3Settings | None = None) -> Iterator[Row]:
    """Every current object the inventory lists, file by file, in no order."""
    if manifest.file_format == "ORC":
        raise InventoryError(
            manifest.where, "an ORC inventory cannot be read; configure the inventory as CSV or Parquet"
        )
    if manifest.file_format == "CSV":
        from cachedoctor.stores.inventory_csv import csv_rows as read
    else:
        from cachedoctor.stores.inventory_parquet import parquet_rows as read
    for file in manifest.files:
        name, stream = open_data(manifest, file, s3)
        with stream:
            yield from read(manifest, file, name, stream)


def open_data(manifest: Manifest, file: DataFile, s3: S3Settings | None) -> tuple[str, IO[bytes]]:
    """A data file's name (for errors) and its bytes, streamed: a copy beside a local manifest,
    else the object in the destination bucket. Its size must be the manifest's."""
    if not is_remote(manifest.where):
        base = os.path.basename(file.key)
        folder = os.path.dirname(os.path.abspath(manifest.where))
        for path in (os.path.join(folder, base), os.path.join(os.path.dirname(folder), "data", base)):
            if os.path.isfile(path):
                if os.path.getsize(path) != file.size:
                    raise InventoryError(path, f"{os.path.getsize(path)} bytes, the manifest says {file.size}")
                return path, open(path, "rb")  # the caller closes it
    from cachedoctor.stores.connect import store_for
    from cachedoctor.stores.inventory_stream import ObjectStream, buffered

    url = f"s3://{manifest.destination_bucket}/{file.key}"
    info = store_for(url, s3).head(url)
    if info is None:
        raise InventoryError(url, f"the inventory data file is missing (named by {manifest.where})")
    if info.size != file.size:
        raise InventoryError(url, f"{info.size} bytes, the manifest says {file.size}")
    return url, buffered(ObjectStream(store_for(url, s3), info))


def _remote_bytes(url: str, s3: S3Settings | None) -> bytes:
    from cachedoctor.stores.connect import store_for

    store = store_for(url, s3)
    if not Location.parse(url).key:
        raise InventoryError(url, "names a bucket, not a manifest.json")
    info = store.head(url)
    if info is None:
        raise InventoryError(url, "no such inventory manifest")
    if info.size > MANIFEST_LIMIT:
        raise InventoryError(url, f"larger than {MANIFEST_LIMIT >> 20} MB: not an S3 Inventory manifest.json")
    try:
        return store.read_whole(info, MANIFEST_LIMIT)
    except RemoteError:
        raise
    except Exception as exc:  # changed or failing since its HEAD
        raise InventoryError(url, f"cannot read the inventory manifest ({exc}); try again later") from None


__all__ = [
    "DataFile",
    "InventoryError",
    "Manifest",
    "Row",
    "open_data",
    "read_manifest",
    "rows",
]
