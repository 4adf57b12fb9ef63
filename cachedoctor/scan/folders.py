"""The parent's side of a scan: outcomes in, findings and statistics out, one folder at a time.

A folder's peer checks run as soon as its last chunk is back, and, with a state database, its
fresh reads are recorded then too (with the folder's whole result when every file in it is
settled), so nothing is held beyond the folders still in flight.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from cachedoctor.checks import PEER_CHECKS, Found, PeerEntry, PeerGroup
from cachedoctor.checks.bit_rot import BitRot
from cachedoctor.findings import Finding
from cachedoctor.layouts.samplers.census import latent_hw
from cachedoctor.scan.dataset import DatasetMatcher
from cachedoctor.scan.outcome import Outcome
from cachedoctor.scan.state.codec import outcome_to_text
from cachedoctor.scan.state.plan import decode_result, folder_result
from cachedoctor.scan.state.store import Sig, StateStore, Upsert

Progress = Callable[[int, int], None]  # (files done, bytes done)
BIT_ROT = BitRot()


@dataclass(slots=True)
class ScanStats:
    files_seen: int = 0
    files_read: int = 0
    files_skipped: int = 0
    bytes_read: int = 0
    folders: int = 0
    formats: Counter = field(default_factory=Counter)
    files_reused: int = 0  # unchanged since the state's record: not read again
    files_deep: int = 0  # read deep (or tried to: a torn file counts) by this scan
    io_bytes: int = 0  # what the readers took from the files (headers when quick, whole files when deep)
    reused_skipped: int = 0  # of ``files_reused``, foreign files (not cache files)
    files_dataset: int = 0  # the dataset's own files beside the cache (images, captions): not cache files


@dataclass(frozen=True, slots=True)
class ScanError:
    path: str
    message: str


class _FolderState:
    __slots__ = ("path", "pending", "groups", "found", "findings", "record", "shapes")

    def __init__(self, path: str, pending: int, record: Record | None = None) -> None:
        self.path = path
        self.pending = pending
        self.groups: dict[str, list[PeerEntry]] = defaultdict(list)
        self.found: dict[str, Found] = {}
        self.findings: list[Finding] = []  # dataset scans: held until the folder's sources are known
        self.shapes: Counter[tuple[int, int]] = Counter()  # latent (H, W) counts (rank-imbalance)
        self.record = record


class Record:
    """What the state database gets for a folder once its last chunk is in."""

    __slots__ = (
        "store",
        "sigs",
        "deep",
        "gone",
        "digest",
        "recorded",
        "fresh",
        "read",
        "skipped",
        "bytes",
        "formats",
        "settled",
        "remote",
    )

    def __init__(
        self,
        store: StateStore,
        sigs: dict[str, Sig],
        deep: set[str],
        gone: list[str],
        digest: str | None,
        recorded: dict[str, str] | None = None,
    ) -> None:
        self.store, self.sigs, self.deep, self.gone, self.digest = store, sigs, deep, gone, digest
        self.recorded = recorded or {}  # unchanged files read deep again -> their last deep read's xxh3
        self.fresh: list[Upsert] = []
        self.read = self.skipped = self.bytes = 0
        self.formats: Counter = Counter()
        self.settled = digest is not None
        self.remote = False  # an object store's folder: its signatures are never racy (``state.store.sig_of_info``)


def _compare_digest(o: Outcome, recorded: str) -> Outcome:
    """A deep read of a file unchanged since its last one, with ``bit-rot`` added when its bytes
    no longer hash (or parse) as they did; the finding stays in the outcome the state keeps, so
    quick rescans report it too."""
    if o.transient or o.status == "error":
        return o  # a timeout says nothing about the bytes; an I/O error is reported as one
    unreadable = o.xxh3 is None and not o.deep
    finding = BIT_ROT.judge(o.path, recorded, o.xxh3, unreadable=unreadable)
    if finding is None:
        return o
    return replace(o, status="read", findings=(*o.findings, finding))


class Collector:
    """Gathers outcomes in the parent; runs a folder's peer checks when its last chunk is in."""

    def __init__(self, progress: Progress | None, matcher: DatasetMatcher | None = None) -> None:
        self.progress = progress
        self.matcher = matcher
        self.stats = ScanStats()
        self.findings: list[Finding] = []
        self.errors: list[ScanError] = []
        self.special: list[tuple[str, str]] = []  # (path, "FIFO"...): skipped unopened
        self.folders: dict[int, _FolderState] = {}
        self._next_id = 0
        self.unchecked: set[str] = set()  # watched folders nothing under which was checked yet
        #: latent (H, W) -> files, when the run's buckets come from the scan (no dataset known)
        self.shapes: Counter[tuple[int, int]] | None = None

    def watch(self, folders: list[str]) -> None:
        self.unchecked = set(folders)

    def checked(self, path: str) -> None:
        """Something under ``path`` was checked: the watched folders holding it are not empty."""
        if self.unchecked:
            self.unchecked = {
                w for w in self.unchecked if not (path == w or path.startswith(w.rstrip(os.sep) + os.sep))
            }

    def open_folder(self, path: str, chunks: int, record: Record | None = None) -> int:
        self._next_id += 1
        self.folders[self._next_id] = _FolderState(path, chunks, record)
        self.stats.folders += 1
        return self._next_id

    def reuse_folder(self, path: str, text: str) -> bool:
        """Take an unchanged folder's recorded result (a cache-only scan); ``False`` if it does not
        decode, or if this scan counts latent shapes (the rank simulation of a cache without its
        dataset) and the result was recorded without them: the folder's files are then taken one
        by one from their rows, whose peer records hold the shapes."""
        result = decode_result(text, path)
        if result is None or (self.shapes is not None and result.shapes is None and result.read):
            return False
        stats = self.stats
        stats.folders += 1
        stats.files_seen += result.read + result.skipped
        stats.files_read += result.read
        if result.read or result.findings:
            self.checked(path)
        stats.files_reused += result.read + result.skipped
        stats.reused_skipped += result.skipped
        stats.files_skipped += result.skipped
        stats.bytes_read += result.bytes
        stats.formats.update(result.formats)
        self.findings.extend(result.findings)
        if self.shapes is not None and result.shapes is not None:
            self.shapes.update(result.shapes)
        if self.progress is not None:
            self.progress(stats.files_seen, stats.bytes_read)
        return True

    def add(self, folder_id: int, outcomes: list[Outcome], fresh: bool = True) -> None:
        state = self.folders[folder_id]
        stats = self.stats
        matcher = self.matcher
        record = state.record
        read_before = stats.files_read
        for o in outcomes:
            if record is not None and fresh and o.path in record.recorded:
                o = _compare_digest(o, record.recorded[o.path])
            stats.files_seen += 1
            stats.io_bytes += o.io_bytes
            if matcher is not None and not o.broken_link:  # a link to nothing: its entry is missing
                state.found[o.path] = Found(o.path, o.mtime_ns, o.shapes, o.values)
            if record is not None:
                self._remember(record, o, fresh)
            if not fresh:
                stats.files_reused += 1
            if o.status == "error":
                self.errors.append(ScanError(o.path, o.error or "unreadable"))
                continue
            if o.status == "skipped":
                stats.files_skipped += 1
                if not fresh:
                    stats.reused_skipped += 1
                if o.special is not None:
                    self.special.append((o.path, o.special))
                continue
            stats.files_read += 1
            stats.bytes_read += o.size
            if o.format:
                stats.formats[o.format] += 1
            (state.findings if matcher is not None or record is not None else self.findings).extend(o.findings)
            if o.group is not None and o.peer is not None:
                state.groups[o.group].append(o.peer)
                if self.shapes is not None:
                    hw = latent_hw((t.key, t.shape) for t in o.peer.tensors)
                    if hw is not None:
                        state.shapes[hw] += 1
        if self.unchecked and stats.files_read > read_before:
            self.checked(state.path)
        state.pending -= 1
        if state.pending == 0:
            self._close(self.folders.pop(folder_id))
        if self.progress is not None:
            self.progress(stats.files_seen, stats.bytes_read)

    @staticmethod
    def _remember(record: Record, o: Outcome, fresh: bool) -> None:
        if o.status == "error":
            record.settled = False
            return
        if o.status == "skipped":
            record.skipped += 1
        else:
            record.read += 1
            record.bytes += o.size
            if o.format:
                record.formats[o.format] += 1
        sig = record.sigs.get(o.path)
        if o.transient:
            record.settled = False  # read again next time: a timeout says little about the file
            return
        if fresh and sig is not None:
            deep_scan = record.store.scan_id if o.path in record.deep else None
            xxh3 = o.xxh3
            if any(f.kind == BIT_ROT.kind for f in o.findings):  # keep the good digest: every deep read says it again
                xxh3 = record.recorded.get(o.path, xxh3)
            record.fresh.append(
                Upsert(
                    os.path.basename(o.path),
                    sig,
                    not record.remote and record.store.is_racy(sig.mtime_ns, sig.ctime_ns),
                    deep_scan,
                    xxh3,
                    outcome_to_text(o),
                )
            )

    def skip_special(self, entries: list[tuple[str, str]]) -> None:
        """FIFOs, sockets and devices under a cache name: counted as skipped, never opened."""
        self.stats.files_seen += len(entries)
        self.stats.files_skipped += len(entries)
        self.special.extend(entries)

    def kept(self, files: list[str], keep: Callable[[str], bool] | None) -> list[str]:
        """A folder's files less those ``keep`` rejects (a dataset's own images and captions),
        which count as seen and as dataset files, not as skipped: "skipped" is for what might be
        a cache file and was not read (kohya keeps 78 images and captions beside its latents, and
        "78 skipped" read as 78 latents left unchecked). Local and remote folders alike."""
        if keep is None:
            return files
        kept = [f for f in files if keep(f)]
        self.stats.files_seen += len(files) - len(kept)
        self.stats.files_dataset += len(files) - len(kept)
        return kept

    def close_empty(self, path: str) -> None:
        """A folder with no cache files at all: every entry expected in it is missing."""
        if self.matcher is not None:
            self.matcher.close_folder(path, {}, [])

    def _close(self, state: _FolderState) -> None:
        found = state.findings
        for entries in state.groups.values():
            if len(entries) < 2:
                continue
            group = PeerGroup(state.path, tuple(entries))
            for check in PEER_CHECKS:
                found.extend(check.check_peers(group))
        record = state.record
        if record is not None:
            record.store.cache_files += record.read
            result = None
            if record.settled:
                shapes = state.shapes if self.shapes is not None else None
                result = folder_result(
                    record.read, record.skipped, record.bytes, record.formats, found, state.path, shapes
                )
            record.store.save(state.path, record.fresh, record.gone, record.digest if record.settled else None, result)
        if self.matcher is not None:
            found = self.matcher.close_folder(state.path, state.found, found)
        self.findings.extend(found)
        if self.shapes is not None:
            self.shapes.update(state.shapes)
