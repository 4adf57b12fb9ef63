"""What an S3 failure means, and how long to wait before trying again (``s3.py``'s policy).

A request that fails is either final (:func:`final_error` names the exception the caller gets:
the object is gone or changed, the credentials or the bucket are wrong) or transient (throttling,
5xx, resets, short reads: :func:`transient_types` and the retry codes), retried with capped,
jittered exponential backoff (:class:`RetryPolicy`) until the policy's attempts are spent.
"""

from __future__ import annotations

import asyncio
from typing import Any

from cachedoctor.stores.interface import ObjectChanged, ObjectGone, RemoteError
from cachedoctor.stores.retrying import ShortRead, message

#: Error codes S3 (and MinIO, R2, Ceph) send for "try again later".
_RETRY_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestTimeout",
        "InternalError",
        "ServiceUnavailable",
        "503",
        "500",
        "502",
        "504",
    }
)
_REFUSED_CODES = frozenset(
    {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken", "403"}
)
_MISSING_BUCKET = frozenset({"NoSuchBucket"})
_GONE_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
_CHANGED_CODES = frozenset({"PreconditionFailed", "412"})
_EXISTS_CODES = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict", "409"})


def _code(exc: BaseException) -> str | None:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        error = response.get("Error") or {}
        code = str(error.get("Code") or "")
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return code or (str(status) if status else None)
    return None


def transient_types() -> tuple[type[BaseException], ...]:
    import aiohttp
    from botocore import exceptions as bx

    return (
        ShortRead,
        ConnectionError,
        asyncio.TimeoutError,
        aiohttp.ClientConnectionError,
        aiohttp.ClientPayloadError,
        bx.ConnectionClosedError,
        bx.EndpointConnectionError,
        bx.ReadTimeoutError,
        bx.ConnectTimeoutError,
        bx.IncompleteReadError,
        bx.ResponseStreamingError,
        bx.HTTPClientError,
    )


def final_error(exc: BaseException, url: str, bucket: str) -> Exception | None:
    """The exception a failed request ends in, or ``None`` when it is worth retrying."""
    code = _code(exc)
    if code in _GONE_CODES:
        return ObjectGone(url)
    if code in _CHANGED_CODES:
        return ObjectChanged(url)
    if code in _MISSING_BUCKET:
        return RemoteError(url, f"no bucket {bucket!r} at this endpoint; check the URL and --s3-endpoint-url")
    if code in _REFUSED_CODES:
        return RemoteError(
            url,
            f"the server refused these credentials ({code}); check AWS_PROFILE / AWS_ACCESS_KEY_ID or the config's keys",
        )
    if code == "RequestTimeTooSkewed":
        return RemoteError(
            url, "the server says this machine's clock is off by more than 15 minutes; set the clock (NTP)"
        )
    if no_credentials(exc):
        return RemoteError(
            url,
            "no AWS credentials found; set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or the dataset config's keys",
        )
    if code not in _RETRY_CODES:
        return RemoteError(url, f"the server said {code or type(exc).__name__}: {message(exc)}")
    return None


def etag_of(value: object) -> str:
    return str(value or "").strip('"')


def seconds_ns(value: Any) -> int:
    """LastModified to whole seconds in ns: listings give milliseconds, HEAD an HTTP date to the
    second, and the change test must find them equal."""
    return int(value.timestamp()) * 1_000_000_000


def no_credentials(exc: BaseException) -> bool:
    return type(exc).__name__ in {"NoCredentialsError", "PartialCredentialsError", "ProfileNotFound"}
