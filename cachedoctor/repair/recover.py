"""``cachedoctor recover``: what a crash left behind, and (with ``--apply``) the way back.

After a trainer or a repair dies mid-write, four things can be left: temp files of writes that
never reached their rename (the trainer's ``tmpXXXXXXXX`` or cachedoctor's own), files written
just before the crash that may be damaged, lock files still held (a writer is alive: hands
off), and a repair journal whose run never finished. ``survey`` finds them; applying quarantines
what is partial and resumes the interrupted repair through the same ``repair`` machinery.

"Written just before the crash" means written after the last healthy checkpoint. Where an
earlier scan left its state database, that is the checkpoint: every file whose stat differs
from the recorded one (or that is new) is read deep, in the same pass that finds the temp
files. Elsewhere it is the journal's last checkpoint when a repair was interrupted (files newer
than its last recorded item), or else the temp files: a folder holding one was being written
when its writer died, so all its files are read deep. Damage the last scan already recorded in a
file unchanged since is reported apart: it predates that scan, and the survey did not read it.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from cachedoctor.errors import PathError
from cachedoctor.findings import Finding
from cachedoctor.layouts import LayoutName, LayoutOptions, plan_for
from cachedoctor.progress import Progress
from cachedoctor.repair.journal import Interrupted, interrupted_run
from cachedoctor.scan import ScanOptions, scan
from cachedoctor.scan.state.plan import EXISTING
from cachedoctor.scan.state.store import default_path
from cachedoctor.scan.walk import is_under
from cachedoctor.statedir import STATE_DIR, clock_path, is_lock_name
from cachedoctor.stores.connect import files_here

if TYPE_CHECKING:
    from cachedoctor.sharding.interface import Shard
    from cachedoctor.stores.s3 import S3Settings

#: Finding kinds that a crash mid-write produces; ``--apply`` repairs these (or resumes a run).
CRASH_KINDS = frozenset({"partial-write", "corrupt-archive", "non-finite"})


def resumed_only(run: Interrupted | None) -> frozenset[str] | None:
    """The finding kinds ``recover --apply`` repairs: the interrupted run's own ``--only`` (it
    does no more than that run asked for), or the crash kinds when there is no run to resume or
    its journal predates recorded scopes."""
    if run is None or run.scope is None:
        return CRASH_KINDS
    return run.only


@dataclass
class DeepRead:
    """Files read deep because they were written around the crash, and the damaged among them."""

    since: str  # what "around the crash" was judged against, in words
    files: int  # read deep by the survey (or tried: a torn file counts)
    damaged: list[Finding] = field(default_factory=list)  # crash findings in those files


@dataclass
class Survey:
    layout_line: str | None
    temp_files: list[Finding] = field(default_factory=list)
    reads: list[DeepRead] = field(default_factory=list)
    #: Crash findings the last scan recorded in files unchanged since: damaged before that scan,
    #: not read again now (the state database vouches for them).
    known_damaged: list[Finding] = field(default_factory=list)
    held_locks: list[str] = field(default_factory=list)  # a live process holds these: a writer is active
    #: Remote lock objects whose holder is provably gone (a killed repair): ``--apply`` clears them.
    stale_locks: list[str] = field(default_factory=list)
    interrupted: list[tuple[str, Interrupted]] = field(default_factory=list)

    @property
    def damaged(self) -> list[Finding]:
        """Every crash finding the survey reports: in files it read deep, and recorded ones."""
        return [f for r in self.reads for f in r.damaged] + self.known_damaged

    @property
    def empty(self) -> bool:
        return not (self.temp_files or self.damaged or self.held_locks or self.stale_locks or self.interrupted)


def survey(
    targets: list[str],
    layout: LayoutName,
    options: LayoutOptions,
    scan_options: ScanOptions | None = None,
    allow_empty: bool = False,
    progress: Progress | None = None,
) -> Survey:
    """What a crash left under ``targets``. ``scan_options`` gives what the settings say of every
    scan (exclude, reader workers, file timeout); the survey chooses its own depth and state use.
    Targets with nothing to check (no cache file, no dataset entry, no interrupted repair, no
    held lock) raise :class:`PathError` unless ``allow_empty``, as ``scan`` would exit 2.
    ``progress(stage, done, total)`` follows its scans (:mod:`cachedoctor.progress`). With
    ``scan_options.shard`` the checkpoint is that shard's own state database
    (``state.shard-K-of-N.sqlite``), as its scan's is."""
    if not all(files_here(t) for t in targets):  # an object store: its lock object and journal
        return survey_store_targets(targets, scan_options)
    base = scan_options or ScanOptions()
    shard = base.shard
    plan, line = plan_for(layout, targets, options)
    if plan is not None and not all(files_here(r) for r in plan.roots):  # a dataset whose cache is in a bucket
        found = Survey(line)
        for url in (r for r in plan.roots if not files_here(r)):
            survey_store_targets([url], scan_options, plan.remote_settings.get(url), found)
        return found
    roots = plan.roots if plan is not None else targets
    folders = [r if os.path.isdir(r) else os.path.dirname(r) for r in roots]
    stateful = [f for f in folders if os.path.isdir(f) and _record_of(f, shard) is not None]
    # each scan moves its database's clock: what changed since the last one is dated by the old tick
    ticks = {f: _clock_ns(f, shard) for f in stateful}
    result = scan(
        roots, replace(base, deep=False, sample=None, state=EXISTING, deep_changed=True), progress, dataset=plan
    )
    out = Survey(line, temp_files=[f for f in result.findings if f.kind == "partial-write"])
    damaged = CRASH_KINDS - {"partial-write"}
    if stateful:  # the state's record is the checkpoint: what changed since was just read deep
        read = DeepRead("since the last scan (its state database)", result.stats.files_deep)
        for f in result.findings:
            root = next((s for s in stateful if is_under(f.path, s)), None)
            if f.kind in damaged and root is not None:
                (read.damaged if _changed_since(f.path, ticks[root]) else out.known_damaged).append(f)
        out.reads.append(read)
    for root in folders:
        run = interrupted_run(root)
        if run is not None:
            out.interrupted.append((root, run))
    rest = [f for f in folders if f not in stateful]
    checkpoint = max((run.last_update for r, run in out.interrupted if r in rest), default=None)
    temps = [f for f in out.temp_files if not any(is_under(f.path, s) for s in stateful)]
    suspects = _written_after(rest, checkpoint) if checkpoint else _beside_temps(temps)
    if suspects:
        deep = scan(sorted(suspects), replace(base, deep=True, sample=None, state=None, deep_changed=False), progress)
        since = "after the interrupted repair's last record" if checkpoint else "around the crash (beside a temp file)"
        out.reads.append(DeepRead(since, deep.stats.files_deep, [f for f in deep.findings if f.kind in damaged]))
    out.held_locks = _held_locks(folders)
    if result.empty and out.empty and not allow_empty:
        from cachedoctor.report.outcome import nothing_to_check

        others = result.stats.files_skipped + result.stats.files_dataset
        raise PathError(*nothing_to_check(result.targets, dataset=plan is not None, others=others))
    return out


def survey_store_targets(
    targets: list[str], options: ScanOptions | None, settings: S3Settings | None = None, out: Survey | None = None
) -> Survey:
    """``recover``'s survey of a prefix of a store without local paths (``store_flow.py``): its lock object and its interrupted run (remote
    writes are whole PUTs: no temp objects, no torn ones to read deep). ``settings``: a
    dataset's own for it; ``out``: a survey to add to (one per cache prefix of a dataset)."""
    from cachedoctor.repair.model import still_failing
    from cachedoctor.repair.prefix_lock import lock_url
    from cachedoctor.repair.store_flow import one_prefix, where
    from cachedoctor.repair.store_recover import survey_store
    from cachedoctor.stores.connect import store_for
    from cachedoctor.stores.interface import TransientError

    url = one_prefix(targets)
    store = store_for(url, settings or (options.s3 if options is not None else None))
    location = where(store, url)[0]
    try:
        found = survey_store(store, location)
    except TransientError as exc:  # the lock's HEAD or GET, still failing: one line
        raise still_failing(lock_url(location), exc) from None
    out = out if out is not None else Survey(None)
    if found.locked:
        (out.stale_locks if found.stale_lock else out.held_locks).append(lock_url(location))
    if found.interrupted is not None:
        out.interrupted.append((location.url, found.interrupted))
    return out


def _record_of(folder: str, shard: Shard | None) -> str | None:
    """The state database that is ``folder``'s checkpoint: the shard's own, else (the first run
    of a new split) the one another split left, which the scan reads its record from too."""
    own = default_path(folder, shard=shard)
    if os.path.isfile(own):
        return own
    from cachedoctor.statedir import other_splits

    return next(iter(other_splits(default_path(folder), shard)), None)


def _clock_ns(folder: str, shard: Shard | None) -> int | None:
    """When the last scan with ``folder``'s state database began (its clock file's tick)."""
    record = _record_of(folder, shard)
    try:
        return os.stat(clock_path(record)).st_mtime_ns if record is not None else None
    except OSError:
        return None


def _changed_since(path: str, tick: int | None) -> bool:
    """Whether ``path`` changed at or after ``tick``, so that the scan after it read it again
    (the state database's own test: a stat newer than the record; ctime cannot be set back)."""
    try:
        st = os.stat(path)
    except OSError:
        return True
    return tick is None or st.st_mtime_ns >= tick or st.st_ctime_ns >= tick


def _beside_temps(temps: list[Finding]) -> set[str]:
    paths: set[str] = set()
    for folder in {os.path.dirname(f.path) for f in temps}:
        try:
            with os.scandir(folder) as it:
                paths.update(
                    e.path
                    for e in it
                    if e.is_file() and not e.name.startswith(".") and e.path not in {f.path for f in temps}
                )
        except OSError:
            continue
    return paths


def _walk(folders: list[str]) -> Iterator[tuple[str, str]]:
    """``(path, name)`` of every file under ``folders``, outside cachedoctor's own state."""
    for folder in folders:
        for dirpath, dirs, names in os.walk(folder):
            dirs[:] = [d for d in dirs if d != STATE_DIR]
            for name in names:
                yield os.path.join(dirpath, name), name


def _written_after(folders: list[str], checkpoint: float) -> set[str]:
    paths: set[str] = set()
    for path, name in _walk(folders):
        try:
            if not name.startswith(".") and os.stat(path).st_mtime > checkpoint:
                paths.add(path)
        except OSError:
            continue
    return paths


def _held_locks(folders: list[str]) -> list[str]:
    """Lock files (repair's ``.<name>.lock`` convention) that some live process holds now."""
    return sorted(path for path, name in _walk(folders) if is_lock_name(name) and _is_held(path))


def _is_held(path: str) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO named like a lock must not block
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
