"""A scan split another way starts warm: the state databases of other splits of the same target.

A sharded scan keeps one database per shard (``state.shard-K-of-N.sqlite``, never written by
two nodes at once), so a scan split into 3 after one split into 2, or run whole after a sharded
one, finds no record of its own. Until its own database has a finished scan (new, or killed
before its first finish), a folder it has no rows for takes them from the first other split's
database that has rows for it: the unsharded one, then the shards of the other counts, by count
and index (``statedir.other_splits``), each opened read-only (``readonly.py``); one that does
not open (damaged, another version's) is left out without a word. The rows served are copied
into the own database, so the next run split the same way finds them there
(``StateStore.rows``, which this module gives the other databases to: :func:`attach_splits`).

Served rows pass the same test as the own ones: a file whose stat differs from the record is
read again, so a re-split is a slower first run, never a wrong one. Not taken: damaged rows
(their seal does not hold), and the whole-folder results (``folder_result`` stays with the own
database; a folder whose files all come from another split settles after this run). A row's
``deep_scan`` (the scan that last read the file deep) numbers the other database's scans, so it
is taken as 0: read deep before any scan of this one, the first due in a ``--sample`` rotation;
its digest is kept, so a later deep read still tells ``bit-rot``.

Where a database of the target exists only for another split, ``existing`` state (``repair``,
``recover``) makes this shard's and fills it as above, and a dry run (read-only) reads the other
splits' directly: a ``torchrun`` repair after a plain scan starts warm too.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from cachedoctor.scan.state.readonly import open_read_only
from cachedoctor.scan.state.store import StateStore
from cachedoctor.statedir import other_splits, sharded_path

if TYPE_CHECKING:
    from cachedoctor.sharding.interface import Shard


def attach_splits(store: StateStore, whole: str, shard: Shard | None) -> None:
    """Give ``store`` (shard ``shard`` of the database named ``whole`` unsharded) the other
    splits' databases to read, when it has no finished scan yet."""
    if store.finished_any():
        return
    for path in other_splits(whole, shard):
        donor = open_read_only(path, store.base)
        if donor is not None:
            store.donors.append(donor)


def any_split(whole: str, shard: Shard | None) -> bool:
    """Whether a database of this target exists, this shard's own or another split's."""
    return os.path.isfile(sharded_path(whole, shard)) or bool(other_splits(whole, shard))


def open_read_only_split(whole: str, shard: Shard | None, base: str) -> StateStore | None:
    """A dry run's database: the shard's own, read-only, with the other splits behind it while it
    has no finished scan; with none of its own, the first other split's, the rest behind it."""
    own = open_read_only(sharded_path(whole, shard), base)
    if own is not None:
        attach_splits(own, whole, shard)
        return own
    others = [store for path in other_splits(whole, shard) if (store := open_read_only(path, base)) is not None]
    if not others:
        return None
    others[0].donors = others[1:]
    return others[0]


__all__ = ["any_split", "attach_splits", "open_read_only_split"]
