"""Rows of a Parquet S3 Inventory data file, through pyarrow (the ``[inventory]`` extra).

S3 writes the columns ``bucket, key, size, last_modified_date (TIMESTAMP_MILLIS), e_tag`` and,
for an inventory of all versions, ``is_latest, is_delete_marker`` (the manifest's
``fileSchema``, ``message s3.inventory { ... }``); keys are not URL-encoded here, unlike CSV.
Only those columns are read, one row group at a time in batches of :data:`BATCH` rows, so
memory does not grow with the file. Without pyarrow a Parquet inventory is one line naming the
manifest and the extra to install.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any

from cachedoctor.stores.inventory_model import DataFile, InventoryError, Manifest, Row, checked_row

BATCH = 16384
_NEEDED = ("bucket", "key", "size", "last_modified_date", "e_tag")
_NS = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}


def parquet_rows(manifest: Manifest, file: DataFile, name: str, stream: IO[bytes]) -> Iterator[Row]:
    """The current objects of one Parquet data file (``name``: the file, for errors)."""
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
    except ImportError:
        raise InventoryError(
            manifest.where, "a Parquet inventory needs pyarrow: pip install 'cachedoctor[inventory]'"
        ) from None
    try:
        parquet = pq.ParquetFile(stream)
        names = set(parquet.schema_arrow.names)
        missing = [c for c in _NEEDED if c not in names]
        if missing:
            raise InventoryError(
                name, f"no {', '.join(missing)} column; add them to the inventory configuration's fields"
            )
        wanted = [*_NEEDED, *(c for c in ("is_latest", "is_delete_marker") if c in names)]
        line = 0
        for batch in parquet.iter_batches(batch_size=BATCH, columns=wanted):
            yield from _batch_rows(batch, manifest, name, line, pa, pc)
            line += batch.num_rows
    except InventoryError:
        raise
    except (pa.ArrowException, OSError, ValueError, TypeError) as exc:
        raise InventoryError(name, f"not a Parquet inventory file ({exc})") from None


def _batch_rows(batch: Any, manifest: Manifest, name: str, line: int, pa: Any, pc: Any) -> Iterator[Row]:
    column = {n: batch.column(i) for i, n in enumerate(batch.schema.names)}
    dates = column["last_modified_date"]
    if pa.types.is_timestamp(dates.type):
        factor = _NS[dates.type.unit]
        dates = pc.cast(dates, pa.int64())
    else:
        raise InventoryError(name, f"last_modified_date is {dates.type}, not a timestamp")
    buckets = column["bucket"].to_pylist()
    keys = column["key"].to_pylist()
    sizes = column["size"].to_pylist()
    etags = column["e_tag"].to_pylist()
    millis = dates.to_pylist()
    latest = column["is_latest"].to_pylist() if "is_latest" in column else None
    markers = column["is_delete_marker"].to_pylist() if "is_delete_marker" in column else None
    for i, key in enumerate(keys):
        if (markers is not None and markers[i]) or (latest is not None and latest[i] is False):
            continue  # a delete marker, or a version that is not the object now
        if buckets[i] != manifest.source_bucket:
            raise InventoryError(
                name, f"row {line + i + 1}: bucket {buckets[i]!r}, the manifest's is {manifest.source_bucket!r}"
            )
        size = sizes[i] if isinstance(sizes[i], int) and not isinstance(sizes[i], bool) else None
        stamp = millis[i]
        mtime = (stamp * factor // 1_000_000_000) * 1_000_000_000 if isinstance(stamp, int) else None
        etag = etags[i] if isinstance(etags[i], str) else None
        yield checked_row(key if isinstance(key, str) else "", size, etag, mtime, name, line + i + 1)


__all__ = ["BATCH", "parquet_rows"]
