"""What a scan is asked: :class:`ScanOptions`, in a module of its own so that the parts of a scan
(``engine.py``, ``folder_chunks.py``) and its callers import it without importing each other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from cachedoctor.scan._memcap import FILE_MEMORY

if TYPE_CHECKING:
    from cachedoctor.scan.outcome import Outcome
    from cachedoctor.scan.state.sample import Sample
    from cachedoctor.sharding.interface import Shard
    from cachedoctor.sharding.ranks import RankGroup
    from cachedoctor.stores.s3 import S3Settings


class KnownVerdicts(Protocol):
    """Deep verdicts a caller already holds on files it has just written and judged (repair's
    rewrites, for its final scan: ``repair/verdicts.py``)."""

    def take(self, path: str, facts: bool) -> Outcome | None:
        """The outcome a deep read of ``path`` would give now (``facts``: a dataset scan's), or
        ``None``: read it."""


@dataclass(frozen=True, slots=True)
class ScanOptions:
    deep: bool = False
    workers: int | None = None  # None: one per CPU
    chunk_size: int = 64
    exclude: tuple[str, ...] = ()  # globs on paths relative to each target, and on base names
    #: The state database: ``None`` (read everything, record nothing), ``"auto"``
    #: (``<target>/.cachedoctor/state.sqlite`` per folder target), ``"existing"`` (only where one
    #: is already there), or a path (one database for every target).
    state: str | None = None
    sample: Sample | None = None  # deep-read this share, chosen through the state (implies deep reads)
    deep_changed: bool = False  # read deep whatever changed since the state's record (recover)
    file_timeout: float | None = 10.0  # seconds to judge one file before it is reported (read-timeout)
    #: Bytes a reader may allocate for one file before it is reported (unsafe-pickle,
    #: resource-bomb); ``None``: no cap. See ``_memcap.FILE_MEMORY``.
    file_memory: int | None = FILE_MEMORY
    world_size: int | None = None  # the training run's ranks (rank-imbalance); None: from the trainer's config
    batch_size: int | None = None  # its batch size per rank; None: from the trainer's config
    s3: S3Settings | None = None  # how to reach s3:// targets (None: the standard AWS chain)
    shard: Shard | None = None  # scan this shard's folders only (None: the whole cache)
    #: the ranks of one torchrun job, which hand each other their parts: every rank's ``scan``
    #: then returns the whole cache's result (``sharding/ranks.py``)
    ranks: RankGroup | None = None
    #: An S3 Inventory's manifest.json (a path or an s3:// URL): s3:// prefixes take their listing
    #: from it instead of LIST (``inventory_targets.py``); ``None``: LIST.
    inventory: str | None = None
    #: A deep scan without a state database takes these files' outcomes from here instead of
    #: reading them (``folder_chunks.py``); ``None``: read every file.
    known: KnownVerdicts | None = None

    @property
    def mode(self) -> str:
        if self.sample is not None:
            return f"deep sample {self.sample.text}"
        return "deep" if self.deep else "quick"


__all__ = ["KnownVerdicts", "ScanOptions"]
