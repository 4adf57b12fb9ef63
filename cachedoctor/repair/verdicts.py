"""The deep verdicts repair already holds on the files it put in place, for its final scan.

Each lossless rewrite is judged deep, in memory, before it may replace anything
(``verify.problems_of``: the scan's own reader and file checks on the new bytes). Reading the
same file back from disk in the rescan would judge the same bytes again. So the rescan takes
that verdict instead, for a file whose stat still says it holds those bytes, and reads every
other file as usual (``ScanOptions.known``, ``scan/folder_chunks.py``). The folder-level checks
(peers, dataset entries) run in the rescan as always, over these verdicts and the fresh reads.

When a stat vouches for the bytes (git's "racy" problem: a file changed within the clock tick
of its recorded time keeps its stamp): ``made`` is the temp file's own ``fstat`` once written
(nobody else knows its name), ``placed`` a ``stat`` of the target right after the rename.
A verdict is kept only if ``placed`` still has ``made``'s size, mtime and inode (no one wrote
between the rename and that stat) and its change time (set by the rename) is later than its
mtime (the rename came in a later clock tick than the write, so any later write stamps an
mtime other than ours); on a file system whose clock did not move between the two, or that
keeps the change time on a rename, no verdict is kept and the rescan reads the file. The
rescan then takes it only when the file's stat is still ``placed``, all four fields.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING

from cachedoctor.scan.state.sigs import Sig, sig_of

if TYPE_CHECKING:
    from cachedoctor.scan.outcome import Outcome


class Verdicts:
    """Deep outcomes of files repair judged and put in place, by path (the scan's ``known``)."""

    def __init__(self) -> None:
        self._judged: dict[str, Outcome] = {}  # judged fit, not yet in place
        self._placed: dict[str, tuple[Sig, Outcome]] = {}

    def __len__(self) -> int:
        return len(self._placed)

    def judged(self, path: str, outcome: Outcome) -> None:
        """``outcome``: the deep read of the new bytes for ``path``, which found them fit."""
        self._judged[path] = outcome

    def placed(self, path: str, made: os.stat_result) -> None:
        """The new bytes are at ``path`` (renamed over it just now); ``made``: the ``fstat`` of
        the temp file once they were written. Kept only where a stat can vouch for them (see
        the module's docstring)."""
        outcome = self._judged.pop(path, None)
        if outcome is None:
            return
        try:
            st = os.stat(path)
        except OSError:
            return
        if (st.st_size, st.st_mtime_ns, st.st_ino) != (made.st_size, made.st_mtime_ns, made.st_ino):
            return  # written by someone else since the rename
        if st.st_ctime_ns <= st.st_mtime_ns:
            return  # the clock did not move between the write and the rename: a stat cannot tell
        self._placed[path] = (sig_of(st), outcome)

    def take(self, path: str, facts: bool) -> Outcome | None:
        """The outcome a deep read of ``path`` would give now (``facts``: with the dataset
        scan's mtime, shapes and values, as ``scan.worker.inspect_path(entry_facts=True)``),
        or ``None``: no verdict, or the file is not the one judged (read it)."""
        entry = self._placed.get(path)
        if entry is None:
            return None
        try:
            st = os.stat(path)
        except OSError:
            return None
        sig, outcome = entry
        if sig_of(st) != sig:
            return None
        if facts:  # the judgement in memory had no file to take the mtime from
            return replace(outcome, mtime_ns=st.st_mtime_ns)
        return replace(outcome, mtime_ns=0, shapes=(), values=())


__all__ = ["Verdicts"]
