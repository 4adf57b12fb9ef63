"""The S3 Inventory readers on real files (a manifest.json and its data files on disk, written
as S3 writes them: ``tests/inventory_files.py`` says where that is documented), and the
external sort that keeps a 10**8-key inventory in flat memory."""

from __future__ import annotations

import gzip
import json
import os
import random
from datetime import datetime, timezone
from pathlib import Path

import pytest
from inventory_files import CSV_SCHEMA, VERSIONED_SCHEMA, csv_gz, manifest, parquet, versioned_csv_gz

from cachedoctor.stores.inventory import read_manifest, rows
from cachedoctor.stores.inventory_csv import MAX_LINE
from cachedoctor.stores.inventory_model import InventoryError, Row
from cachedoctor.stores.inventory_sort import SortedRows

BUCKET = "cache-bucket"
WHEN = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
SECONDS = int(datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc).timestamp()) * 1_000_000_000
ETAG = "0123456789abcdef0123456789abcdef"
KEYS = ["cache/a b.pt", "cache/a+b.pt", "cache/ünï/x.pt", "cache/line\nbreak.pt", "cache/100%.pt"]


def objects(keys: list[str]) -> list[dict]:
    return [{"Key": k, "Size": i + 1, "LastModified": WHEN, "ETag": f'"{ETAG}"'} for i, k in enumerate(keys)]


def expected(keys: list[str]) -> list[Row]:
    return [Row(k, i + 1, ETAG, SECONDS) for i, k in enumerate(keys)]


def layout(tmp_path: Path, data: bytes, name: str, file_format: str, schema: str) -> Path:
    """manifest.json in ``<date>/`` and its data file in ``data/``, as S3 lays out an inventory."""
    (tmp_path / "2026-01-02T03-04Z").mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / name).write_bytes(data)
    path = tmp_path / "2026-01-02T03-04Z" / "manifest.json"
    path.write_bytes(manifest(BUCKET, "dest", [(f"inv/{BUCKET}/cfg/data/{name}", data)], file_format, schema))
    return path


def test_csv_keys_are_url_decoded_with_plus_as_space(tmp_path: Path) -> None:
    path = layout(tmp_path, csv_gz(BUCKET, objects(KEYS)), "part.csv.gz", "CSV", CSV_SCHEMA)
    assert list(rows(read_manifest(str(path)))) == expected(KEYS)


def test_parquet_rows_are_the_same(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    from inventory_files import PARQUET_SCHEMA

    path = layout(tmp_path, parquet(BUCKET, objects(KEYS)), "part.parquet", "Parquet", PARQUET_SCHEMA)
    assert list(rows(read_manifest(str(path)))) == expected(KEYS)


def test_a_versioned_inventory_keeps_only_current_objects(tmp_path: Path) -> None:
    date = "2026-01-02T03:04:05.000Z"
    data = versioned_csv_gz(
        BUCKET,
        [
            ("cache/kept.pt", "v2", "true", "false", "10", date, ETAG),
            ("cache/kept.pt", "v1", "false", "false", "9", date, ETAG),  # an older version
            ("cache/deleted.pt", "v3", "true", "true", "", date, ""),  # the delete marker now on top
            ("cache/deleted.pt", "v2", "false", "false", "8", date, ETAG),
        ],
    )
    path = layout(tmp_path, data, "part.csv.gz", "CSV", VERSIONED_SCHEMA)
    assert list(rows(read_manifest(str(path)))) == [Row("cache/kept.pt", 10, ETAG, SECONDS)]


def test_a_data_file_that_is_not_the_manifests_is_one_error_naming_it(tmp_path: Path) -> None:
    """Its MD5 is not the manifest's (a copy of another day's file, or bytes altered on the way)."""
    path = layout(tmp_path, csv_gz(BUCKET, objects(KEYS)), "part.csv.gz", "CSV", CSV_SCHEMA)
    text = json.loads(path.read_text())
    text["files"][0]["MD5checksum"] = "f" * 32
    path.write_text(json.dumps(text))
    with pytest.raises(InventoryError) as caught:
        list(rows(read_manifest(str(path))))
    assert caught.value.path == str(tmp_path / "data" / "part.csv.gz")
    assert caught.value.message == "its bytes are not the ones the manifest's size and MD5checksum describe"


def test_a_row_with_an_etag_s3_never_writes_is_refused(tmp_path: Path) -> None:
    bad = objects(KEYS[:2])
    bad[1]["ETag"] = '"abc\r\nX-Injected: 1"'
    path = layout(tmp_path, csv_gz(BUCKET, bad), "part.csv.gz", "CSV", CSV_SCHEMA)
    with pytest.raises(InventoryError) as caught:
        list(rows(read_manifest(str(path))))
    assert caught.value.message == "row 2: ETag is not one S3 writes; the inventory data file is damaged"


def test_an_inventory_without_etags_is_refused_naming_the_manifest(tmp_path: Path) -> None:
    path = layout(tmp_path, gzip.compress(b'"cache-bucket","k","1"\n'), "part.csv.gz", "CSV", "Bucket, Key, Size")
    with pytest.raises(InventoryError) as caught:
        list(rows(read_manifest(str(path))))
    assert caught.value.path == str(path)
    assert "no LastModifiedDate, ETag column" in caught.value.message


def test_an_endless_line_is_refused_before_it_fills_the_memory(tmp_path: Path) -> None:
    data = gzip.compress(b'"' + b"k" * (MAX_LINE * 4))
    path = layout(tmp_path, data, "part.csv.gz", "CSV", CSV_SCHEMA)
    with pytest.raises(InventoryError, match=f"a row longer than {MAX_LINE} characters"):
        list(rows(read_manifest(str(path))))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[]", "not an S3 Inventory manifest: expected a JSON object"),
        ('{"sourceBucket": "b"}', "not an S3 Inventory manifest: no destinationBucket"),
        (
            json.dumps(
                {
                    "sourceBucket": "b",
                    "destinationBucket": "arn:aws:s3:::d",
                    "creationTimestamp": "yesterday",
                    "fileFormat": "CSV",
                }
            ),
            "not an S3 Inventory manifest: creationTimestamp is not milliseconds since the epoch",
        ),
    ],
)
def test_a_malformed_manifest_says_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "manifest.json"
    path.write_text(text)
    with pytest.raises(InventoryError) as caught:
        read_manifest(str(path))
    assert (caught.value.path, caught.value.message) == (str(path), message)


def test_the_sort_holds_a_bounded_number_of_rows_and_spills_the_rest(tmp_path: Path) -> None:
    keys = [f"cache/{i:05d}/{i % 7}.pt" for i in range(10_000)]
    given = keys + keys[:50]  # 50 keys given twice come out once
    random.Random(30).shuffle(given)
    sorter = SortedRows(bound=100, folder=str(tmp_path))
    for key in given:
        sorter.add(Row(key, 1, ETAG, 0))
    assert sorter.peak == 100
    assert len(sorter.runs) == 100  # 10 050 rows, 100 at a time (the last run spilled when read)
    assert len(os.listdir(tmp_path)) == 1  # one temporary folder of runs
    out = [row.key for row in sorter.sorted()]
    assert out == sorted(keys)
    assert os.listdir(tmp_path) == []  # the runs are gone once read


def test_a_small_inventory_is_sorted_in_memory(tmp_path: Path) -> None:
    sorter = SortedRows(bound=100, folder=str(tmp_path))
    for key in ("b", "a/z", "a-b", "a/a"):
        sorter.add(Row(key, 1, ETAG, 0))
    assert [row.key for row in sorter.sorted()] == ["a-b", "a/a", "a/z", "b"]  # S3's byte order
    assert sorter.runs == [] and os.listdir(tmp_path) == []
