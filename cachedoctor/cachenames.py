"""Which file names claim to be a cache file (and which entries are no file at all), in a module
light enough for the walk to import.

``formats/`` decides by the bytes; the name only says how to judge bytes that no reader knows
(corruption under a cache name, a foreign file under any other). The walk needs the same answer
for entries it must not open at all, a dangling symlink or a FIFO named ``.pt``, and a rescan in
which nothing changed must load no reader, so the list lives here rather than in ``formats``.
"""

from __future__ import annotations

import os
import re
import stat

#: Names that claim to be a cache file: unrecognised bytes under these names are corruption,
#: under any other name a foreign file that a scan skips.
CACHE_SUFFIXES = frozenset({".pt", ".pth", ".npz", ".npy", ".safetensors", ".ckpt", ".bin", ".latent"})


#: Names whose loaders read one container only: the formats (``FileMeta.format``) they accept,
#: and what they say of any other. ``.pt``/``.pth`` are read by torch.load (zip, legacy, tar; a
#: gzip too, by SimpleTuner's compressed-cache reader); ``.bin`` is left out (diffusers' torch
#: pickles, diffusion-pipe's shards of several archives).
_TORCH_LOADS = frozenset({"torch-zip", "torch-gzip", "torch-legacy", "torch-tar", "pickle"})
NAME_FORMATS: dict[str, tuple[frozenset[str], str]] = {
    ".safetensors": (frozenset({"safetensors"}), "safetensors' load_file fails on it (header too large or invalid)"),
    ".npz": (frozenset({"npz"}), "np.load does not give the npz of arrays its loader indexes"),
    ".npy": (frozenset({"npy"}), "np.load does not give the array its loader expects"),
    ".pt": (_TORCH_LOADS, "torch.load fails on it"),
    ".pth": (_TORCH_LOADS, "torch.load fails on it"),
}


def wrong_container(path: str, fmt: str) -> str | None:
    """Why a file whose bytes are ``fmt`` cannot be loaded under its name (``None``: it can):
    a torch zip named ``.safetensors`` is no safetensors file to the trainer that reads it."""
    suffix = os.path.splitext(path)[1].lower()
    rule = NAME_FORMATS.get(suffix)
    if rule is None or fmt in rule[0]:
        return None
    return f"named {suffix} but holds a {fmt} file: {rule[1]}"


#: diffusion-pipe's ``shard_<N>.bin``, located item by item through the ``metadata.db`` beside it
SHARD_NAME = re.compile(r"^shard_(\d+)\.bin$")
SHARD_INDEX = "metadata.db"


def shard_index(path: str) -> str | None:
    """The index (``metadata.db``) of the diffusion-pipe shard at ``path``, or ``None`` when
    ``path`` is no shard (its name, or no index beside it)."""
    if SHARD_NAME.match(os.path.basename(path)) is None:
        return None
    index = os.path.join(os.path.dirname(path), SHARD_INDEX)
    return index if os.path.isfile(index) else None


def claims_cache(path: str) -> bool:
    """Whether ``path``'s name says it is a cache file (by its suffix, case-insensitive)."""
    return os.path.splitext(path)[1].lower() in CACHE_SUFFIXES


_SPECIAL = (
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
    (stat.S_ISDIR, "folder"),
)


def special_type(mode: int) -> str | None:
    """``None`` for a regular file's ``st_mode``, else what it is (``FIFO``, ``socket``, ...):
    something the scan never opens, because reading it could block or have side effects."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _SPECIAL if test(mode)), "special file")


__all__ = ["CACHE_SUFFIXES", "NAME_FORMATS", "claims_cache", "shard_index", "special_type", "wrong_container"]
