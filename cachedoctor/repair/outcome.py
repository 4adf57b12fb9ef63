"""What a repair is asked (:class:`RepairOptions`) and what it found, did and left
(:class:`RepairOutcome`): the values every repair path shares (``run.py`` for files this
machine opens, ``store_flow.py`` and ``store_dataset.py`` through a store's conditional
requests), in a module of their own so that those paths import them, not each other."""

from __future__ import annotations

from dataclasses import dataclass, field

from cachedoctor.repair.journal import Interrupted
from cachedoctor.repair.model import ItemResult, RepairPlan
from cachedoctor.scan import ScanOptions, ScanResult


@dataclass(frozen=True)
class RepairOptions:
    #: The scans before and after the repair, exactly as ``scan`` would run with the same settings
    #: (``cachedoctor.options.scan_options``): deep, exclude, state, reader workers, file timeout.
    #: A file ``scan`` leaves out is never planned on.
    scan: ScanOptions = field(default_factory=ScanOptions)
    encoders: tuple[str, ...] = ()
    gpus: int | None = None
    device: str = "cpu"
    workers: int = 1  # recompute worker processes on ``device`` (the scan's readers are ``scan.workers``)
    batch_size: int = 8
    only: frozenset[str] | None = None
    dry_run: bool = False
    fresh: bool = False  # abandon an interrupted run instead of finishing it
    keep_blocked: bool = False  # leave unreadable files that cannot be recomputed in place
    posterior: str = (
        "trainer"  # as the trainer caches; "mode": the posterior's mean; "sample": mean + std * noise(seed, path)
    )
    seed: int = 0
    allow_empty: bool = False  # targets with no cache file (and no dataset entry) are no error
    take_stale_lock: bool = False  # a remote prefix's lock left by a dead repair is cleared (recover --apply)


@dataclass
class RepairOutcome:
    before: ScanResult
    plan: RepairPlan
    layout_line: str | None
    run_id: str | None = None
    interrupted: Interrupted | None = None  # the crashed run this one finishes

    @property
    def resumed(self) -> bool:
        return self.interrupted is not None

    results: list[ItemResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    after: ScanResult | None = None
    leader: bool = True
    notes: list[str] = field(default_factory=list)  # about the run itself (a journal moved aside)
    #: Objects another writer changed during a remote repair (neither the version it scanned nor
    #: the one it wrote): the rescan's findings in them are not the repair's doing.
    others: set[str] = field(default_factory=set)


__all__ = ["RepairOptions", "RepairOutcome"]
