#!/usr/bin/env python3
"""The loops a user would write over a cache, as the matrix benchmark's baselines (bench/README.md).

``python bench/matrix_loops.py KIND FOLDER [LIMIT]`` lists FOLDER (``os.walk``, names sorted,
``.cachedoctor`` skipped: the listing is part of the work, as it is for a scan), then runs one
loop over every file, or over the first LIMIT; prints ``{"files", "listed", "loop_s"}`` as JSON
on its last line (``loop_s``: the loop alone, which lets a loop timed on LIMIT files be scaled to
the whole set). It is timed as a whole fresh process, like the scans: only KIND's own libraries are
imported (torch for ``torch``, numpy for ``npz``, safetensors and torch for ``safetensors``).

KIND: ``read`` ``open(p, 'rb').read()``; ``cd`` ``zipfile.ZipFile(p).infolist()`` (the zip central
directory); ``torch`` ``torch.load(p, weights_only=True, map_location='cpu')``; ``npz``
``np.load(p)`` and every key's array read; ``safetensors`` ``safe_open(p, 'pt')`` and
``get_tensor`` of every key.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable


def files_of(folder: str) -> list[str]:
    out = []
    for dirpath, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d != ".cachedoctor")
        out += [os.path.join(dirpath, n) for n in sorted(names)]
    return out


def read(p: str) -> int:
    with open(p, "rb") as f:
        return len(f.read())


def central_directory(p: str) -> int:
    import zipfile

    with zipfile.ZipFile(p) as z:
        return len(z.infolist())


def loader(kind: str) -> Callable[[str], int]:
    if kind == "torch":
        import torch

        def torch_load(p: str) -> int:
            return torch.load(p, weights_only=True, map_location="cpu") is not None

        return torch_load
    if kind == "npz":
        import numpy as np

        def npz_load(p: str) -> int:
            with np.load(p) as z:
                return sum(z[k].size for k in z.files)

        return npz_load
    if kind == "safetensors":
        from safetensors import safe_open

        def st_load(p: str) -> int:
            with safe_open(p, framework="pt") as f:
                return sum(f.get_tensor(k).numel() for k in f.keys())  # noqa: SIM118 (safe_open has no __iter__)

        return st_load
    return {"read": read, "cd": central_directory}[kind]


def main(argv: list[str]) -> int:
    kind, folder = argv[0], argv[1]
    limit = int(argv[2]) if len(argv) > 2 else 0
    body = loader(kind)
    files = files_of(folder)
    some = files[:limit] if limit else files
    t0 = time.perf_counter()
    for p in some:
        body(p)
    loop_s = time.perf_counter() - t0
    print(json.dumps({"files": len(some), "listed": len(files), "loop_s": loop_s}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
