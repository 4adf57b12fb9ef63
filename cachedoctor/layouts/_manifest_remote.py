"""A manifest's ``s3://`` rows: sources judged by the facts one LIST gives, caches found by the scan.

A remote source's content fingerprint is its ETag, never a hash of its bytes: hashing would
cost a GET of every image, and the ETag already changes on every write of the object (for a
single-part upload it is the MD5 of the bytes; for a multipart one, the MD5 of the parts' MD5s
and their count). So both ``manifest build`` and ``scan --manifest`` learn every source's
``(size, ETag, LastModified)`` from **one paginated LIST per source bucket**, at the longest
folder prefix the sources share there: the request count grows with the listing's pages (1,000
keys each), not with the number of images. A source the LIST does not show is gone.

The same bytes uploaded again as one part keep their ETag (not stale, rightly); uploaded with
another part size, they get another ETag and the entry is reported stale (a false alarm a
rebuild of the manifest clears). Each such row is exact as xxh3 is for a local source.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from cachedoctor.layouts.interface import LayoutError
from cachedoctor.stores.interface import Location, ObjectInfo, RemoteError, TransientError, is_remote

if TYPE_CHECKING:
    from cachedoctor.stores.s3 import S3Settings

#: bucket ("s3://name") -> how to reach it (``None``: the standard AWS chain decides).
SettingsFor = Callable[[str], "S3Settings | None"]


def list_sources(urls: Iterable[str], settings_for: SettingsFor) -> dict[str, ObjectInfo]:
    """URL -> its listed facts, for those of ``urls`` that exist: one LIST per bucket at the
    folder prefix its URLs share. A bucket that cannot be listed is one line, exit 2."""
    from cachedoctor.stores.connect import store_for

    by_bucket: dict[str, set[str]] = {}
    for url in urls:
        location = Location.parse(url)
        by_bucket.setdefault(f"{location.scheme}://{location.bucket}", set()).add(url)
    found: dict[str, ObjectInfo] = {}
    for bucket, wanted in sorted(by_bucket.items()):
        prefix = Location.parse(shared_folder(sorted(wanted)))
        try:
            for info in store_for(prefix.url, settings_for(bucket)).list(prefix):
                if info.url in wanted:
                    found[info.url] = info
        except TransientError as exc:
            raise LayoutError(prefix.url, f"listing the manifest's sources kept failing ({exc}); try again") from None
        except RemoteError as exc:
            raise RemoteError(exc.path, f"the manifest's sources: {exc.message}") from None
    return found


def shared_folder(urls: list[str]) -> str:
    """The longest folder (``s3://bucket/a/b``) that holds every URL (all in one bucket)."""
    folders = [posixpath.dirname(u).split("/") for u in urls]
    common = folders[0]
    for parts in folders[1:]:
        n = 0
        while n < min(len(common), len(parts)) and common[n] == parts[n]:
            n += 1
        common = common[:n]
    return "/".join(common)


def outermost(urls: Iterable[str]) -> list[str]:
    """The URLs that no other one contains (a cache folder listed once, not once per subfolder)."""
    out: list[str] = []
    for url in sorted(set(urls)):
        if not any(url == o or url.startswith(o.rstrip("/") + "/") for o in out):
            out.append(url)
    return out


def etag_stale(recorded: str, info: ObjectInfo) -> str | None:
    """Why a listed source no longer matches the ETag a manifest recorded for it, or ``None``."""
    recorded = recorded.strip('"')
    if info.etag == recorded:
        return None
    return (
        f"the source object was rewritten since the manifest was written (ETag {info.etag[:12]}..., "
        f"recorded {recorded[:12]}...)"
    )


__all__ = ["etag_stale", "is_remote", "list_sources", "outermost", "shared_folder"]
