"""How an s3:// store is reached (endpoint, region, profile, keys): a plain value, apart from the store.

Every command builds one from its settings (``options.s3_settings``), local scans included, and
the layouts carry one; the store itself (``stores/s3.py``) brings asyncio, ssl and s3fs's
machinery, which only a run that opens a bucket needs. ``stores.s3.S3Settings`` is this class.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class S3Settings:
    """Where and as whom: every field ``None`` means the standard AWS chain decides
    (``AWS_ENDPOINT_URL``, ``AWS_PROFILE``, ``~/.aws/config``...)."""

    endpoint_url: str | None = None
    region: str | None = None
    profile: str | None = None
    key: str | None = None
    secret: str | None = None
    token: str | None = None


__all__ = ["S3Settings"]
