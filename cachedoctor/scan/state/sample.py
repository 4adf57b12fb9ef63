"""``--sample 5%`` / ``--sample 3/10``: deep-read a rotating part of the cache on each run.

Like restic's ``--read-data-subset``, but the order comes from the state database rather than
from a fixed partition: files never read deep (or changed since) come first, then those read
deep longest ago, ties in a fixed hash order. Every deep read sends a file to the back, so ten
runs of ``1/10`` (four of ``3/10``) read an unchanging cache exactly once over, and new files
are checked on the next run. The choice is made before the scan in one stat-only walk, held
in a temporary table, so memory stays flat however large the cache.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from cachedoctor.scan.state.store import StateStore, sig_of
from cachedoctor.scan.walk import Folder


@dataclass(frozen=True, slots=True)
class Sample:
    parts: int
    of: int
    text: str

    @classmethod
    def parse(cls, text: str) -> Sample:
        """``N%`` (decimals allowed) or ``N/M``; raises ``ValueError`` saying what is expected."""
        from fractions import Fraction  # only when --sample is given

        raw = text.strip()
        try:
            if raw.endswith("%"):
                share = Fraction(raw[:-1].strip()) / 100
            elif "/" in raw:
                n, m = raw.split("/", 1)
                share = Fraction(int(n), int(m))
            else:
                raise ValueError
        except (ValueError, ZeroDivisionError):
            raise ValueError(f"{text!r}: expected a share such as 5% or 3/10") from None
        if not 0 < share <= 1:
            raise ValueError(f"{text!r}: the share must be above 0 and at most all of the cache")
        return cls(share.numerator, share.denominator, raw)


def hash_order(key: bytes, name: str) -> int:
    """A fixed pseudo-random order of files (positive, so it fits SQLite's signed integers)."""
    import xxhash

    return xxhash.xxh3_64_intdigest(key + b"/" + os.fsencode(name)) >> 1


def choose(
    store: StateStore, folders: Iterable[Folder], sample: Sample, keep: Callable[[str], bool] = lambda path: True
) -> int:
    """Record in ``store`` which of the files under ``folders`` this run reads deep; the count."""
    return store.choose(_candidates(store, folders, keep), sample.parts, sample.of)


def _candidates(
    store: StateStore, folders: Iterable[Folder], keep: Callable[[str], bool]
) -> Iterator[tuple[str, str, int, int, int]]:
    for folder in folders:
        if not store.covers(folder.path):
            continue
        rows = store.rows(folder.path)
        key = store.key(folder.path)
        for path in folder.files:
            if not keep(path):
                continue
            name = os.path.basename(path)
            try:
                sig = sig_of(os.stat(path))
            except OSError:
                continue
            row = rows.get(name)
            deep_scan = row.deep_scan if row is not None and row.sig == sig and not row.racy else None
            settled = deep_scan is not None
            yield folder.path, name, (1 if settled else 0), (deep_scan or 0), hash_order(key, name)


__all__ = ["Sample", "choose", "hash_order"]
