"""Helpers the built-in adapters share: the ``@dtype`` suffix, dependency checks, fingerprints.

Nothing here imports torch or the model libraries, so factories stay cheap.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable
from pathlib import Path

import xxhash

from cachedoctor.encoders.interface import EncoderError

#: Compute dtypes an ``ARG`` may ask for with an ``@dtype`` suffix.
DTYPES = ("float32", "float16", "bfloat16")

#: File suffixes that hold weights: fingerprinted by size and mtime, never read.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".ckpt", ".pt", ".pth")

NEVER_DOWNLOADS = "cachedoctor never downloads weights"


def split_dtype(arg: str) -> tuple[str, str]:
    """``/models/vae@bfloat16`` -> ``("/models/vae", "bfloat16")``; no suffix means float32.

    Only a known dtype name counts as a suffix, so a path that merely contains ``@`` (a
    Hub-cache snapshot, an e-mail-like folder name) is left whole.
    """
    head, sep, tail = arg.rpartition("@")
    if sep and tail in DTYPES and head:
        return head, tail
    return arg, "float32"


def check_dtype(dtype: str) -> str:
    """A dtype name the adapters accept; anything else is a programming error, not a user's."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    return dtype


def require_arg(adapter: str, arg: str | None, what: str) -> str:
    """The ``ARG`` of ``NAME:ARG``, or an error saying how to pass it."""
    if not arg:
        raise EncoderError(adapter, f"needs a model path: --encoder {adapter}:/path/to/{what} ({NEVER_DOWNLOADS})")
    return arg


def require_modules(*names: str) -> None:
    """Raise ImportError naming the first missing module, without importing any of them.

    Factories call this so a missing optional dependency fails when the spec is parsed, in the
    main process, instead of inside every worker.
    """
    for name in names:
        if importlib.util.find_spec(name) is None:
            raise ImportError(f"No module named {name!r}", name=name)


def config_digest(paths: Iterable[Path]) -> str:
    """xxh3_64 of small files' bytes (configs, tokenizer files), with their names."""
    h = xxhash.xxh3_64()
    for path in sorted(paths):
        h.update(path.name.encode() + b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def weights_digest(paths: Iterable[Path]) -> str:
    """xxh3_64 of weight files' names, sizes and mtimes: fast on multi-gigabyte files.

    A rewrite of the same size within the filesystem's timestamp granularity goes unseen;
    that is the price of not reading gigabytes on every resume.
    """
    h = xxhash.xxh3_64()
    for path in sorted(paths):
        st = os.stat(path)
        h.update(f"{path.name}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()


def weight_files(folder: Path) -> list[Path]:
    """Weight files (and shard indexes) directly in ``folder``."""
    return sorted(
        p for p in folder.iterdir() if p.is_file() and (p.suffix in WEIGHT_SUFFIXES or p.name.endswith(".index.json"))
    )


def fingerprint(adapter: str, model: Path, configs: Iterable[Path], weights: Iterable[Path], dtype: str) -> str:
    """The string :meth:`Encoder.fingerprint` returns for a local model, readable in a journal."""
    return "|".join(
        (adapter, str(model.resolve()), f"config={config_digest(configs)}", f"weights={weights_digest(weights)}", dtype)
    )
