"""The ``data.pkl`` torch.save writes for a :class:`~cachedoctor.repair.torch_pickle.Saved`
object once loaded on the cpu, without torch: CPython's C ``Pickler`` at protocol 2 with torch's
``persistent_id``, opcode for opcode and memo index for memo index.

What the pickler memoises anew for each tensor (the size and stride tuples, the persistent id,
the empty hooks) gets a new memo entry; what torch hands it again as the same object (the
rebuild function and the storage classes, the ``"storage"`` tag, the ``"cpu"`` location, a
storage's key) is fetched from the memo. Split from ``torch_pickle.py``, which reads them; the
tests hold the bytes to torch.save's own.
"""

from __future__ import annotations

import struct

from cachedoctor.repair.torch_pickle import Saved, Tensor


def write_pickle(saved: Saved) -> bytes:
    """The ``data.pkl`` torch.save writes for ``saved`` (each tensor on the cpu, its storage under
    its ``key``; storages with equal keys are one storage)."""
    out = _Writer()
    if saved.items is None:
        assert saved.tensor is not None
        out.tensor(saved.tensor)
    else:
        if saved.ordered:  # OrderedDict.__reduce__: the class, no arguments, then its items
            out.glob("collections", "OrderedDict")
            out.raw(b")R")
        else:
            out.raw(b"}")
        out.put(object())
        items = saved.items
        if len(items) == 1:
            out.string(items[0][0], object())
            out.tensor(items[0][1])
            out.raw(b"s")
        elif items:
            out.raw(b"(")
            for key, tensor in items:
                out.string(key, object())
                out.tensor(tensor)
            out.raw(b"u")
    out.raw(b".")
    return bytes(out.out)


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray(b"\x80\x02")
        self.memo: dict[object, int] = {}

    def raw(self, data: bytes) -> None:
        self.out += data

    def put(self, token: object) -> None:
        index = self.memo[token] = len(self.memo)
        self.out += b"q" + bytes((index,)) if index < 256 else b"r" + struct.pack("<I", index)

    def fetched(self, token: object) -> bool:
        index = self.memo.get(token)
        if index is None:
            return False
        self.out += b"h" + bytes((index,)) if index < 256 else b"j" + struct.pack("<I", index)
        return True

    def glob(self, module: str, name: str) -> None:
        token = ("global", module, name)
        if not self.fetched(token):
            self.out += f"c{module}\n{name}\n".encode("ascii")
            self.put(token)

    def string(self, text: str, token: object) -> None:
        if not self.fetched(token):
            data = text.encode("utf-8", "surrogatepass")
            self.out += b"X" + struct.pack("<I", len(data)) + data
            self.put(token)

    def integer(self, n: int) -> None:
        if 0 <= n < 0x100:
            self.out += b"K" + bytes((n,))
        elif 0 <= n < 0x10000:
            self.out += b"M" + struct.pack("<H", n)
        elif -0x80000000 <= n < 0x80000000:
            self.out += b"J" + struct.pack("<i", n)
        else:
            data = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)  # pickle's encode_long
            self.out += b"\x8a" + bytes((len(data),)) + data

    def dims(self, values: tuple[int, ...]) -> None:
        if not values:
            self.out += b")"  # the empty tuple is never memoised
            return
        if len(values) > 3:
            self.out += b"("
        for v in values:
            self.integer(v)
        self.out += b"t" if len(values) > 3 else bytes((0x84 + len(values),))
        self.put(object())

    def tensor(self, t: Tensor) -> None:
        """``Tensor.__reduce_ex__``: ``_rebuild_tensor_v2(storage, offset, size, stride,
        requires_grad=False, OrderedDict())``, the storage as torch's persistent id."""
        self.glob("torch._utils", "_rebuild_tensor_v2")
        self.out += b"(("
        self.string("storage", "storage")
        self.glob("torch", t.storage.cls)
        self.string(t.storage.key, ("key", t.storage.key))
        self.string("cpu", "cpu")
        self.integer(t.storage.numel)
        self.out += b"t"
        self.put(object())
        self.out += b"Q"
        self.integer(t.offset)
        self.dims(t.size)
        self.dims(t.stride)
        self.out += b"\x89"
        self.glob("collections", "OrderedDict")
        self.out += b")R"
        self.put(object())
        self.out += b"t"
        self.put(object())
        self.out += b"R"
        self.put(object())


__all__ = ["write_pickle"]
