"""Which files of a folder a scan must read, and which it can take from the state database.

A file is read again when its stat changed since the recorded read, when it was recorded as
racy, when this scan reads it deep (``--deep``, the ``--sample`` share, or ``deep_changed``
for a file that changed), or when its row does not decode. An unchanged file read deep again
carries the digest of its last deep read, which its bytes must still match. A folder whose every file is
unchanged, with no deep read due, is settled by its recorded result alone.
"""

from __future__ import annotations

import contextlib
import json
import os
from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cachedoctor.findings import Finding
from cachedoctor.scan.outcome import Outcome
from cachedoctor.scan.state.codec import finding_from_json, finding_to_json, inside, outcome_from_text
from cachedoctor.scan.state.store import Row, Sig, StateStore, default_path, sig_of, sig_of_info
from cachedoctor.statedir import sharded_path

if TYPE_CHECKING:
    from cachedoctor.sharding.interface import Shard
    from cachedoctor.stores.interface import ObjectInfo

#: ``ScanOptions.state``: no state; a store in every folder target (created); only where one exists.
NO_STATE: None = None
AUTO = "auto"
EXISTING = "existing"
READ_ONLY = "read-only"  # the existing ones, read and never written (repair --dry-run)


class StateSet:
    """The stores of one scan: one per folder target, or the single one ``--state`` names."""

    def __init__(self, stores: list[StateStore], notes: list[str]) -> None:
        self.stores = sorted(stores, key=lambda s: len(s.base), reverse=True)  # nested targets: nearest first
        self._notes = notes

    @property
    def notes(self) -> list[str]:
        """Why a store could not be opened, then why one was given up during the scan."""
        return self._notes + [note for store in self.stores for note in store.notes]

    @classmethod
    def open(
        cls, roots: list[str], state: str | None, remote: Sequence[str] = (), shard: Shard | None = None
    ) -> StateSet:
        """``remote``: the object-store prefixes scanned, whose own databases live in the user
        cache dir (``store.default_path``); a ``--state`` path serves them as it serves the rest.
        ``shard``: shard K (0-based) of a scan split N ways: each database is that shard's own
        (``state.shard-K-of-N.sqlite``, ``statedir.sharded_path``; the one shard of one keeps the
        unsharded names), and one with no finished scan yet reads what the other splits recorded
        (``splits.py``)."""
        from cachedoctor.scan.state.splits import any_split, attach_splits, open_read_only_split

        stores: list[StateStore] = []
        notes: list[str] = []
        if state is None:
            return cls(stores, notes)
        elsewhere = [(default_path(url), url) for url in sorted(set(remote))]  # unsharded names here
        if state == READ_ONLY or state.startswith(READ_ONLY + ":"):
            named = state[len(READ_ONLY) + 1 :]
            places = (
                [(os.path.abspath(named), "")]
                if named
                else [(default_path(r), r) for r in sorted({r for r in roots if os.path.isdir(r)})] + elsewhere
            )
            for whole, base in places:
                found = open_read_only_split(whole, shard, base)
                if found is not None:
                    stores.append(found)
            return cls(stores, notes)
        if state in (AUTO, EXISTING):
            folders = sorted({r for r in roots if os.path.isdir(r)})
            places = [(default_path(r), r) for r in folders] + elsewhere
            places = [(whole, base) for whole, base in places if state == AUTO or any_split(whole, shard)]
        else:
            places = [(os.path.abspath(state), "")]
        try:
            for whole, base in places:
                path = sharded_path(whole, shard)
                new_dir = not os.path.isdir(os.path.dirname(path))
                new = state == AUTO and not os.path.lexists(path)
                store, note = StateStore.open(path, base, explicit=state not in (AUTO, EXISTING))
                if note:
                    notes.append(note)
                if store is not None:
                    store.created, store.made_dir = new, new and new_dir
                    stores.append(store)
                    attach_splits(store, whole, shard)
        except BaseException:
            for store in stores:
                store.close()
            raise
        return cls(stores, notes)

    def store_for(self, folder: str) -> StateStore | None:
        """The nearest store covering ``folder``; ``None`` when there is none or it was given up
        (its folders are then read as with ``--no-state``)."""
        store = next((s for s in self.stores if s.covers(folder)), None)
        return store if store is not None and store.alive else None

    def recorded_files(self, roots: list[str]) -> int | None:
        """The files the last scans recorded under ``roots``, when every root is a folder with a
        store that has a record (else ``None``: the count is not known)."""
        total = 0
        for root in roots:
            store = self.store_for(root) if os.path.isdir(root) else None
            count = store.recorded_files() if store is not None and store.base == root else None
            if count is None:
                return None
            total += count
        return total

    def close(self) -> None:
        for store in self.stores:
            store.close()


@dataclass(slots=True)
class FolderPlan:
    """What to do with one folder's files."""

    sigs: dict[str, Sig] = field(default_factory=dict)  # path -> stat before reading
    reused: list[Outcome] = field(default_factory=list)
    to_read: list[tuple[str, bool]] = field(default_factory=list)  # (path, deep)
    gone: list[str] = field(default_factory=list)  # names recorded here that are no longer listed
    digest: str | None = None  # the listing's digest, when every file is settled (not racy)
    #: path -> the xxh3 of its last deep read, for the files read deep again though unchanged
    #: since: their bytes must hash the same (``bit-rot``)
    recorded: dict[str, str] = field(default_factory=dict)


def plan_folder(
    store: StateStore,
    folder: str,
    files: list[str],
    *,
    deep: bool,
    deep_changed: bool,
    chosen: set[str],
    whole: bool = True,
    listed: Sequence[ObjectInfo] | None = None,
) -> tuple[FolderPlan, str | None]:
    """The folder's plan, or (with ``whole``) its recorded result as JSON text when nothing in
    it needs reading. Dataset scans pass ``whole=False``: they need each file's facts.

    Each file's signature comes from its store: a ``stat`` of a local file (which a write
    within the clock tick of the record can leave equal: ``racy``), or, for a folder of a store
    with server versions, the ``listed`` facts of its listing, with no request at all. The loop
    up to the folder lookup is the whole cost of a rescan of an unchanged folder, so it keeps
    to one ``stat`` per file and builds no per-file objects.
    """
    cut = len(inside(folder))
    sigs: list[Sig | None] = []
    numbers = array("Q")
    settled = True
    if listed is not None:
        sigs = [sig_of_info(info) for info in listed]
        for sig in sigs:
            numbers.extend(sig)  # type: ignore[arg-type]
    else:
        # one stat a file, by name in the open folder (no path walk a file), kept as it came:
        # the signatures are built only when the folder's record does not settle it (a rescan of
        # an unchanged folder builds none); the loops are comprehensions, the checks run over
        # the packed numbers at once: this is the whole per-file cost of such a rescan
        cut_names = [p[cut:] for p in files]
        stats = _stats(folder, files, cut_names)
        if None in stats:
            settled = False  # gone or unreadable: the read reports it
        else:
            values: list[int] = []
            for st in stats:
                values += (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)  # type: ignore[union-attr]
            clock = store.clock_ns
            if values and (max(values[1::4]) >= clock or max(values[2::4]) >= clock):  # StateStore.is_racy
                settled = False
            else:
                try:
                    numbers = array("Q", values)
                except OverflowError:  # a time before 1970: no digest, the files are still compared one by one
                    settled = False
    digest = None
    if settled:
        import xxhash

        listing = "\0".join(cut_names if listed is None else (p[cut:] for p in files))
        digest = xxhash.xxh3_128_hexdigest(listing.encode("utf-8", "surrogateescape") + b"\0" + numbers.tobytes())
        if whole and not deep and not chosen:
            result = store.folder_result(folder, digest)
            if result is not None:
                return FolderPlan(digest=digest), result
    if listed is None:
        sigs = [None if st is None else sig_of(st) for st in stats]
    return plan_rows(store, folder, files, sigs, digest, deep=deep, deep_changed=deep_changed, chosen=chosen), None


def _stats(folder: str, files: list[str], names: list[str]) -> list[os.stat_result | None]:
    """Each file's ``stat`` (``None``: gone or unreadable), by name in the open folder where the
    platform allows (no path walk a file), else by path."""
    fd = None
    if os.stat in os.supports_dir_fd:
        with contextlib.suppress(OSError):
            fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    stat = os.stat
    try:
        if fd is None:
            return [_stat_or_none(p) for p in files]
        try:
            return [stat(name, dir_fd=fd) for name in names]
        except OSError:  # one file gone or unreadable: each one on its own
            return [_stat_or_none(name, fd) for name in names]
    finally:
        if fd is not None:
            os.close(fd)


def _stat_or_none(path: str, fd: int | None = None) -> os.stat_result | None:
    try:
        return os.stat(path, dir_fd=fd)
    except OSError:
        return None


def plan_rows(
    store: StateStore,
    folder: str,
    files: list[str],
    sigs: list[Sig | None],
    digest: str | None,
    *,
    deep: bool,
    deep_changed: bool,
    chosen: set[str],
) -> FolderPlan:
    """The file-by-file half of a folder's plan, from each file's signature (``None``: it could
    not be had, the read reports why)."""
    cut = len(inside(folder))
    plan = FolderPlan(digest=digest)
    rows = store.rows(folder)
    for path, sig in zip(files, sigs, strict=False):
        name = path[cut:]
        row: Row | None = rows.pop(name, None)
        if sig is not None:
            plan.sigs[path] = sig
        unchanged = row is not None and sig is not None and row.sig == sig and not row.racy
        read_deep = deep or name in chosen or (deep_changed and not unchanged)
        outcome = None
        if unchanged and not read_deep and row is not None and sig is not None:
            outcome = outcome_from_text(path, sig.size, sig.mtime_ns, row.outcome)
        if outcome is not None:
            plan.reused.append(outcome)
        else:
            plan.to_read.append((path, read_deep))
            if read_deep and unchanged and row is not None and row.xxh3:
                plan.recorded[path] = row.xxh3
    plan.gone = list(rows)
    return plan


def folder_result(
    outcomes_read: int,
    skipped: int,
    nbytes: int,
    formats: Counter,
    findings: list[Finding],
    folder: str,
    shapes: Counter[tuple[int, int]] | None = None,
) -> str:
    """A settled folder's result as recorded: what its stats and findings add to a scan, and
    its latents per (H, W) when the scan counted them (rank-imbalance without a dataset)."""
    result = {
        "r": outcomes_read,
        "k": skipped,
        "b": nbytes,
        "fmt": dict(formats),
        "f": [finding_to_json(f, folder) for f in findings],
    }
    if shapes is not None:
        result["hw"] = [[h, w, n] for (h, w), n in shapes.items()]
    return json.dumps(result, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class FolderResult:
    read: int
    skipped: int
    bytes: int
    formats: dict[str, int]
    findings: list[Finding]
    shapes: dict[tuple[int, int], int] | None = None  # latent (H, W) -> files, where recorded


def decode_result(text: str, folder: str) -> FolderResult | None:
    try:
        d = json.loads(text)
        return FolderResult(
            int(d["r"]),
            int(d["k"]),
            int(d["b"]),
            {str(k): int(v) for k, v in d["fmt"].items()},
            [finding_from_json(f, folder) for f in d["f"]],
            _shapes(d["hw"]) if "hw" in d else None,
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _shapes(rows: list[list[int]]) -> dict[tuple[int, int], int]:
    """A recorded ``hw`` list; a count below 1 or a size below 1 (a tampered row) does not decode."""
    out = {(int(h), int(w)): int(n) for h, w, n in rows}
    if any(n < 1 or h < 1 or w < 1 for (h, w), n in out.items()):
        raise ValueError("bad latent shape counts")
    return out


__all__ = [
    "AUTO",
    "EXISTING",
    "NO_STATE",
    "READ_ONLY",
    "FolderPlan",
    "FolderResult",
    "StateSet",
    "decode_result",
    "folder_result",
    "plan_folder",
    "plan_rows",
]
