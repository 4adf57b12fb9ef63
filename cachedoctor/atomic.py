"""Write a file so that readers see the old version or the new one, never a half (borg's SaveFile).

A temp file in the same folder (so the rename stays on one file system), flushed and fsynced,
then ``os.replace``; on any failure the temp file is removed and the target is untouched.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Iterator, TextIO


@contextlib.contextmanager
def atomic_text(path: str, *, prefix: str = ".cachedoctor-") -> Iterator[TextIO]:
    """Yield a text stream; on a clean exit it replaces ``path``. ``OSError`` passes through."""
    fd, tmp = tempfile.mkstemp(prefix=prefix, dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
