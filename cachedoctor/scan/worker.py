"""The per-file pipeline that runs inside scan workers: name rules, read, file checks.

Returns small picklable outcomes: the findings, a compact peer record for the folder-level
checks, or an error that makes the scan incomplete (exit 2).
"""

from __future__ import annotations

import errno
import gc
import os
from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache

from cachedoctor import keynames
from cachedoctor.checks import FILE_CHECKS, Inspected, PeerEntry, PeerTensor, is_temp_name
from cachedoctor.findings import Finding
from cachedoctor.formats import (
    MAPPED_FROM,
    FileMeta,
    ReadError,
    Tally,
    UnreadableFile,
    claims_cache,
    read_bytes,
    read_file,
)
from cachedoctor.lifetime import reraise_interrupt
from cachedoctor.scan._memcap import cap_error, capped, died_error, over_cap, release
from cachedoctor.scan.outcome import Outcome
from cachedoctor.scan.watchdog import FileTimeout, file_timer, mark

#: Read errors that, under a name that does not claim a cache format, mean "not ours".
_FOREIGN_PROBLEMS = frozenset({"empty", "unknown-format", "not-torch", "legacy-tar"})
_QUICK_CHECKS = tuple(check for check in FILE_CHECKS if not check.deep_only)


def inspect_path(path: str, *, deep: bool, entry_facts: bool = False, digest: bool = False) -> Outcome:
    """Everything a scan learns about one file on its own; with ``entry_facts``, also what the
    dataset comparison needs (the file's mtime, its tensors' raw shapes, tiny values); with
    ``digest`` and ``deep``, the file's xxh3 for the state database.

    The digest is the one the deep read already took of the bytes it had in memory
    (``FileMeta.digest``): hashing the file again would read every deep-scanned byte twice.
    """
    mtime = 0
    if entry_facts:
        try:
            mtime = os.stat(path).st_mtime_ns
        except OSError:
            pass
    return _inspect(path, deep, mtime if entry_facts else None, digest)


def inspect_file(path: str, *, deep: bool = True, unsaved: bool = False) -> Outcome:
    """One file judged on its own, as a scan would (with its tensors' shapes): the narrow public
    entry for callers outside the scan, such as repair checking what it is about to put in
    place. ``unsaved``: ``path`` is a temp file of cachedoctor's own, judged by its content as
    the file it will be renamed to (its name is not a ``partial-write``)."""
    mtime = 0
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        pass
    return _alarmed(path, lambda: _inspect(path, deep, mtime, temp_ok=unsaved))


#: ``--file-timeout``'s default, for the reads made outside a scan's workers (repair's verify
#: and peer reads): there the alarm alone bounds them, in the caller's main thread.
ALONE_TIMEOUT = 10.0


def _alarmed(path: str, read: Callable[[], Outcome]) -> Outcome:
    """``read()`` under the per-file alarm (``watchdog.file_timer``; only in the main thread): a
    read that burns the CPU past :data:`ALONE_TIMEOUT` is the file's ``read-timeout``. What the
    alarm cannot reach (a C call) and memory are bounded only in a scan's workers."""
    with file_timer(ALONE_TIMEOUT) as arm:
        try:
            arm(True)
            outcome = read()
            arm(False)
        except FileTimeout:
            outcome = timed_out(path, ALONE_TIMEOUT)
    return outcome


def _inspect(path: str, deep: bool, mtime: int | None, digest: bool = False, temp_ok: bool = False) -> Outcome:
    if not temp_ok and is_temp_name(path):
        if not os.path.lexists(path):  # its writer renamed it since the listing: nothing is left over
            return Outcome(path, 0, "skipped", mtime_ns=mtime or 0)
        return _judge(Inspected(path, _size(path), temp=True), None, mtime)
    tally = Tally()
    try:
        meta = _read(path, deep, tally, digest)
    except UnreadableFile as exc:
        if exc.problem == "special-file":  # a FIFO or socket where the listing saw a file: not read
            kind = str(exc.details.get("type", "special file"))
            return Outcome(path, 0, "skipped", mtime_ns=mtime or 0, special=kind, transient=True)
        if os.path.islink(path) and not os.path.exists(path):  # dangling, or a loop
            return _broken_link(path, mtime)
        if not os.path.lexists(path):  # removed or renamed since the listing (a writer or a repair at work)
            return Outcome(path, 0, "skipped", mtime_ns=mtime or 0)
        return Outcome(path, 0, "error", error=exc.message, mtime_ns=mtime or 0, io_bytes=tally.taken)
    except ReadError as exc:
        return _judged_error(path, _capped(exc), _size(path), mtime, tally.taken)
    except MemoryError as exc:  # past the memory cap outside the readers' own handlers
        return _judged_error(path, _capped(exc), _size(path), mtime, tally.taken)
    except Exception as exc:  # a reader bug must not stop a scan of a million files
        reraise_interrupt(exc)
        return _reader_bug(path, exc, _size(path), mtime, tally.taken)
    return _judged(path, meta, _size, mtime, digest, tally.taken)


def _capped(exc: ReadError | MemoryError) -> ReadError:
    """In a reader process under a memory cap (``_memcap.py``), a read that ran out of memory is
    the fail-closed verdict on a file that cannot be shown safe within the cap; elsewhere the
    readers' own ``too-large``."""
    limit = capped()
    if limit is not None and over_cap(exc):
        release()
        return cap_error(limit)
    if isinstance(exc, MemoryError):
        return ReadError("too-large", "file structure asks for more memory than is available")
    return exc


def inspect_bytes(path: str, data: bytes) -> Outcome:
    """:func:`inspect_file` (deep, ``unsaved``) of ``data`` as the file at ``path``: repair
    judges the bytes it is about to put in place without writing and reading them back."""
    return _alarmed(path, lambda: _inspect_bytes(path, data))


def _inspect_bytes(path: str, data: bytes) -> Outcome:
    try:
        meta = read_bytes(path, data, deep=True)
    except ReadError as exc:
        return _judged_error(path, exc, len(data), 0, len(data))
    except Exception as exc:  # a reader bug: the bytes are not vouched for
        reraise_interrupt(exc)
        return _reader_bug(path, exc, len(data), 0, len(data))
    return _judged(path, meta, lambda _: len(data), 0, False, len(data))


def _judged(
    path: str, meta: FileMeta | None, size_of: Callable[[str], int], mtime: int | None, digest: bool, io: int
) -> Outcome:
    """The outcome of a read that ended: ``meta``, or ``None`` for bytes no reader knows."""
    if meta is not None:
        return _judge(Inspected(path, meta.size, meta=meta), meta.format, mtime, digest, io=io)
    size = size_of(path)
    if not claims_cache(path):
        return Outcome(path, size, "skipped", mtime_ns=mtime or 0, io_bytes=io)
    error = ReadError("unknown-format", "not a torch.save, safetensors or npz file, though its name says so")
    return _judge(Inspected(path, size, error=error), None, mtime, io=io)


def _judged_error(path: str, exc: ReadError, size: int, mtime: int | None, io: int) -> Outcome:
    if exc.problem in _FOREIGN_PROBLEMS and not claims_cache(path):  # an empty file, a foreign zip or pickle
        return Outcome(path, size, "skipped", mtime_ns=mtime or 0, io_bytes=io)
    return _judge(Inspected(path, size, error=exc), None, mtime, io=io)


def _reader_bug(path: str, exc: Exception, size: int, mtime: int | None, io: int) -> Outcome:
    return Outcome(
        path,
        size,
        "error",
        mtime_ns=mtime or 0,
        error=f"internal error while reading ({type(exc).__name__}: {exc}); please report it",
        io_bytes=io,
    )


def _read(path: str, deep: bool, tally: Tally, digest: bool) -> FileMeta | None:
    """:func:`read_file`, except that a deep scan does not read whole a file under a foreign name
    that a quick read already calls foreign (a tar, a pickle, a zip of someone else's): there
    is nothing in it to check. (Files no reader claims at all ``read_file`` judges from their
    head itself, whatever their name.) The file's xxh3 is taken only with ``digest`` (the
    state database's): nothing else reads it."""
    if deep and not claims_cache(path):
        try:
            if read_file(path, deep=False, tally=tally) is None:
                return None
        except UnreadableFile:
            raise
        except ReadError as exc:
            if exc.problem in _FOREIGN_PROBLEMS:
                raise
    return read_file(path, deep=deep, tally=tally, digest=digest)


def _broken_link(path: str, mtime: int | None) -> Outcome:
    """A symlink under a cache name that leads nowhere: judged from the link alone."""
    try:
        target = os.readlink(path)
    except OSError:  # replaced since: the next scan judges what is there
        return Outcome(path, 0, "skipped", mtime_ns=mtime or 0, transient=True)
    try:
        os.stat(path)
        loop = False
    except OSError as exc:
        loop = exc.errno == errno.ELOOP
    outcome = _judge(Inspected(path, 0, link_target=target, link_loop=loop), None, mtime)
    return replace(outcome, broken_link=True, transient=True)


def _size(path: str) -> int:
    """The size for the statistics of a file that has no metadata (rare paths only)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _judge(item: Inspected, fmt: str | None, mtime: int | None, digest: bool = False, io: int = 0) -> Outcome:
    meta = item.meta
    deep = meta is not None and meta.deep
    xxh3 = meta.digest if digest and deep and meta is not None else None
    found: list[Finding] = []
    for check in FILE_CHECKS if deep else _QUICK_CHECKS:
        found.extend(check.check_file(item))
    findings = tuple(found)
    group, peer = peer_record(meta) if meta is not None and not meta.foreign_globals else (None, None)
    paired = meta if mtime is not None else None  # a dataset scan pairs the file's shapes and values
    return Outcome(
        item.path,
        item.size,
        "read",
        findings,
        group,
        peer,
        fmt,
        mtime_ns=mtime or 0,
        shapes=tuple((t.key, t.shape) for t in paired.tensors) if paired is not None else (),
        values=paired.values if paired is not None else (),
        deep=deep,
        xxh3=xxh3,
        io_bytes=io,
    )


def peer_record(meta: FileMeta) -> tuple[str | None, PeerEntry | None]:
    """The file's peer group key and its compact record for folder-level checks."""
    if not meta.tensors:
        return None, None
    tensors = _shared(tuple(_peer_tensor(t.key, t.dtype, t.shape) for t in meta.tensors))
    stats = tuple((keynames.family(t.key), t.stats) for t in meta.tensors if t.stats is not None)
    return _group_key(meta.format, meta.container, tuple(t.key for t in tensors)), PeerEntry(meta.path, tensors, stats)


@lru_cache(maxsize=4096)
def _group_key(fmt: str, container: str, keys: tuple[str, ...]) -> str:
    family = "torch" if fmt.startswith("torch") else fmt
    return f"{family}|{container}|{','.join(sorted(set(keys)))}"


@lru_cache(maxsize=4096)
def _shared(tensors: tuple[PeerTensor, ...]) -> tuple[PeerTensor, ...]:
    """The first equal peer-tensors tuple this worker made, as the one copy of it: a folder of
    a million files holds a handful, and files that share one object pickle it once per chunk
    (a memo reference after the first) and are rebuilt once in the parent."""
    return tensors


@lru_cache(maxsize=4096)
def _peer_tensor(key: str, dtype: str, shape: tuple[int, ...]) -> PeerTensor:
    """A tensor under its key's family (``latents_64x48`` -> ``latents_HxW``, ``latents_1x8x8_bfloat16``
    -> ``latents_FxHxW``): multi-resolution files, and files of another dtype, are peers of one
    another; the key itself is kept for messages."""
    family = keynames.family(key)
    return PeerTensor(family, dtype, shape, "" if family == key else key)


def inspect_chunk(
    items: list[tuple[str, bool]],
    facts: bool = False,
    digest: bool = False,
    timeout: float | None = None,
    slot: int | None = None,
) -> list[Outcome]:
    """Inspect ``(path, deep)`` items; ``facts`` for dataset scans and the state database.

    With ``timeout``, a file not judged in that many seconds is reported as ``read-timeout``;
    ``slot`` is where a pool worker tells the parent which file it is on (``watchdog.py``).
    """
    outcomes: list[Outcome] = []
    with file_timer(timeout) as arm:
        for index, (path, deep) in enumerate(items):
            try:
                if slot is not None:
                    mark(slot, index)
                arm(True)
                outcome = inspect_path(path, deep=deep, entry_facts=facts, digest=digest)
                arm(False)
            except FileTimeout:
                outcome = timed_out(path, timeout or 0.0)
            if deep and outcome.format is None and outcome.size > MAPPED_FROM:
                # A deep read that failed may leave its file's mapping to a traceback's cycle
                # (``formats._mapped``): hundreds of MB resident until the collector runs. Only
                # mapped (large) files: a collection costs 0.1 s in a process that holds torch.
                gc.collect()
            outcomes.append(outcome)
    if slot is not None:
        mark(slot, -1)
    return outcomes


def timed_out(path: str, seconds: float) -> Outcome:
    """The outcome of a file whose reader was stopped after ``seconds``."""
    error = ReadError(
        "timeout",
        f"not judged within {seconds:g} s (--file-timeout): its reader was stopped; "
        "the file defeats the readers' bounds or its storage stalls",
        seconds=seconds,
    )
    return replace(_judge(Inspected(path, _size(path), error=error), None, None), transient=True)


def died(path: str, limit: int | None) -> Outcome:
    """The outcome of a file whose reader process died on it twice, the second time alone
    (``pool.py``): not shown safe, so ``unsafe-pickle`` (``resource-bomb``); judged by
    circumstance, so read again by the next scan."""
    error = died_error(limit)
    return replace(_judge(Inspected(path, _size(path), error=error), None, None), transient=True)
