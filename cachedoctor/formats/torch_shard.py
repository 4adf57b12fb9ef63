"""diffusion-pipe's shards: many ``torch.save`` archives back to back in one ``shard_<N>.bin``,
located by the SQLite index beside them (``metadata.db``).

diffusion-pipe's ``utils/cache.py`` (8f83dbf) appends each item's ``torch.save`` bytes to the
open shard and records ``(offset, size)`` in table ``shard_<N>`` and ``(shard, shard_index)`` in
table ``items`` (the item's place in the dataset); its loader reads exactly ``size`` bytes at
``offset`` and ``torch.load``\\ s them (``map_location='cpu'``). Read as one zip, a shard shows
only its last archive (the end record at the end of the file), so a damaged or hostile item
before it passes unseen. This reader judges every item the index lists, each as the torch
archive the loader reads, and reports them in one :class:`FileMeta`: an item's tensors under
``item <i>/<key>`` (``i`` its index in ``items``), one that does not read in ``item_errors``.
Bytes after the last listed item (a write the trainer never committed) are not read, as the
trainer never reads them. The index is read with SQLite read-only, its rows bounded.
"""

from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass, replace

from cachedoctor.cachenames import SHARD_INDEX, SHARD_NAME, shard_index
from cachedoctor.formats._source import BufferSource, Source
from cachedoctor.formats._zip import directory_of, is_zip, torch_directory_of
from cachedoctor.formats.interface import FileMeta, MemberCrc, ReadError, TensorMeta
from cachedoctor.formats.torch_zip import describe

NAME = "torch-shard"
INDEX = SHARD_INDEX
#: Rows read from an index at most: diffusion-pipe writes one per item (a LAION-scale folder is
#: millions); more than this is no cache index.
MAX_ITEMS = 10_000_000


def shard_number(path: str) -> int | None:
    """``N`` of a ``shard_<N>.bin`` whose folder holds a ``metadata.db``, else ``None``."""
    if shard_index(path) is None:
        return None
    match = SHARD_NAME.match(os.path.basename(path))
    return int(match.group(1)) if match else None


@dataclass(frozen=True, slots=True)
class ShardIndex:
    """What ``metadata.db`` says: per item (its index in ``items``) its shard and place there, and
    per shard its items' ``(offset, size)`` in shard order."""

    items: tuple[tuple[int, int], ...]  # index -> (shard, shard_index)
    shards: dict[int, tuple[tuple[int, int], ...]]  # shard -> (offset, size) per shard_index
    fingerprint: str | None

    def items_of(self, shard: int) -> list[tuple[int, int]]:
        """``(item index, shard_index)`` of the items ``shard`` holds, in shard order."""
        return sorted(((i, j) for i, (s, j) in enumerate(self.items) if s == shard), key=lambda p: p[1])


def read_index(folder: str) -> ShardIndex:
    """The index of the shards in ``folder`` as the trainer will see it; :class:`ReadError` when
    it cannot be read. A writer that died mid-transaction leaves a rollback journal (or a WAL)
    that SQLite applies on the next writable open: the index is then read from a copy of both,
    rolled back there, never in the cache."""
    path = os.path.join(folder, INDEX)
    if any(os.path.exists(path + s) for s in ("-journal", "-wal")):
        import shutil
        import tempfile

        with tempfile.TemporaryDirectory(prefix="cachedoctor-index-") as work:
            for suffix in ("", "-journal", "-wal", "-shm"):
                if os.path.exists(path + suffix):
                    shutil.copyfile(path + suffix, os.path.join(work, INDEX + suffix))
            return _read_index(os.path.join(work, INDEX), writable=True)
    return _read_index(path, writable=False)


def _read_index(path: str, *, writable: bool) -> ShardIndex:
    try:
        con = sqlite3.connect(path if writable else f"file:{path}?mode=ro", uri=not writable, timeout=1.0)
    except sqlite3.Error as exc:
        raise ReadError("bad-index", f"{INDEX} cannot be opened ({exc})") from None
    try:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        items = _rows(con, "items", "shard, shard_index") if "items" in names else []
        shards = {
            int(m.group(1)): tuple(_rows(con, name, "offset, size"))
            for name in names
            if (m := re.fullmatch(r"shard_(\d+)", name)) is not None
        }
        found = con.execute("SELECT value FROM fingerprint").fetchone() if "fingerprint" in names else None
    except sqlite3.Error as exc:
        raise ReadError("bad-index", f"{INDEX} does not read as diffusion-pipe's index ({exc})") from None
    finally:
        con.close()
    return ShardIndex(tuple(items), shards, str(found[0]) if found else None)


def _rows(con: sqlite3.Connection, table: str, columns: str) -> list[tuple[int, int]]:
    rows = con.execute(f'SELECT {columns} FROM "{table}" ORDER BY rowid LIMIT ?', (MAX_ITEMS + 1,)).fetchall()
    if len(rows) > MAX_ITEMS:
        raise ReadError("bad-index", f"{INDEX} table {table} lists more than {MAX_ITEMS:,} rows")
    if not all(len(r) == 2 and type(r[0]) is int and type(r[1]) is int for r in rows):
        raise ReadError("bad-index", f"{INDEX} table {table} holds values that are not whole numbers")
    return [(r[0], r[1]) for r in rows]


class _Slice(Source):
    """``size`` bytes of ``src`` from ``base``: one archive of a shard, as its loader reads it."""

    def __init__(self, src: Source, base: int, size: int) -> None:
        self.src, self.base, self.size = src, base, size

    def read_at(self, offset: int, length: int) -> bytes:
        length = max(0, min(length, self.size - offset))
        return self.src.read_at(self.base + offset, length)


def _item_source(src: Source, offset: int, size: int) -> Source:
    if isinstance(src, BufferSource):
        return BufferSource(src.view(offset, size), digest=False)  # deep: zero-copy (the digest is the file's)
    return _Slice(src, offset, size)


def read(path: str, src: Source, *, deep: bool) -> FileMeta:
    """Every item of the shard at ``path`` that ``metadata.db`` lists, judged as its loader reads it."""
    number = shard_number(path)
    assert number is not None
    index = read_index(os.path.dirname(path))
    tensors: list[TensorMeta] = []
    errors: list[tuple[str, str, str]] = []
    unsafe: list[str] = []
    loaders: list[str] = []
    crc: list[MemberCrc] = []
    missing: list[str] = []
    ambiguous: list[str] = []
    texts: list[tuple[str, str]] = []
    spans = index.shards.get(number, ())
    end = 0
    for item, place in index.items_of(number):
        label = f"item {item}"
        if place >= len(spans):
            errors.append(
                (
                    label,
                    "bad-index",
                    f"{label}: {INDEX} lists it at place {place} of a shard table with {len(spans)} rows",
                )
            )
            continue
        offset, size = spans[place]
        try:
            if size <= 0 or offset < 0 or offset + size > src.size:
                raise ReadError("truncated", f"the index says {size} bytes at {offset}, the shard has {src.size}")
            if offset < end:
                raise ReadError("bad-index", f"it starts at {offset}, inside the item before it (which ends at {end})")
            end = offset + size
            part = _item_source(src, offset, size)
            if not is_zip(part.read_at(0, 4)):
                raise ReadError("bad-zip", "its bytes do not start a torch.save archive")
            directory = torch_directory_of(part)  # torch.load reads the item: miniz's offsets
            if directory is None:
                directory_of(part)  # raises what is wrong with it, else:
                raise ReadError("bad-zip", "bytes before its archive: torch.load cannot read it")
            meta = describe(path, NAME, part, directory, deep=deep)
        except ReadError as exc:
            errors.append((label, exc.problem, f"{label}: {exc.message}"))
            continue
        tensors += [_prefixed(t, label) for t in meta.tensors]
        unsafe += [g for g in meta.foreign_globals if g not in unsafe]
        loaders += [x for x in meta.loaders if x not in loaders]
        crc += [replace(c, name=f"{label}/{c.name}") for c in meta.crc_mismatches]
        missing += [f"{label}/{m}" for m in meta.missing_records]
        ambiguous += [f"{label}/{a}" for a in meta.ambiguous]
        texts += [(f"{label}/{k}", v) for k, v in meta.texts]
        if meta.unreadable_reason:
            errors.append((label, "bad-pickle", f"{label}: {meta.unreadable_reason}"))
    digest = None
    if deep and isinstance(src, BufferSource):
        from cachedoctor.formats import _deep

        digest = _deep.file_digest(src)
    return FileMeta(
        path,
        NAME,
        src.size,
        container="shard",
        tensors=tuple(tensors),
        foreign_globals=tuple(unsafe),
        missing_records=tuple(missing),
        deep=deep,
        crc_mismatches=tuple(crc),
        digest=digest,
        loaders=tuple(loaders),
        ambiguous=tuple(ambiguous),
        texts=tuple(texts),
        item_errors=tuple(errors),
    )


def _prefixed(t: TensorMeta, label: str) -> TensorMeta:
    """An item's tensor under ``<label>/<key>``, its storage too (batch-leak compares an item's own)."""
    key = f"{label}/{t.key}" if t.key else label
    return replace(t, key=key, storage=f"{label}/{t.storage}" if t.storage is not None else None)


__all__ = ["INDEX", "MAX_ITEMS", "NAME", "ShardIndex", "read", "read_index", "shard_number"]
