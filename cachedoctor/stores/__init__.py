"""Where caches live: local disks and object stores behind one interface (the store family).

``interface.py`` says what a store does and what it can promise (:class:`Capabilities`);
``local.py`` is the local-disk member, ``s3.py`` the S3 member (through fsspec and s3fs, the
``[s3]`` extra), ``gcs.py`` the Google Cloud Storage member (gcsfs, the ``[gcs]`` extra);
``connect.py`` opens the member a target names; ``source.py`` lets the format readers read an
object by ranges. ``tests/stores/conformance.py`` is the contract every member passes. No network client is imported unless a remote target is named.
"""

from cachedoctor.stores.interface import (
    Location,
    ObjectChanged,
    ObjectGone,
    ObjectInfo,
    RemoteError,
    Store,
    TransientError,
    is_remote,
)

__all__ = [
    "Location",
    "ObjectChanged",
    "ObjectGone",
    "ObjectInfo",
    "RemoteError",
    "Store",
    "TransientError",
    "is_remote",
]
