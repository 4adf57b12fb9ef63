"""A zip archive's listing, as both of its readers look members up: ``zipfile`` (``np.load``)
by exact name, the last of equal names winning, and miniz (``torch.load``) case-insensitively
through a heap-sorted index and a binary search (:meth:`ZipDirectory.torch_index`, step for step).

Why a module of its own: plain values, parsed by ``_zip.py`` (:func:`~cachedoctor.formats._zip.read_directory`)
and kept on the source it was parsed from (``_source.Source``), which ``_zip.py`` reads; here,
below both, neither imports the other back. Every name is still importable from ``_zip.py``.
"""

from __future__ import annotations

from typing import NamedTuple

from cachedoctor.records import record


class ZipMember(NamedTuple):  # a tuple: archives are listed millions of times per scan
    name: str
    method: int
    crc: int
    compressed_size: int
    size: int
    header_offset: int


@record
class ZipDirectory:
    members: dict[str, ZipMember]  # by exact name, the last of equal names winning (zipfile's rule)
    cd_offset: int  # where the central directory starts: every member's data ends before it
    entries: tuple[ZipMember, ...] = ()  # every entry in central-directory order, duplicates too
    #: bytes before the archive (offsets above already include them): zipfile reads such an
    #: archive, miniz (torch.load) does not
    concat: int = 0

    def torch_index(self) -> dict[str, ZipMember]:
        """Entries by case-folded name, each name resolved to the entry torch.load reads."""
        if len(self.entries) == len(self.members):
            joined = "\0".join(self.members)
            if joined == joined.lower():  # the usual case: no upper case anywhere, no duplicates
                return self.members
        index: dict[str, ZipMember] = {}
        for entry in self.entries:
            name = entry.name
            key = name.lower() if name.isascii() else name.translate(_ASCII_LOWER)  # fold(), inlined: hot
            if key not in index:
                index[key] = entry
        if len(index) != len(self.entries):
            for key in self._collisions():
                found = _miniz_binary_search(self.entries, key)
                if found is not None:
                    index[key] = found
        return index

    def colliding(self) -> tuple[str, ...]:
        """Names held by more than one entry, exactly or in another letter case: torch.load
        (miniz, case-insensitive) and zipfile (exact, last wins) may read different bytes."""
        if len(self.entries) == len(self.members) and len({fold(n) for n in self.members}) == len(self.members):
            return ()
        return tuple(self._collisions())

    def _collisions(self) -> list[str]:
        counts: dict[str, int] = {}
        for entry in self.entries:
            key = fold(entry.name)
            counts[key] = counts.get(key, 0) + 1
        return [key for key, n in counts.items() if n > 1]

    def torch_archive(self) -> str | None:
        """torch's record prefix: the first entry's name up to its first ``/`` (``None``: no folder)."""
        if not self.entries:
            return None
        first = self.entries[0].name
        return first[: first.index("/")] if "/" in first else None


_ASCII_LOWER = {c: c + 32 for c in range(65, 91)}


def fold(name: str) -> str:
    """miniz's ``MZ_TOLOWER``: ASCII letters only (``str.lower`` would also fold ``İ`` and friends)."""
    return name.lower() if name.isascii() else name.translate(_ASCII_LOWER)


def _less(a: str, b: str) -> bool:
    return a < b  # code points order as UTF-8 bytes do; shorter first on a tie: miniz's filename_less


def _miniz_binary_search(entries: tuple[ZipMember, ...], folded: str) -> ZipMember | None:
    """miniz sorts an index of the entries with its own heap sort, then binary-searches it; with
    equal names, which one it finds depends on both, so both are reproduced exactly."""
    names = [fold(e.name) for e in entries]
    index = list(range(len(entries)))
    size = len(index)

    def sift(root: int, end: int) -> None:
        while True:
            child = root * 2 + 1
            if child >= end:
                return
            if child + 1 < end and _less(names[index[child]], names[index[child + 1]]):
                child += 1
            if not _less(names[index[root]], names[index[child]]):
                return
            index[root], index[child] = index[child], index[root]
            root = child

    for start in range((size - 2) >> 1, -1, -1):
        sift(start, size)
    for end in range(size - 1, 0, -1):
        index[end], index[0] = index[0], index[end]
        sift(0, end)
    lo, hi = 0, size - 1
    while lo <= hi:
        mid = lo + ((hi - lo) >> 1)
        probe = names[index[mid]]
        if probe == folded:
            return entries[index[mid]]
        if probe < folded:
            lo = mid + 1
        else:
            hi = mid - 1
    return None


__all__ = ["ZipDirectory", "ZipMember", "fold"]
