"""Helpers for the remote repair tests: plant objects in a moto bucket, judge them with the
scan's own per-file pipeline (``scan.inspect_bytes``, what the remote scan runs on each object's
bytes), and read back what a repair left (objects, quarantine, records).

The findings are made here, not by ``cachedoctor scan s3://`` itself, so that the repair
library can be tested on its own; the e2e tests go through the CLI.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cachedoctor.findings import Finding
from cachedoctor.scan import inspect_bytes
from cachedoctor.stores.connect import store_for
from cachedoctor.stores.interface import Location, Store


@dataclass
class Bucket:
    """One test's bucket on the session's moto server, and a cache prefix in it."""

    client: Any  # boto3 (planting and reading back: not the code under test)
    name: str
    prefix: str = "cache"

    @property
    def location(self) -> Location:
        return Location.parse(self.url())

    @property
    def store(self) -> Store:
        return store_for(self.url())

    def url(self, rel: str = "") -> str:
        key = f"{self.prefix}/{rel}" if rel else self.prefix
        return f"s3://{self.name}/{key}"

    def put(self, rel: str, data: bytes) -> str:
        self.client.put_object(Bucket=self.name, Key=f"{self.prefix}/{rel}", Body=data)
        return self.url(rel)

    def get(self, url: str) -> bytes | None:
        key = Location.parse(url).key
        try:
            return bytes(self.client.get_object(Bucket=self.name, Key=key)["Body"].read())
        except self.client.exceptions.NoSuchKey:
            return None

    def keys(self, under: str = "") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.name, Prefix=f"{self.prefix}/{under}")
        return sorted(item["Key"][len(self.prefix) + 1 :] for page in pages for item in page.get("Contents", ()))

    def records(self, run_id: str) -> list[dict]:
        data = self.get(self.url(f".cachedoctor/quarantine/{run_id}/.records.jsonl"))
        return [json.loads(line) for line in (data or b"").decode().splitlines()]


def findings(bucket: Bucket, *rels: str) -> list[Finding]:
    """What the scan's per-object pipeline finds in each object (read whole, judged deep)."""
    out: list[Finding] = []
    for rel in rels:
        data = bucket.get(bucket.url(rel))
        assert data is not None, rel
        out.extend(inspect_bytes(bucket.url(rel), data).findings)
    return out


def kinds(bucket: Bucket, rel: str) -> list[str]:
    """The finding kinds of one object as it is now (``[]``: healthy)."""
    return sorted(f.kind for f in findings(bucket, rel))
