#!/usr/bin/env python3
"""The floor of a deep scan's data part in pure Python + numpy: the fewest calls its checks need.

``python bench/deep_floor.py KIND FOLDER`` runs one bare loop over every ``.pt`` file of FOLDER
(torch.save archives of one layout, as the matrix's torch rows are) and prints
``{"files", "loop_s"}`` as JSON on its last line; time it as a whole fresh process, like the
matrix's loops (bench/matrix_loops.py). KIND:

- ``quick``: what any quick read must do: open, ``fstat``, read the end of the file (the zip
  directory) and its start (``data.pkl``), close;
- ``deep``: open, ``fstat``, the whole file read into one reused buffer, the CRC-32 of every
  member (ISA-L, one ``map``), the NaN/Inf test of the largest tensor (one ``np.vdot`` for
  float32, two integer maxima for 16-bit floats, with fp16's limits), its channel statistics on
  the sampled grid (one strided view, one copy, the squares, one matrix-vector product, the
  means and standard deviations packed; 16-bit floats are copied as fp16, which costs what a
  bf16 grid does), close.

``(deep - quick) / read loop`` is then what the matrix's goal for the deep data part would be
for a scan that did nothing but those passes: no header, directory or CRC comparison, no
records, no checks, no reader process. The member spans, the tensor and the grid are learned
from the first file before the clock starts (with zipfile and cachedoctor's own reader: outside
the loop). For the closing notes of issue 31; not part of ``make bench``.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import time


def main(argv: list[str]) -> int:
    kind, folder = argv[0], argv[1]
    files = sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".pt"))
    buf = bytearray(64 << 20)
    view = memoryview(buf)
    if kind == "quick":
        t0 = time.perf_counter()
        for p in files:
            fd = os.open(p, os.O_RDONLY)
            size = os.fstat(fd).st_size
            os.pread(fd, 1024, max(0, size - 1024))
            os.pread(fd, 512, 0)
            os.close(fd)
        print(json.dumps({"files": len(files), "loop_s": time.perf_counter() - t0}))
        return 0
    import numpy as np

    try:
        from isal.isal_zlib import crc32
    except ImportError:  # pragma: no cover
        from zlib import crc32
    spans, start, words, word, grid = _learn(files[0])
    C, rows, cols, step, width = grid
    block = np.zeros((2 * C, rows * cols), np.float32)
    values, squares = block[:C], block[C:]
    target = values.reshape(C, rows, cols)
    ones = np.ones(rows * cols, np.float32)
    pack = struct.Struct(f"<{2 * C}f").pack
    n = rows * cols
    strides = (width * width * 4, step * width * 4, step * 4) if word == "<f4" else None
    t0 = time.perf_counter()
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        size = os.fstat(fd).st_size
        data = view[: os.preadv(fd, [view[:size]], 0)]
        crcs = tuple(map(crc32, map(data.__getitem__, spans)))
        if word == "<f4":
            flat = np.frombuffer(data, word, words, start)
            finite = np.vdot(flat, flat) < 2.0**110
            target[...] = np.ndarray((C, rows, cols), word, data, start, strides)
        else:
            flat = np.frombuffer(data, "<u2", words, start)
            finite = np.maximum.reduce(flat) < 0xFC00 and np.maximum.reduce(flat.view("<i2")) < 0x7C00
            target[...] = flat.view(word).reshape(C, width, width)[:, ::step, ::step]
        np.multiply(values, values, out=squares)
        sums = (block @ ones).tolist()
        means = [t / n for t in sums[:C]]
        pack(*means, *[max(q / n - m * m, 0.0) ** 0.5 for q, m in zip(sums[C:], means, strict=True)])
        del finite, crcs  # computed, as a scan would, and dropped
        os.close(fd)
    print(json.dumps({"files": len(files), "loop_s": time.perf_counter() - t0}))
    return 0


def _learn(path: str) -> tuple[list[slice], int, int, str, tuple[int, int, int, int, int]]:
    """Member data spans, and the largest tensor's start, size, word and sampled grid."""
    import math
    import zipfile

    from cachedoctor.formats import read_file

    with open(path, "rb") as f:
        first = f.read()
    spans = []
    for info in zipfile.ZipFile(path).infolist():
        nlen, xlen = struct.unpack_from("<HH", first, info.header_offset + 26)
        at = info.header_offset + 30 + nlen + xlen
        spans.append(slice(at, at + info.file_size))
    meta = read_file(path)
    assert meta is not None
    tensor = max(meta.tensors, key=lambda t: t.record_bytes or 0)
    big = max(spans, key=lambda s: s.stop - s.start)
    *_, c, h, w = (1, *tensor.shape)
    step = max(1, math.isqrt(h * w // 256))
    word = {"float32": "<f4", "float16": "<f2"}.get(tensor.dtype, "<f2")
    return spans, big.start, c * h * w, word, (c, -(-h // step), -(-w // step), step, w)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
