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
when its writer died, so all its files are read deep.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from cachedoctor.errors import PathError
from cachedoctor.findings import Finding
from cachedoctor.layouts import LayoutName, LayoutOptions, plan_for
from cachedoctor.repair.journal import Interrupted, interrupted_run
from cachedoctor.scan import ScanOptions, scan
from cachedoctor.scan.state.plan import EXISTING
from cachedoctor.scan.state.store import default_path
from cachedoctor.scan.walk import is_under
from cachedoctor.statedir import STATE_DIR, is_lock_name

#: Finding kinds that a crash mid-write produces; ``--apply`` repairs these (or resumes a run).
CRASH_KINDS = frozenset({"partial-write", "corrupt-archive", "non-finite"})


@dataclass
class Survey:
    layout_line: str | None
    temp_files: list[Finding] = field(default_factory=list)
    damaged: list[Finding] = field(default_factory=list)  # deep-read suspects with crash findings
    suspects: int = 0  # files read deep because they were written around the crash
    since: str = "around the crash"  # what "recent" was judged against
    held_locks: list[str] = field(default_factory=list)  # a live process holds these: a writer is active
    interrupted: list[tuple[str, Interrupted]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.temp_files or self.damaged or self.held_locks or self.interrupted)


def survey(
    targets: list[str],
    layout: LayoutName,
    options: LayoutOptions,
    scan_options: ScanOptions | None = None,
    allow_empty: bool = False,
) -> Survey:
    """What a crash left under ``targets``. ``scan_options`` gives what the settings say of every
    scan (exclude, reader workers, file timeout); the survey chooses its own depth and state use.
    Targets with nothing to check (no cache file, no dataset entry, no interrupted repair, no
    held lock) raise :class:`PathError` unless ``allow_empty``, as ``scan`` would exit 2."""
    base = scan_options or ScanOptions()
    plan, line = plan_for(layout, targets, options)
    roots = plan.roots if plan is not None else targets
    folders = [r if os.path.isdir(r) else os.path.dirname(r) for r in roots]
    stateful = [f for f in folders if os.path.isdir(f) and os.path.isfile(default_path(f))]
    result = scan(roots, replace(base, deep=False, sample=None, state=EXISTING, deep_changed=True), dataset=plan)
    out = Survey(line, temp_files=[f for f in result.findings if f.kind == "partial-write"])
    damaged = CRASH_KINDS - {"partial-write"}
    if stateful:  # the state's record is the checkpoint: what changed since was just read deep
        out.since = "since the last scan (its state database)"
        out.suspects = result.stats.files_deep
        out.damaged = [f for f in result.findings if f.kind in damaged and any(is_under(f.path, s) for s in stateful)]
    for root in folders:
        run = interrupted_run(root)
        if run is not None:
            out.interrupted.append((root, run))
    rest = [f for f in folders if f not in stateful]
    checkpoint = max((run.last_update for r, run in out.interrupted if r in rest), default=None)
    temps = [f for f in out.temp_files if not any(is_under(f.path, s) for s in stateful)]
    suspects = _written_after(rest, checkpoint) if checkpoint else _beside_temps(temps)
    if suspects:
        out.suspects += len(suspects)
        deep = scan(sorted(suspects), replace(base, deep=True, sample=None, state=None, deep_changed=False))
        out.damaged += [f for f in deep.findings if f.kind in damaged]
    out.held_locks = _held_locks(folders)
    if result.empty and out.empty and not allow_empty:
        from cachedoctor.report.outcome import nothing_to_check

        raise PathError(*nothing_to_check(result.targets, dataset=plan is not None, others=result.stats.files_skipped))
    return out


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
