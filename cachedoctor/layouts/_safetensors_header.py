"""A safetensors file's ``__metadata__``, read at planning time without loading a reader.

Some trainers record how an entry was made in its own header: musubi-tuner the caption a text
embed encodes (``caption1``), ai-toolkit the settings its file name hashes. Comparing those
with the dataset is what makes their staleness exact, and the header is index data, not
tensor data (``layouts/interface.py``: planning never reads tensors). Bounded: a header larger
than :data:`MAX_HEADER` is not read here (the scan judges the file itself).
"""

from __future__ import annotations

import json
import struct

#: Headers of cache entries are a few hundred bytes; a longer one is not parsed while planning.
MAX_HEADER = 1 << 20


def metadata(path: str) -> dict[str, str] | None:
    """The file's ``__metadata__`` (``{}`` when it has none), or ``None`` when the header cannot
    be read as safetensors (missing, truncated, not JSON, too large): the scan reports why."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                return None
            (length,) = struct.unpack("<Q", head)
            if not 2 <= length <= MAX_HEADER:
                return None
            raw = handle.read(length)
    except OSError:
        return None
    if len(raw) < length:
        return None
    try:
        header = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    found = header.get("__metadata__", {}) if isinstance(header, dict) else None
    if not isinstance(found, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in found.items()):
        return None
    return found


__all__ = ["MAX_HEADER", "metadata"]
