"""The Google Cloud Storage member of the object-store family, through fsspec and gcsfs (the
``[gcs]`` extra).

gcsfs gives the credentials (Google's default chain, or anonymous for an emulator), the aiohttp
session and its event loop; the JSON API requests themselves are sent here, so that this module,
not gcsfs's error translation and its own retries, decides what a failure means (the same policy
as ``s3.py``, through ``gcs_errors.py``).

Versions are generation numbers (``ObjectInfo.etag``), and the conditions are GCS's generation
preconditions: ``ifGenerationMatch`` on a read, an upload (``0``: only if absent) and a delete,
``sourceGeneration`` with ``ifSourceGenerationMatch`` on a copy. A read also compares the
``x-goog-generation`` of the answer with the one listed, so a server that ignores the
precondition on a GET (the fake-gcs-server emulator does) still never mixes two versions.

The endpoint is Google's, or ``STORAGE_EMULATOR_HOST`` (as Google's own clients read it), or the
one given; a store pointed at an emulator connects anonymously and never asks the metadata server.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar
from urllib.parse import quote

from cachedoctor.stores.gcs_errors import (
    GCSStatus,
    final_error,
    missing_bucket,
    multipart,
    rfc3339_ns,
    transient_types,
)
from cachedoctor.stores.interface import (
    Capabilities,
    Location,
    ObjectChanged,
    ObjectGone,
    ObjectInfo,
    RemoteError,
    Store,
    TransientError,
)
from cachedoctor.stores.retrying import Retrying, RetryPolicy, ShortRead

_T = TypeVar("_T")


class _TooLong(Exception):
    """A body longer than the caller's limit (the object is not the one listed)."""


#: One answer: status, headers, body.
Answer = tuple[int, Any, bytes]


class GCSStore(Retrying, Store):
    """One GCS bucket (or an emulator's, with ``endpoint`` or ``STORAGE_EMULATOR_HOST``)."""

    capabilities = Capabilities(server_versions=True, exact_keys=True, local_paths=False)
    page_size = 1000  # objects per listing request (the JSON API's most)
    endpoint_hint = "check STORAGE_EMULATOR_HOST and the network"

    def __init__(
        self, bucket: str, policy: RetryPolicy | None = None, endpoint: str | None = None, token: str | None = None
    ) -> None:
        try:
            import aiohttp
            import gcsfs
        except ImportError:
            raise RemoteError(
                f"gs://{bucket}", "gs:// caches need the [gcs] extra: pip install 'cachedoctor[gcs]'"
            ) from None
        self.bucket = bucket
        self.policy = policy or RetryPolicy()
        endpoint = endpoint or os.environ.get("STORAGE_EMULATOR_HOST") or None
        if endpoint and "://" not in endpoint:
            endpoint = f"http://{endpoint}"
        self.fs = gcsfs.GCSFileSystem(
            endpoint_url=endpoint,
            token=token or ("anon" if endpoint else None),
            skip_instance_cache=True,
            use_listings_cache=False,
        )
        self.root = self.fs._location.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=self.policy.stall)
        self._start_requests(transient_types())

    # -- plumbing ------------------------------------------------------------------------------

    def _object(self, key: str, tail: str = "") -> str:
        return f"{self.root}/storage/v1/b/{quote(self.bucket, safe='')}/o/{quote(key, safe='')}{tail}"

    async def _send(
        self, method: str, url: str, headers: dict[str, str] | None = None, data: bytes | None = None, limit: int = -1
    ) -> Answer:
        """One HTTP request; a status of 400 or more is :class:`GCSStatus`, a body longer than
        ``limit`` (when given) :class:`_TooLong`, found before more than ``limit`` bytes are held."""
        import yarl

        session = await self.fs._set_session()
        sent = dict(headers or {})
        self.fs.credentials.apply(sent)
        async with session.request(
            method, yarl.URL(url, encoded=True), headers=sent, data=data, timeout=self._timeout
        ) as response:
            if response.status >= 400:
                raise GCSStatus(response.status, await response.read(), response.reason or "")
            if limit < 0:
                return response.status, response.headers, await response.read()
            if (response.content_length or 0) > limit:
                raise _TooLong
            chunks: list[bytes] = []
            total = 0
            async for chunk in response.content.iter_chunked(1 << 20):
                total += len(chunk)
                if total > limit:
                    raise _TooLong
                chunks.append(chunk)
            return response.status, response.headers, b"".join(chunks)

    async def _json(
        self, method: str, url: str, headers: dict[str, str] | None = None, data: bytes | None = None
    ) -> dict[str, Any]:
        body = (await self._send(method, url, headers, data))[2]
        result: dict[str, Any] = json.loads(body) if body.strip() else {}
        return result

    def _loop(self) -> asyncio.AbstractEventLoop:
        loop: asyncio.AbstractEventLoop = self.fs.loop
        return loop

    def _coroutine(self, make: Callable[[], Awaitable[_T]]) -> Awaitable[_T]:
        return asyncio.wait_for(make(), self.policy.deadline)

    def _final(self, exc: BaseException, url: str) -> Exception | None:
        return final_error(exc, url, self.bucket)

    def _info(self, item: dict[str, Any]) -> ObjectInfo:
        return ObjectInfo(
            f"gs://{self.bucket}/{item['name']}",
            int(item.get("size", 0)),
            str(item.get("generation", "")),
            rfc3339_ns(str(item["updated"])),
        )

    # -- the interface -------------------------------------------------------------------------

    def list(self, prefix: Location) -> Iterator[ObjectInfo]:
        folder = f"{prefix.key}/" if prefix.key else ""
        base = f"{self.root}/storage/v1/b/{quote(self.bucket, safe='')}/o?prefix={quote(folder, safe='')}"
        base += f"&maxResults={self.page_size}&fields=items(name,size,generation,updated),nextPageToken"
        token: str | None = None
        while True:
            url = base + (f"&pageToken={quote(token, safe='')}" if token else "")
            try:
                page = self._run(functools.partial(self._json, "GET", url), prefix.url)
            except ObjectGone:  # a 404 to a listing: the bucket is not there
                raise missing_bucket(prefix.url, self.bucket) from None
            except (TransientError, ObjectChanged) as exc:
                raise RemoteError(
                    prefix.url, f"the listing failed ({str(exc).removeprefix(prefix.url + ': ')}); try again later"
                ) from None
            for item in page.get("items", ()):
                if not item["name"].endswith("/"):  # a "folder" marker some tools write
                    yield self._info(item)
            token = page.get("nextPageToken")
            if not token:
                return

    def head(self, url: str) -> ObjectInfo | None:
        try:
            return self._info(self._run(lambda: self._json("GET", self._object(Location.parse(url).key)), url))
        except ObjectGone:
            return None

    def _get(self, info: ObjectInfo, start: int, end: int | None, limit: int) -> bytes:
        """Bytes ``[start, end)`` (``end`` ``None``: all, at most ``limit``) of the generation
        ``info`` names, else :class:`ObjectChanged`."""
        url = self._object(Location.parse(info.url).key, "?alt=media")
        if info.etag:
            url += f"&ifGenerationMatch={info.etag}"
        headers = {"Range": f"bytes={start}-{end - 1}"} if end is not None else {}

        async def get() -> bytes:
            try:
                status, got, body = await self._send("GET", url, headers, limit=limit)
            except _TooLong:
                raise ObjectChanged(info.url) from None
            generation = got.get("x-goog-generation")
            if info.etag and generation is not None and generation != info.etag:
                raise ObjectChanged(info.url)  # a server that ignored the precondition
            if end is None:
                if len(body) != info.size:
                    raise ShortRead(f"{len(body)} of {info.size} bytes")
                return body
            data = body[start:end] if status == 200 else body  # 200: the server sent it all
            if len(data) != end - start:
                raise ShortRead(f"{len(data)} of {end - start} bytes")
            return data

        return self._run(get, info.url)

    def read_range(self, info: ObjectInfo, start: int, end: int) -> bytes:
        end = min(end, info.size)
        if end <= start:
            return b""
        return self._get(info, start, end, info.size)

    def read_whole(self, info: ObjectInfo, limit: int) -> bytes:
        if info.size > limit:
            raise ObjectChanged(info.url)
        return self._get(info, 0, None, limit)

    def _upload(self, url: str, data: bytes, generation: str | None) -> dict[str, Any]:
        """One multipart upload (its metadata and bytes in one request); ``generation``: the
        ``ifGenerationMatch`` precondition (``"0"``: only if no object has the key)."""
        target = f"{self.root}/upload/storage/v1/b/{quote(self.bucket, safe='')}/o?uploadType=multipart"
        if generation is not None:
            target += f"&ifGenerationMatch={generation}"
        body, headers = multipart(Location.parse(url).key, data)
        try:
            return self._run(lambda: self._json("POST", target, headers, body), url)
        except ObjectGone:  # a 404 to an upload that needs no object there: the bucket is not there
            if generation not in (None, "0"):
                raise
            raise missing_bucket(url, self.bucket) from None

    def put(self, url: str, data: bytes) -> ObjectInfo:
        return self._info(self._upload(url, data, None))

    def put_if_absent(self, url: str, data: bytes) -> bool:
        try:
            self._upload(url, data, "0")
        except ObjectChanged:  # 412: an object has that key
            return False
        return True

    def copy(self, source: ObjectInfo, target: str) -> ObjectInfo:
        tail = f"/rewriteTo/b/{quote(self.bucket, safe='')}/o/{quote(Location.parse(target).key, safe='')}"
        base = self._object(Location.parse(source.url).key, tail)
        if source.etag:  # exactly that generation, and only while it is the live one
            base += f"?sourceGeneration={source.etag}&ifSourceGenerationMatch={source.etag}"
        token = ""
        while True:  # a large object is rewritten in several calls, each naming the last
            url = base + (("&" if "?" in base else "?") + f"rewriteToken={quote(token, safe='')}" if token else "")
            try:
                answer = self._run(
                    functools.partial(self._json, "POST", url, {"Content-Type": "application/json"}), source.url
                )
            except ObjectGone:  # that generation is gone: rewritten since, or deleted
                if self.head(source.url) is not None:
                    raise ObjectChanged(source.url) from None
                raise
            if answer.get("done", True) and "resource" in answer:
                return self._info(answer["resource"])
            token = str(answer.get("rewriteToken") or "")
            if not token:
                raise TransientError(f"{target}: the copy neither finished nor gave a token to go on")

    def delete(self, url: str) -> None:
        try:
            self._run(lambda: self._send("DELETE", self._object(Location.parse(url).key)), url)
        except ObjectGone:
            pass  # already gone: what a delete wants (S3 and the local store say nothing either)

    # -- conditional writes (repair) -------------------------------------------------------------

    def put_if_match(self, url: str, data: bytes, etag: str) -> ObjectInfo:
        try:
            return self._info(self._upload(url, data, etag))
        except ObjectChanged:  # 412 is also GCS's answer when no object has the key
            if self.head(url) is None:
                raise ObjectGone(url) from None
            raise

    def delete_if_match(self, url: str, etag: str) -> None:
        target = self._object(Location.parse(url).key, f"?ifGenerationMatch={etag}")
        self._run(lambda: self._send("DELETE", target), url)

    def close(self) -> None:
        self.cancel_all()
