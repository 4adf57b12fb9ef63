"""The S3 member of the object-store family, through fsspec and s3fs (the ``[s3]`` extra).

s3fs gives the session, the credential chain (environment, profile, instance role, or the
keys a trainer's config names) and its event loop; the requests themselves go to its
aiobotocore client directly, so that this module, not s3fs's error translation, decides what
a failure means: 404 -> :class:`ObjectGone`, 412 on ``If-Match`` -> :class:`ObjectChanged`,
403 or no credentials -> :class:`RemoteError` (one line, exit 2), throttling (503 SlowDown),
5xx, connection resets and short reads -> retried with capped, jittered exponential backoff,
then :class:`TransientError`. botocore's and s3fs's own retries are off: one policy, counted.

Every method is synchronous and thread-safe (each runs a coroutine on s3fs's loop thread), so
the scan's bounded thread pool keeps that many requests in flight.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

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
from cachedoctor.stores.s3_errors import etag_of, final_error, seconds_ns, transient_types
from cachedoctor.stores.s3_settings import S3Settings  # (defined apart: a local run needs it, not the store)

_T = TypeVar("_T")


class S3Store(Retrying, Store):
    """One S3 bucket (or MinIO/R2/Ceph with ``endpoint_url``)."""

    capabilities = Capabilities(server_versions=True, exact_keys=True, local_paths=False, content_etags=True)
    page_size = 1000  # objects per LIST request (S3's most)
    endpoint_hint = "check --s3-endpoint-url and the network"

    def __init__(self, bucket: str, settings: S3Settings, policy: RetryPolicy | None = None) -> None:
        try:
            import s3fs
            from aiobotocore.session import AioSession
        except ImportError:
            raise RemoteError(
                f"s3://{bucket}", "remote caches need the [s3] extra: pip install 'cachedoctor[s3]'"
            ) from None
        from cachedoctor.stores.s3_times import parse_timestamp

        self.bucket = bucket
        self.settings = settings
        self.policy = policy or RetryPolicy()
        client_kwargs: dict[str, Any] = {}
        if settings.region:
            client_kwargs["region_name"] = settings.region
        # the session s3fs would make (AioSession(profile=...)), its answers' timestamps parsed
        # without dateutil: s3_times.py
        session = AioSession(profile=settings.profile)
        session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=parse_timestamp)
        self.fs = s3fs.S3FileSystem(
            key=settings.key,
            secret=settings.secret,
            token=settings.token,
            session=session,
            endpoint_url=settings.endpoint_url,
            client_kwargs=client_kwargs,
            config_kwargs={
                # total_max_attempts counts the first request; botocore's max_attempts does
                # not (max_attempts=1 is one hidden retry, which the tests caught)
                "retries": {"total_max_attempts": 1, "mode": "standard"},
                "max_pool_connections": 64,
                "connect_timeout": 10,
                "read_timeout": self.policy.stall,
            },
            skip_instance_cache=True,
            use_listings_cache=False,
        )
        self._start_requests(transient_types())

    # -- plumbing (the requests themselves: retrying.Retrying) ----------------------------------

    def _loop(self) -> asyncio.AbstractEventLoop:
        loop: asyncio.AbstractEventLoop = self.fs.loop
        return loop

    def _coroutine(self, make: Callable[[Any], Awaitable[_T]]) -> Awaitable[_T]:
        return self._call(make)

    def _final(self, exc: BaseException, url: str) -> Exception | None:
        return final_error(exc, url, self.bucket)

    async def _call(self, make: Callable[[Any], Awaitable[_T]]) -> _T:
        await self.fs.set_session()
        client = await self.fs.get_s3(self.bucket)
        return await asyncio.wait_for(make(client), self.policy.deadline)

    # -- the interface -------------------------------------------------------------------------

    def list(self, prefix: Location) -> Iterator[ObjectInfo]:
        return self._listing(prefix, None)

    def list_folder(self, prefix: Location) -> Iterator[ObjectInfo]:
        return self._listing(prefix, "/")  # the server stops at the next "/": subfolders are not listed

    def _listing(self, prefix: Location, delimiter: str | None) -> Iterator[ObjectInfo]:
        key = prefix.key
        folder = f"{key}/" if key else ""
        token: str | None = None
        while True:

            async def page(client: Any, token: str | None = token) -> dict[str, Any]:
                kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": folder, "MaxKeys": self.page_size}
                if delimiter:
                    kwargs["Delimiter"] = delimiter
                if token:
                    kwargs["ContinuationToken"] = token
                result: dict[str, Any] = await client.list_objects_v2(**kwargs)
                return result

            result = self._list_page(page, prefix.url)
            for item in result.get("Contents", ()):
                name = item["Key"]
                if name.endswith("/"):
                    continue  # a "folder" marker some tools write
                yield ObjectInfo(
                    f"s3://{self.bucket}/{name}",
                    int(item["Size"]),
                    etag_of(item.get("ETag")),
                    seconds_ns(item["LastModified"]),
                )
            if not result.get("IsTruncated"):
                return
            token = result.get("NextContinuationToken")
            if not token:
                return

    def _list_page(self, page: Callable[[Any], Awaitable[dict[str, Any]]], url: str) -> dict[str, Any]:
        """One page of a listing. Without it nothing under the prefix can be judged, so what
        ends a request for an object (gone, still failing) ends the command here, in one line."""
        try:
            return self._run(page, url)
        except ObjectGone:  # a 404 to a bucket listing: not an S3 server, or not this endpoint
            raise RemoteError(
                url, "the endpoint answered 404 to a listing: it is not an S3 server, or --s3-endpoint-url is wrong"
            ) from None
        except (TransientError, ObjectChanged) as exc:
            raise RemoteError(
                url, f"the listing failed ({str(exc).removeprefix(url + ': ')}); try again later"
            ) from None

    def head(self, url: str) -> ObjectInfo | None:
        key = Location.parse(url).key

        async def head(client: Any) -> dict[str, Any]:
            result: dict[str, Any] = await client.head_object(Bucket=self.bucket, Key=key)
            return result

        try:
            result = self._run(head, url)
        except ObjectGone:
            return None
        return ObjectInfo(
            url, int(result["ContentLength"]), etag_of(result.get("ETag")), seconds_ns(result["LastModified"])
        )

    def read_range(self, info: ObjectInfo, start: int, end: int) -> bytes:
        end = min(end, info.size)
        if end <= start:
            return b""
        key = Location.parse(info.url).key
        want = end - start

        async def get(client: Any) -> bytes:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": key, "Range": f"bytes={start}-{end - 1}"}
            if info.etag:
                kwargs["IfMatch"] = f'"{info.etag}"'
            response = await client.get_object(**kwargs)
            chunks: list[bytes] = []
            total = 0
            async with response["Body"] as body:
                while total < want:  # read(n) gives what has arrived, up to n: loop to the end
                    chunk = await body.read(want - total)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    total += len(chunk)
            if total < want:
                raise ShortRead(f"{total} of {want} bytes")
            return b"".join(chunks)

        return self._run(get, info.url)

    def read_whole(self, info: ObjectInfo, limit: int) -> bytes:
        key = Location.parse(info.url).key

        async def get(client: Any) -> bytes:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
            if info.etag:
                kwargs["IfMatch"] = f'"{info.etag}"'
            response = await client.get_object(**kwargs)
            declared = int(response.get("ContentLength", -1))
            if declared > limit or (declared >= 0 and declared != info.size):
                async with response["Body"]:
                    pass
                raise ObjectChanged(info.url)
            chunks: list[bytes] = []
            total = 0
            async with response["Body"] as body:
                while True:
                    chunk = await body.read(1 << 20)
                    if not chunk:
                        break
                    total += len(chunk)
                    if total > limit:
                        raise ObjectChanged(info.url)
                    chunks.append(chunk)
            if total != info.size:
                raise ShortRead(f"{total} of {info.size} bytes")
            return b"".join(chunks)

        return self._run(get, info.url)

    def put(self, url: str, data: bytes) -> ObjectInfo:
        key = Location.parse(url).key

        async def put(client: Any) -> dict[str, Any]:
            result: dict[str, Any] = await client.put_object(Bucket=self.bucket, Key=key, Body=data)
            return result

        self._run(put, url)
        found = self.head(url)
        if found is None:
            raise TransientError(f"{url}: written, then not found")
        return found

    def put_if_absent(self, url: str, data: bytes) -> bool:
        key = Location.parse(url).key

        async def put(client: Any) -> dict[str, Any]:
            result: dict[str, Any] = await client.put_object(Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*")
            return result

        try:
            self._run(put, url)
        except ObjectChanged:  # 412: an object has that key
            return False
        except RemoteError as exc:
            if any(code in exc.message for code in ("ConditionalRequestConflict", "409")):
                return False
            raise
        return True

    def copy(self, source: ObjectInfo, target: str) -> ObjectInfo:
        source_key = Location.parse(source.url).key
        target_key = Location.parse(target).key

        async def copy(client: Any) -> dict[str, Any]:
            kwargs: dict[str, Any] = {
                "Bucket": self.bucket,
                "Key": target_key,
                "CopySource": {"Bucket": self.bucket, "Key": source_key},
            }
            if source.etag:
                kwargs["CopySourceIfMatch"] = f'"{source.etag}"'
            result: dict[str, Any] = await client.copy_object(**kwargs)
            return result

        self._run(copy, source.url)
        found = self.head(target)
        if found is None:
            raise TransientError(f"{target}: copied, then not found")
        return found

    def delete(self, url: str) -> None:
        key = Location.parse(url).key

        async def delete(client: Any) -> dict[str, Any]:
            result: dict[str, Any] = await client.delete_object(Bucket=self.bucket, Key=key)
            return result

        self._run(delete, url)

    # -- appended for repair: conditional writes (S3, MinIO and moto honour If-Match on PUT and
    # DELETE; a server that answers NotImplemented gets the unconditional request instead) -----

    def put_if_match(self, url: str, data: bytes, etag: str) -> ObjectInfo:
        key = Location.parse(url).key

        async def put(client: Any) -> dict[str, Any]:
            result: dict[str, Any] = await client.put_object(
                Bucket=self.bucket, Key=key, Body=data, IfMatch=f'"{etag}"'
            )
            return result

        answer = self._conditional(put, url)
        if answer is None:
            return self.put(url, data)
        # The PUT's answer names the new version: no HEAD (its LastModified is the server's clock
        # at about now; nothing compares it before the next LIST brings the exact one).
        return ObjectInfo(url, len(data), etag_of(answer.get("ETag")), time.time_ns())

    def delete_if_match(self, url: str, etag: str) -> None:
        key = Location.parse(url).key

        async def delete(client: Any) -> dict[str, Any]:
            result: dict[str, Any] = await client.delete_object(Bucket=self.bucket, Key=key, IfMatch=f'"{etag}"')
            return result

        if self._conditional(delete, url) is None:
            self.delete(url)

    def _conditional(self, make: Callable[[Any], Awaitable[dict[str, Any]]], url: str) -> dict[str, Any] | None:
        """Run a conditional request: its answer, or ``None`` when the server does not implement
        the condition."""
        try:
            return self._run(make, url)
        except RemoteError as exc:
            if "NotImplemented" in exc.message or "501" in exc.message:
                return None
            raise
