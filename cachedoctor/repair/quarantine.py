"""The quarantine: where everything repair replaces or moves goes, so nothing is ever lost.

``<cache root>/.cachedoctor/quarantine/<run id>/<path relative to the root>``, plus
``.records.jsonl`` in the run folder saying, per file, where it came from and why. The folder
tree is the truth (what restores); records are the explanation, written before the file is
moved or linked in, so a run killed at any instant leaves every quarantined file's reason on
record (a record whose file never arrived is ignored). The scan never enters ``.cachedoctor/``.

Files are kept by hard link when the original stays in place until the replacement is renamed
over it (no bytes copied, and the link exists before the original name changes), and by rename
when the file is moved out. Both stay on the cache's own file system; a root that spans file
systems (a subfolder that is a symlink to another mount) falls back to a copy into a temp file,
fsynced and renamed, before the original is touched: ``keep``, ``move`` and ``restore`` all go
through ``atomic.transfer``. A temp file a kill left inside a run is no quarantined file:
``list`` and ``restore`` ignore it, and the run that resumes (or a restore) removes it.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass

from cachedoctor.atomic import TEMP_SUFFIX, is_own_temp, temp_prefix_for, temp_target, transfer
from cachedoctor.errors import PathError
from cachedoctor.lifetime import kill_due, kill_self
from cachedoctor.statedir import quarantine_root

RECORDS = ".records.jsonl"


@dataclass(frozen=True, slots=True)
class QuarantinedFile:
    relpath: str
    size: int
    original: str
    reasons: tuple[str, ...]
    action: str


@dataclass(frozen=True, slots=True)
class QuarantineRun:
    run_id: str
    folder: str
    files: tuple[QuarantinedFile, ...]
    #: Its records name originals outside its cache root: the cache was moved, or copied (then
    #: another root may hold the same run, and only the user can say which one to restore).
    moved: bool = False

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


class Quarantine:
    """The quarantine of one run in one cache root."""

    def __init__(self, root: str, run_id: str) -> None:
        self.root = root
        self.run_id = run_id
        self.folder = os.path.join(quarantine_root(root), run_id)
        self._made: set[str] = set()  # folders this object created or found (no mkdir per file)
        self._unsynced = False  # records of ``keep(sync=False)`` written, not yet fsynced (``write_records``)

    def destination(self, path: str) -> str:
        rel = os.path.relpath(path, self.root)
        if rel.startswith(os.pardir):
            raise ValueError(f"{path} is outside the cache root {self.root}")
        return os.path.join(self.folder, rel)

    def keep(self, path: str, reasons: tuple[str, ...], action: str, *, sync: bool = True) -> str:
        """Preserve ``path``'s current content (it is about to be replaced); idempotent.
        ``sync=False``: the caller fsyncs the destination's folder before it replaces ``path``
        (one fsync for a batch of files; ``batch.py``)."""
        dest = self.destination(path)
        folder = os.path.dirname(dest)
        if folder not in self._made:
            os.makedirs(folder, exist_ok=True)
            self._made.add(folder)
        if os.path.lexists(dest):
            if _same(dest, path):
                return dest  # a resumed run already linked it
            dest = _free_name(dest)
        self._record(dest, path, reasons, action, sync=sync)  # first: a kill after the link keeps the reason
        transfer(path, dest, keep_source=True, sync=sync)
        _landed()
        return dest

    def write_records(self) -> None:
        """Make the records that ``keep(sync=False)`` wrote durable (one fsync for a batch),
        before the batch's files are replaced."""
        if self._unsynced:
            fd = os.open(os.path.join(self.folder, RECORDS), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self._unsynced = False

    def move(self, path: str, reasons: tuple[str, ...], action: str) -> str:
        """Move ``path`` out of the cache into the quarantine."""
        dest = self.destination(path)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        if os.path.lexists(dest):
            dest = _free_name(dest)
        self._record(dest, path, reasons, action)  # first: a kill after the move keeps the reason
        transfer(path, dest)
        _landed()
        return dest

    def clean_temps(self) -> int:
        """Remove the temp files a killed copy left in this run's folder (call only when no
        process is writing to this run: the one resuming it). How many there were."""
        n = 0
        for dirpath, _dirs, names in os.walk(self.folder):
            for name in names:
                if is_own_temp(name):
                    os.unlink(os.path.join(dirpath, name))
                    n += 1
        return n

    def _record(self, dest: str, original: str, reasons: tuple[str, ...], action: str, sync: bool = True) -> None:
        """Explain a file about to go to ``dest``, before it goes: written at once (a SIGKILL
        after the move loses nothing), and fsynced now, or with ``sync=False`` by
        :meth:`write_records` before the batch's files are replaced (one fsync per batch)."""
        record = {
            "path": os.path.relpath(dest, self.folder),
            "original": original,
            "reasons": list(reasons),
            "action": action,
            "size": os.lstat(original).st_size,  # what goes in: a broken symlink is kept as the link
            "time": time.time(),
        }
        with open(os.path.join(self.folder, RECORDS), "a", encoding="utf-8") as out:
            out.write(json.dumps(record, sort_keys=True) + "\n")
            out.flush()
            if sync:
                os.fsync(out.fileno())
            else:
                self._unsynced = True


def _landed() -> None:
    """Crash tests only: ``CACHEDOCTOR_TEST_KILL_AT_QUARANTINE=N`` SIGKILLs the process right after
    its N-th file lands in a quarantine (a point of its own: the ``KILL_AT`` sweeps count theirs)."""
    if kill_due("CACHEDOCTOR_TEST_KILL_AT_QUARANTINE"):
        kill_self()


def _free_name(dest: str) -> str:
    n = 1
    while os.path.lexists(f"{dest}.{n}"):
        n += 1
    return f"{dest}.{n}"


def _same(a: str, b: str) -> bool:
    """Whether two paths are one file (through symlinks; a link that leads nowhere as itself)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        x, y = os.lstat(a), os.lstat(b)
        return (x.st_dev, x.st_ino) == (y.st_dev, y.st_ino)


def _records(folder: str) -> dict[str, dict]:
    out: dict[str, dict] = {}
    try:
        with open(os.path.join(folder, RECORDS), encoding="utf-8") as handle:
            for line in handle:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a record cut short by a crash; the file itself still counts
                if isinstance(record, dict) and isinstance(record.get("path"), str):
                    out[record["path"]] = record
    except FileNotFoundError:
        pass
    return out


def _files(folder: str) -> Iterator[str]:
    for dirpath, _dirs, names in os.walk(folder):
        for name in names:
            if (dirpath == folder and name == RECORDS) or is_own_temp(name):
                continue  # a temp file is a copy a kill cut short: its source is still whole
            yield os.path.relpath(os.path.join(dirpath, name), folder)


def list_runs(root: str) -> list[QuarantineRun]:
    base = quarantine_root(root)
    if not os.path.isdir(base):
        return []
    runs = []
    for run_id in sorted(os.listdir(base)):
        folder = os.path.join(base, run_id)
        if not os.path.isdir(folder):
            continue
        records = _records(folder)
        files = []
        moved = False
        for rel in sorted(_files(folder)):
            record = records.get(rel, {})
            original = record.get("original")
            if not isinstance(original, str) or not _inside(original, root):  # a cache moved since: restore into it
                moved = moved or isinstance(original, str)
                original = os.path.join(root, original_rel(rel))
            files.append(
                QuarantinedFile(
                    rel,
                    os.lstat(os.path.join(folder, rel)).st_size,
                    original,
                    tuple(record.get("reasons") or ()),
                    str(record.get("action") or "unknown"),
                )
            )
        runs.append(QuarantineRun(run_id, folder, tuple(files), moved))
    return runs


def _inside(path: str, root: str) -> bool:
    return os.path.isabs(path) and not os.path.relpath(path, root).startswith(os.pardir)


def original_rel(rel: str) -> str:
    """``a/b.pt.1`` (a second copy of one path in one run) restores to ``a/b.pt``."""
    stem, _, n = rel.rpartition(".")
    return stem if n.isdigit() and stem else rel


def find_run(root: str, run_id: str) -> QuarantineRun | None:
    return next((r for r in list_runs(root) if r.run_id == run_id), None)


class RestoreError(PathError):
    """A restore stopped part way (a full disk, an I/O error); the rest is still in the run."""


def restore(root: str, run: QuarantineRun, new_run_id: str) -> list[tuple[str, str]]:
    """Put every file of ``run`` back where it was. A file now at that place (the repaired
    version) is itself quarantined under ``new_run_id`` first, so a restore loses nothing
    either. Returns ``(quarantined file, restored path)`` pairs. A failure stops it with
    :class:`RestoreError`: what is restored is in the cache, the rest still in the run, and
    the same restore again goes on."""
    from cachedoctor.faults import could_not_write
    from cachedoctor.repair.locks import file_lock

    aside = Quarantine(root, new_run_id)
    done: list[tuple[str, str]] = []
    for item in run.files:
        src = os.path.join(run.folder, item.relpath)
        target = item.original if os.path.isabs(item.original) else os.path.join(root, item.original)
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with file_lock(target):
                _drop_temps_of(target)
                if os.path.lexists(target):
                    aside.keep(target, ("restore",), f"replaced by restore of {run.run_id}")
                transfer(src, target)
        except OSError as exc:
            left = len(run.files) - len(done)
            then = (
                f"run the same `cachedoctor quarantine restore {run.run_id}` again: {len(done)} file(s) are back, "
                f"{left} still in the quarantine"
            )
            raise RestoreError(target, could_not_write(exc, target, "the restored file", then)) from None
        done.append((src, target))
    shutil.rmtree(run.folder)
    return done


def _drop_temps_of(target: str) -> None:
    """Remove the temp files of an earlier copy to ``target`` that a kill cut short. Their writer
    held ``target``'s lock for their whole life; we hold it now, so they are abandoned."""
    import glob

    pattern = glob.escape(os.path.join(os.path.dirname(target), temp_prefix_for(target))) + "*" + TEMP_SUFFIX
    for temp in glob.glob(pattern):
        if temp_target(temp) == target:
            os.unlink(temp)


def purge(run: QuarantineRun) -> int:
    """Delete a quarantine run for good (the one place cachedoctor deletes data, on request)."""
    size = run.size
    shutil.rmtree(run.folder)
    return size
