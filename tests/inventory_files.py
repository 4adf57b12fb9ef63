"""S3 Inventory files written as Amazon S3 writes them, for the tests of ``scan --inventory``.

The format is AWS's own documentation of S3 Inventory (Amazon S3 User Guide, "Amazon S3
Inventory" and "Locating your inventory list",
https://docs.aws.amazon.com/AmazonS3/latest/userguide/storage-inventory-location.html):

- ``manifest.json`` at ``<destination-prefix>/<source-bucket>/<config-ID>/<YYYY-MM-DDTHH-MMZ>/``
  with ``sourceBucket``, ``destinationBucket`` (an ARN), ``version`` ``"2016-11-30"``,
  ``creationTimestamp`` (milliseconds since the epoch, as a string), ``fileFormat`` (``CSV``,
  ``ORC``, ``Parquet``), ``fileSchema`` and ``files`` (``key``, ``size``, ``MD5checksum``);
- data files under ``<destination-prefix>/<source-bucket>/<config-ID>/data/``: CSV compressed
  with GZIP, no header, every field quoted, the key URL-encoded (a space as ``+``: cloud-custodian
  issue #1997); Parquet (Snappy) with the columns ``bucket, key, size, last_modified_date
  (TIMESTAMP_MILLIS), e_tag``; an inventory of all versions adds ``VersionId, IsLatest,
  IsDeleteMarker`` (``version_id, is_latest, is_delete_marker``).

The rows are what the bucket holds when :func:`publish` runs (a LIST by the test's own boto3
client, which goes around the proxy the scan is counted through).
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import uuid
from typing import Any
from urllib.parse import quote_plus

CSV_SCHEMA = "Bucket, Key, Size, LastModifiedDate, ETag, StorageClass"
VERSIONED_SCHEMA = "Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate, ETag"
PARQUET_SCHEMA = (
    "message s3.inventory { required binary bucket (UTF8); required binary key (UTF8); "
    "optional int64 size; optional int64 last_modified_date (TIMESTAMP_MILLIS); optional binary e_tag (UTF8); "
    "optional binary storage_class (UTF8); }"
)
CREATED_MS = 1767225600000  # 2026-01-01 00:00 UTC


def objects_now(client: Any, bucket: str, prefix: str = "") -> list[dict[str, Any]]:
    """The bucket's objects under ``prefix`` as a LIST gives them now."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [item for page in pages for item in page.get("Contents", [])]


def _date(item: dict[str, Any]) -> str:
    return item["LastModified"].strftime("%Y-%m-%dT%H:%M:%S.000Z")


def csv_gz(bucket: str, objects: list[dict[str, Any]]) -> bytes:
    text = io.StringIO()
    writer = csv.writer(text, quoting=csv.QUOTE_ALL, lineterminator="\n")
    for item in objects:
        etag = item["ETag"].strip('"')
        writer.writerow([bucket, quote_plus(item["Key"]), item["Size"], _date(item), etag, "STANDARD"])
    return gzip.compress(text.getvalue().encode())


def versioned_csv_gz(bucket: str, rows: list[tuple[str, str, str, str, str, str, str]]) -> bytes:
    """Rows of (key, version, is_latest, is_delete_marker, size, date, etag), as given."""
    text = io.StringIO()
    writer = csv.writer(text, quoting=csv.QUOTE_ALL, lineterminator="\n")
    for key, version, latest, marker, size, date, etag in rows:
        writer.writerow([bucket, quote_plus(key), version, latest, marker, size, date, etag])
    return gzip.compress(text.getvalue().encode())


def parquet(bucket: str, objects: list[dict[str, Any]]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "bucket": pa.array([bucket] * len(objects), pa.string()),
            "key": pa.array([o["Key"] for o in objects], pa.string()),
            "size": pa.array([o["Size"] for o in objects], pa.int64()),
            "last_modified_date": pa.array([o["LastModified"] for o in objects], pa.timestamp("ms", tz="UTC")),
            "e_tag": pa.array([o["ETag"].strip('"') for o in objects], pa.string()),
            "storage_class": pa.array(["STANDARD"] * len(objects), pa.string()),
        }
    )
    out = io.BytesIO()
    pq.write_table(table, out, compression="snappy")
    return out.getvalue()


def manifest(source: str, destination: str, files: list[tuple[str, bytes]], file_format: str, schema: str) -> bytes:
    """``manifest.json`` for data files (key in the destination bucket, bytes)."""
    return json.dumps(
        {
            "sourceBucket": source,
            "destinationBucket": f"arn:aws:s3:::{destination}",
            "version": "2016-11-30",
            "creationTimestamp": str(CREATED_MS),
            "fileFormat": file_format,
            "fileSchema": schema,
            "files": [
                {"key": key, "size": len(data), "MD5checksum": hashlib.md5(data).hexdigest()} for key, data in files
            ],
        },
        indent=2,
    ).encode()


def publish(client: Any, bucket: str, file_format: str = "CSV", prefix: str = "cache/", parts: int = 1) -> str:
    """An inventory of ``bucket``'s objects under ``prefix`` now, written into the bucket itself
    (its own destination) where S3 puts it; the manifest's URL. ``parts`` data files share the rows."""
    objects = objects_now(client, bucket, prefix)
    base = f"inventory/{bucket}/daily"
    files = []
    for part in range(parts):
        rows = objects[part::parts]
        if file_format == "CSV":
            files.append((f"{base}/data/{uuid.uuid4()}.csv.gz", csv_gz(bucket, rows)))
        else:
            files.append((f"{base}/data/{uuid.uuid4()}.parquet", parquet(bucket, rows)))
    for key, data in files:
        client.put_object(Bucket=bucket, Key=key, Body=data)
    schema = CSV_SCHEMA if file_format == "CSV" else PARQUET_SCHEMA
    key = f"{base}/2026-01-01T00-00Z/manifest.json"
    client.put_object(Bucket=bucket, Key=key, Body=manifest(bucket, bucket, files, file_format, schema))
    return f"s3://{bucket}/{key}"


__all__ = ["CREATED_MS", "csv_gz", "manifest", "objects_now", "parquet", "publish", "versioned_csv_gz"]
