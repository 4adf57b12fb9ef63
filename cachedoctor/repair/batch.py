"""Lossless rewrites a folder batch at a time: the same durable steps as ``replace.py``, with
the fsyncs that durability allows shared by the batch.

Per file, under its lock (held until the batch is over): the file is opened once, its stat
checked against the plan on that descriptor and its bytes read once; the new bytes are made
from them (``lossless.py``: the restricted reader's verdict on those bytes, then ``torch.load``),
written to a temp file beside it, judged in memory by the scan's own checks (``verify.py``: a
file the scan would reject is removed and the old one stays), and the old file is hard-linked
into the quarantine. Then, per batch of up to :data:`BATCH` files of one
folder:

1. every temp file is fsynced (on threads of their own, while the next file's bytes are made:
   the waits for the disk overlap the CPU work, and fsyncs in flight together share the file
   system's journal commits; all of them end before step 3);
2. the quarantine folder is fsynced: every kept copy is durable before any rename;
3. each temp file is renamed over its target, and the cache folder fsynced once;
4. the batch's results go to the journal in one transaction (``Journal.record_many``).

So each file still has its new bytes durable before they replace the old ones, and the old
bytes durable in the quarantine before that; what a batch shares is the folder fsyncs and the
journal's commit. A kill (or power cut) between 3 and 4 leaves files replaced whose journal
rows still say ``planned``: the next run scans afresh, finds them healthy and plans nothing for
them, and their old bytes are in the run's quarantine (``tests/crash``, point ``before-record``).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from cachedoctor.atomic import TEMP_SUFFIX, fsync_dir, temp_prefix_for
from cachedoctor.faults import could_not_write
from cachedoctor.file_locks import held
from cachedoctor.repair.model import Action, ActionKind, ItemResult, ItemState, RepairError, Stat
from cachedoctor.repair.quarantine import Quarantine
from cachedoctor.repair.replace import crash_point, failed
from cachedoctor.repair.verify import unfit_line

#: Files per batch: the crash window of step 4 and the locks held at once stay small, the
#: folder fsyncs (two per batch) a rounding error.
BATCH = 64

#: Threads that fsync the temp files. One fsync at a time waits for a journal commit of its own
#: (ext4: 1-5 ms each on a busy disk); fsyncs in flight together are made durable by one commit
#: (measured on ext4: 64 files of 130 KB fsynced one after another 3.5-6 ms a file, 8 at once
#: 0.2-0.35 ms a file). Each file is still fsynced on its own before any rename.
SYNC_THREADS = 8


@dataclass(slots=True)
class _Written:
    action: Action
    temp: str
    made: os.stat_result  # the temp file's fstat once written
    kept: str | None = None
    synced: Future[None] | None = None  # its fsync, on a syncer thread


class Batcher:
    """Lossless rewrites, prepared as they come (in plan order, between the other actions) and
    made durable a batch at a time: when the folder changes, when :data:`BATCH` files are
    pending, and at the end (``with``). ``record`` gets each batch's results once they are
    durable. ``make_bytes(action, old_bytes, path)`` (the old file's bytes, read once) raises
    :class:`NotRewritable`; ``judge(action, temp, data)`` says what the scan would find wrong
    with the new file (``data``: its bytes, still in memory); ``placed(path, made)`` hears of
    each file put in place (``made``: its temp file's ``fstat`` once written). A full disk raises
    :class:`RepairError` after the batch's finished files are put in place and recorded; any
    other exception (Ctrl-C) removes the batch's temp files and leaves its old files in place."""

    def __init__(
        self,
        run_id: str,
        record: Callable[[list[ItemResult]], None],
        make_bytes: Callable[[Action, bytes, str], bytes],
        judge: Callable[[Action, str, bytes], str | None],
        size: int = BATCH,
        placed: Callable[[str, os.stat_result], None] | None = None,
    ) -> None:
        self.run_id = run_id
        self.record = record
        self.make_bytes = make_bytes
        self.judge = judge
        self.size = size
        self.placed = placed
        self.quarantines: dict[str, Quarantine] = {}
        self.folder: str | None = None
        self.locks = contextlib.ExitStack()
        self.results: list[ItemResult] = []
        self.written: list[_Written] = []
        # Threads fsync each temp file while this one makes the next file's bytes: the wait for
        # the disk overlaps the CPU work, and the fsyncs share commits (every fsync still ends
        # before any rename).
        self.syncer = ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="cachedoctor-fsync")

    def __enter__(self) -> Batcher:
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        try:
            if kind is None:
                self.flush()
            else:
                self._drop()
        finally:
            self.syncer.shutdown(wait=True)

    def add(self, action: Action) -> None:
        folder = os.path.dirname(action.path)
        if folder != self.folder:
            self.flush()
            self.folder = folder
        quarantine = self.quarantines.get(action.root)
        if quarantine is None:
            quarantine = self.quarantines[action.root] = Quarantine(action.root, self.run_id)
        self.locks.enter_context(held(action.path, before_wait=self.flush))  # never wait holding locks
        try:
            item = _prepare(action, quarantine, self.make_bytes, self.judge)
        except RepairError:  # a full disk: what is written is finished, then the run stops
            self.flush()
            raise
        if isinstance(item, ItemResult):
            self.results.append(item)
        else:
            item.synced = self.syncer.submit(_fsync, item.temp)
            self.written.append(item)
        if len(self.results) + len(self.written) >= self.size:
            self.flush()

    def flush(self) -> None:
        """Steps 1-4 of the module's docstring for the pending files, then their locks go."""
        if not self.results and not self.written:
            return
        stop: RepairError | None = None
        try:
            try:
                _durable(self.written, list(self.quarantines.values()), self.placed)
            except OSError as exc:  # what is renamed is done; the rest stays as it was
                folder = os.path.dirname(self.written[0].action.path)
                then = "run the same `cachedoctor repair` again: it resumes"
                stop = RepairError(folder, could_not_write(exc, folder, "the rewritten files", then))
            done = [w for w in self.written if w.temp == w.action.path]
            self.written = [w for w in self.written if w.temp != w.action.path]
            results = self.results + [
                ItemResult(
                    w.action.path,
                    w.action.kind,
                    ItemState.VERIFIED,
                    "written and checked",
                    w.kept,
                    w.action.bytes,
                    w.made.st_size,
                )
                for w in done
            ]
            self.results = []
            crash_point("before-record")
            self.record(results)
        finally:
            self._drop()
        if stop is not None:
            raise stop

    def _drop(self) -> None:
        """Remove the temp files not renamed (the old files stay in place) and release the locks."""
        for w in self.written:
            if w.synced is not None:
                with contextlib.suppress(OSError):
                    w.synced.result()
            with contextlib.suppress(OSError):
                os.unlink(w.temp)
        self.written, self.results = [], []
        self.locks.close()


def _durable(
    written: list[_Written], quarantines: list[Quarantine], placed: Callable[[str, os.stat_result], None] | None
) -> None:
    """Steps 1-3 of the module's docstring for the files of one batch."""
    if not written:
        return
    for w in written:
        if w.synced is not None:
            w.synced.result()  # (its OSError, if the fsync failed)
        else:
            _fsync(w.temp)
    for folder in sorted({os.path.dirname(w.kept) for w in written if w.kept}):
        fsync_dir(folder)
    for quarantine in quarantines:
        quarantine.write_records()
    for w in written:
        crash_point("before-replace")
        os.replace(w.temp, w.action.path)
        w.temp = w.action.path  # (renamed: nothing to remove on the way out)
        if placed is not None:
            placed(w.action.path, w.made)
        crash_point("after-replace")
    fsync_dir(os.path.dirname(written[0].action.path))


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _prepare(
    action: Action,
    quarantine: Quarantine,
    make_bytes: Callable[[Action, bytes, str], bytes],
    judge: Callable[[Action, str, bytes], str | None],
) -> _Written | ItemResult:
    """One file up to its kept copy: a result when it ends here (skipped, blocked, failed)."""
    path = action.path
    temp: str | None = None
    try:
        with _opened(path) as (fd, st):
            if st is None:
                return ItemResult(
                    path, action.kind, ItemState.SKIPPED, "gone since the scan (moved by another process)"
                )
            if Stat(st.st_size, st.st_mtime_ns, st.st_ino) != action.before:
                return ItemResult(
                    path, action.kind, ItemState.SKIPPED, "changed since the scan; left for the final scan to judge"
                )
            data = make_bytes(action, _read_all(fd, st.st_size), path)
        temp, made = _write_temp(path, data, st.st_mode & 0o7777)
        problem = judge(action, temp, data)
        if problem:
            return ItemResult(path, action.kind, ItemState.FAILED, unfit_line(problem))
        crash_point("before-keep")
        kept = quarantine.keep(path, action.reasons, action.kind.value, sync=False)
        written, temp = _Written(action, temp, made, kept), None
        return written
    except RepairError:
        raise
    except Exception as exc:  # one bad file must not stop the run
        return failed(path, action, exc)
    finally:
        if temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(temp)


@contextlib.contextmanager
def _opened(path: str) -> Iterator[tuple[int, os.stat_result | None]]:
    """The file opened once, and its stat taken on that descriptor (so the bytes read are the
    ones the stat describes); ``(-1, None)`` when nothing is there."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        yield -1, None
        return
    try:
        yield fd, os.fstat(fd)
    finally:
        os.close(fd)


def _read_all(fd: int, size: int) -> bytes:
    chunks: list[bytes] = []
    got = 0
    while True:
        chunk = os.read(fd, max(size - got, 0) + 1)  # one read, and one more to see the end
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        got += len(chunk)


def _write_temp(path: str, data: bytes, mode: int) -> tuple[str, os.stat_result]:
    """``data`` in a new ``.cachedoctor-<name>-XXXXXXXX.tmp`` beside ``path`` with ``path``'s
    mode, not yet fsynced (the batch fsyncs its temp files together); and its ``fstat`` once
    written."""
    fd, temp = tempfile.mkstemp(prefix=temp_prefix_for(path), suffix=TEMP_SUFFIX, dir=os.path.dirname(path))
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as out:  # (what every write of cache content goes through)
            out.write(data)
            crash_point("mid-write")
            out.flush()
            made = os.fstat(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    return temp, made


def lossless_bytes(action: Action, old: bytes, path: str) -> bytes:
    """The new bytes of a ``rewrite-cpu`` or ``clone-storage`` action from the old file's bytes."""
    from cachedoctor.repair.lossless import rewrite_from

    return rewrite_from(path, old, action.kind is ActionKind.CLONE_STORAGE)


__all__ = ["BATCH", "Batcher", "lossless_bytes"]
