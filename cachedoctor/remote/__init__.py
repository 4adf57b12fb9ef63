"""Remote caches (``s3://bucket/prefix``): the object-store family.

``interface.py`` says what a store does; ``s3.py`` is the S3 member, through fsspec and s3fs
(the ``[s3]`` extra); ``source.py`` lets the format readers read an object by ranges. Nothing
here is imported by a scan of local paths.
"""

from cachedoctor.remote.interface import (
    Location,
    ObjectChanged,
    ObjectGone,
    ObjectInfo,
    ObjectStore,
    RemoteError,
    TransientError,
    is_remote,
)

__all__ = [
    "Location",
    "ObjectChanged",
    "ObjectGone",
    "ObjectInfo",
    "ObjectStore",
    "RemoteError",
    "TransientError",
    "is_remote",
]
