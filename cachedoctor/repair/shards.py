"""``drop-items``: repair a diffusion-pipe cache folder by the trainer's own rule, never by writing an item.

diffusion-pipe (``utils/cache.py``, ``utils/dataset.py`` ``_map_and_cache`` at 8f83dbf) resumes
caching at ``len(items)``: the items its index lists are taken as done, the rest of the dataset
is cached into a new shard numbered one past the last listed. Only its own pipeline makes an
item, and the items are addressed by position, so one damaged item cannot be replaced in place;
what can be done is to stop the index before it. Dropping item ``k`` drops every item after it
too (the positions must stay the dataset's), and the trainer's next run makes them again.

The steps, under the index's lock, each crash-safe on its own:

1. every item of the folder is read again (deep: CRCs, NaN/Inf, the pickles) and the first one
   that is damaged, unsafe or flagged by the scan (a stale image) is ``k``; none: nothing to do;
2. a new ``metadata.db`` listing items ``0..k-1`` only (later shards' tables dropped, ``k``'s
   shard's table cut at it: diffusion-pipe's next shard number must not exist, or its
   ``CREATE TABLE`` fails and caching stops) is judged, then put in place as any repair write
   (``swap.replace_file``: the old index goes to the quarantine first). From this instant the
   trainer sees a consistent cache that ends before ``k``;
3. the shards no item is listed in any more are moved to the quarantine. A crash before this is
   harmless: such a shard is read by no one, the next scan reports it as an orphan.

The bytes of the dropped items that share a shard with kept ones stay at that shard's end,
unread (the trainer never appends to an existing shard): restoring the run's quarantine puts
the old index and shards back, byte for byte. A rollback journal (``metadata.db-journal``) left
by a crashed writer is SQLite's to replay, so such a folder is not touched.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import tempfile

from cachedoctor.file_locks import file_lock
from cachedoctor.repair.model import Action, ItemResult, ItemState, Stat
from cachedoctor.repair.quarantine import Quarantine
from cachedoctor.repair.swap import crash_point, failed, replace_file


def flagged_items(note: str | None) -> set[int]:
    """The items the scan flagged (``Action.note``: ``items 3, 7``)."""
    if not note or not note.startswith("items "):
        return set()
    return {int(x) for x in note[len("items ") :].split(",") if x.strip().isdigit()}


def drop_items(action: Action, quarantine: Quarantine) -> ItemResult:
    """Steps 1-3 above for the folder whose index is ``action.path``."""
    from cachedoctor.formats.interface import ReadError
    from cachedoctor.formats.torch_shard import read_index

    index_path = action.path
    folder = os.path.dirname(index_path)
    with file_lock(index_path):
        if Stat.of(index_path) != action.before:
            return ItemResult(
                index_path, action.kind, ItemState.SKIPPED, "changed since the scan; left for the final scan to judge"
            )
        for suffix in ("-journal", "-wal"):
            if os.path.exists(index_path + suffix):
                return ItemResult(
                    index_path,
                    action.kind,
                    ItemState.FAILED,
                    f"a writer left {os.path.basename(index_path)}{suffix} (it died mid-transaction): start the trainer "
                    "once, or open the index with sqlite3, so that SQLite rolls it back; then repair again",
                )
        try:
            try:
                index = read_index(folder)
            except ReadError as exc:
                return _set_aside(folder, action, quarantine, exc.message)
            first = _first_bad(folder, index, flagged_items(action.note))
            if first is None:
                return ItemResult(index_path, action.kind, ItemState.SKIPPED, "every item reads now; nothing dropped")
            data = _cut_index(index_path, index, first)
            kept = replace_file(index_path, data, quarantine, action, _judge_index(first))
            crash_point("after-index")
            shard, place = index.items[first]
            gone = [s for s in index.shards if s > shard or (s == shard and place == 0)]
            for number in sorted(gone):
                path = os.path.join(folder, f"shard_{number}.bin")
                if os.path.lexists(path):
                    quarantine.move(path, action.reasons, action.kind.value)
        except ReadError as exc:
            return ItemResult(index_path, action.kind, ItemState.FAILED, f"its index does not read ({exc.message})")
        except Exception as exc:  # one folder's failure must not stop the run; a full disk does (failed raises)
            return failed(index_path, action, exc)
    dropped = len(index.items) - first
    return ItemResult(
        index_path,
        action.kind,
        ItemState.VERIFIED,
        f"items {first}..{len(index.items) - 1} dropped ({dropped}); the trainer re-caches them when it next runs",
        kept,
        action.bytes,
        len(data),
    )


def _set_aside(folder: str, action: Action, quarantine: Quarantine, why: str) -> ItemResult:
    """An index SQLite cannot read: the trainer would stop on it (``database disk image is
    malformed``), and no item of the folder can be located. The index goes to the quarantine
    first (from then on the trainer sees a folder to cache from the start, as on its first run),
    then every shard; a crash in between leaves shards no index lists, which the next repair
    moves too. Nothing is deleted: restoring the run puts every byte back."""
    index_path = action.path
    try:
        kept = quarantine.move(index_path, action.reasons, action.kind.value)
        crash_point("after-index")
        shards = sorted(n for n in os.listdir(folder) if re.fullmatch(r"shard_\d+\.bin", n))
        for name in shards:
            quarantine.move(os.path.join(folder, name), action.reasons, action.kind.value)
    except Exception as exc:  # a full disk stops the run (failed raises); anything else fails this folder
        return failed(index_path, action, exc)
    return ItemResult(
        index_path,
        action.kind,
        ItemState.VERIFIED,
        f"its index does not read ({why}): it and its {len(shards)} shard(s) moved to the quarantine; "
        "the trainer re-caches the folder when it next runs",
        kept,
        action.bytes,
        0,
    )


def _first_bad(folder: str, index: object, flagged: set[int]) -> int | None:
    """The first item (in ``items`` order) that is flagged, or that a deep read finds damaged,
    unsafe or holding NaN/Inf; ``None`` when every item reads."""
    from cachedoctor.formats import ReadError, read_file
    from cachedoctor.formats.torch_shard import ShardIndex

    assert isinstance(index, ShardIndex)
    bad = set(flagged)
    for number in index.shards:
        path = os.path.join(folder, f"shard_{number}.bin")
        items = [i for i, _ in index.items_of(number)]
        try:
            meta = read_file(path, deep=True)
        except (ReadError, OSError):
            bad.update(items)  # the shard as a whole does not read: all its items are lost
            continue
        if meta is None:
            bad.update(items)
            continue
        if meta.foreign_globals:  # which item named it is not kept: every item of the shard is suspect
            bad.update(items)
        bad.update(_number(label) for label, _, _ in meta.item_errors)
        bad.update(_number(t.key) for t in meta.tensors if t.nonfinite)
        bad.update(_number(c.name) for c in meta.crc_mismatches)
    bad.discard(-1)
    return min(bad) if bad and min(bad) < len(index.items) else None


def _number(label: str) -> int:
    """``item 3/latents`` -> 3 (``-1``: no item's)."""
    head = label.split("/", 1)[0]
    return int(head[5:]) if head.startswith("item ") and head[5:].isdigit() else -1


def _cut_index(index_path: str, index: object, first: int) -> bytes:
    """The bytes of a copy of the index that lists items ``0..first-1`` only."""
    from cachedoctor.formats.torch_shard import ShardIndex

    assert isinstance(index, ShardIndex)
    shard, place = index.items[first]
    with tempfile.TemporaryDirectory(prefix="cachedoctor-index-") as work:
        copy = os.path.join(work, "metadata.db")
        shutil.copyfile(index_path, copy)
        con = sqlite3.connect(copy, isolation_level=None)
        try:
            con.execute("BEGIN")
            con.execute("DELETE FROM items WHERE rowid > ?", (first,))  # rowid = position + 1
            for number in index.shards:
                if number > shard or (number == shard and place == 0):
                    con.execute(f'DROP TABLE "shard_{number}"')
                elif number == shard:
                    con.execute(f'DELETE FROM "shard_{number}" WHERE rowid > ?', (place,))
            con.execute("COMMIT")
            con.execute("VACUUM")
        finally:
            con.close()
        with open(copy, "rb") as handle:
            return handle.read()


def _judge_index(first: int):  # type: ignore[no-untyped-def]
    """The new index must list exactly ``first`` items, each in a shard table that has it."""

    def judge(action: Action, temp: str) -> str | None:
        from cachedoctor.formats.interface import ReadError
        from cachedoctor.formats.torch_shard import read_index

        try:
            con_dir = tempfile.mkdtemp(prefix="cachedoctor-judge-")
            try:
                shutil.copyfile(temp, os.path.join(con_dir, "metadata.db"))
                index = read_index(con_dir)
            finally:
                shutil.rmtree(con_dir, ignore_errors=True)
        except ReadError as exc:
            return f"does not read back ({exc.message})"
        if len(index.items) != first:
            return f"lists {len(index.items)} items where {first} should remain"
        for shard, place in index.items:
            if place >= len(index.shards.get(shard, ())):
                return f"lists an item in shard {shard} at {place}, past its table"
        return None

    return judge


__all__ = ["drop_items", "flagged_items"]
