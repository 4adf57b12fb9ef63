"""The rules, one per finding kind. :data:`CHECKS` is the registry the scan runs."""

from __future__ import annotations

from cachedoctor.checks.batch_leak import BatchLeak
from cachedoctor.checks.bit_rot import BitRot
from cachedoctor.checks.broken_link import BrokenLink
from cachedoctor.checks.config_hazard import ConfigHazard
from cachedoctor.checks.corrupt_archive import CorruptArchive
from cachedoctor.checks.device_tagged import DeviceTagged
from cachedoctor.checks.distribution_outlier import DistributionOutlier
from cachedoctor.checks.dropped_bucket import DroppedBucket
from cachedoctor.checks.dtype_mismatch import DtypeMismatch
from cachedoctor.checks.interface import Check, Found, Inspected, PeerEntry, PeerGroup, PeerTensor, RunView
from cachedoctor.checks.missing_entry import MissingEntry
from cachedoctor.checks.name_collision import NameCollision
from cachedoctor.checks.non_finite import NonFinite
from cachedoctor.checks.orphan_entry import OrphanEntry
from cachedoctor.checks.partial_write import PartialWrite, is_temp_name
from cachedoctor.checks.rank_imbalance import RankImbalance
from cachedoctor.checks.read_timeout import ReadTimeout
from cachedoctor.checks.shape_mismatch import ShapeMismatch
from cachedoctor.checks.stale_entry import StaleEntry
from cachedoctor.checks.unsafe_pickle import UnsafePickle

CHECKS: tuple[Check, ...] = (
    CorruptArchive(),
    PartialWrite(),
    BrokenLink(),
    BatchLeak(),
    DeviceTagged(),
    NonFinite(),
    UnsafePickle(),
    ReadTimeout(),
    DtypeMismatch(),
    ShapeMismatch(),
    MissingEntry(),
    OrphanEntry(),
    StaleEntry(),
    NameCollision(),
    BitRot(),
    ConfigHazard(),
    RankImbalance(),
    DroppedBucket(),
    DistributionOutlier(),
)

KINDS: dict[str, Check] = {c.kind: c for c in CHECKS}

#: The checks that look at single files / peer groups, so the hot loop calls no empty rule.
FILE_CHECKS: tuple[Check, ...] = tuple(c for c in CHECKS if type(c).check_file is not Check.check_file)
PEER_CHECKS: tuple[Check, ...] = tuple(c for c in CHECKS if type(c).check_peers is not Check.check_peers)
ENTRY_CHECKS: tuple[Check, ...] = tuple(c for c in CHECKS if type(c).check_entry is not Check.check_entry)
RUN_CHECKS: tuple[Check, ...] = tuple(c for c in CHECKS if type(c).check_run is not Check.check_run)

__all__ = [
    "CHECKS",
    "ENTRY_CHECKS",
    "FILE_CHECKS",
    "KINDS",
    "PEER_CHECKS",
    "RUN_CHECKS",
    "Check",
    "Found",
    "Inspected",
    "PeerEntry",
    "PeerGroup",
    "PeerTensor",
    "RunView",
    "is_temp_name",
]
