"""The rules, one per finding kind. :data:`CHECKS` is the registry the scan runs."""

from __future__ import annotations

from cachedoctor.checks.batch_leak import BatchLeak
from cachedoctor.checks.corrupt_archive import CorruptArchive
from cachedoctor.checks.device_tagged import DeviceTagged
from cachedoctor.checks.dtype_mismatch import DtypeMismatch
from cachedoctor.checks.interface import Check, Inspected, PeerEntry, PeerGroup, PeerTensor
from cachedoctor.checks.non_finite import NonFinite
from cachedoctor.checks.partial_write import PartialWrite, is_temp_name
from cachedoctor.checks.shape_mismatch import ShapeMismatch
from cachedoctor.checks.unsafe_pickle import UnsafePickle

CHECKS: tuple[Check, ...] = (
    CorruptArchive(), PartialWrite(), BatchLeak(), DeviceTagged(), NonFinite(), UnsafePickle(),
    DtypeMismatch(), ShapeMismatch(),
)

KINDS: dict[str, Check] = {c.kind: c for c in CHECKS}

#: The checks that look at single files / peer groups, so the hot loop calls no empty rule.
FILE_CHECKS: tuple[Check, ...] = tuple(c for c in CHECKS if type(c).check_file is not Check.check_file)
PEER_CHECKS: tuple[Check, ...] = tuple(c for c in CHECKS if type(c).check_peers is not Check.check_peers)

__all__ = ["CHECKS", "FILE_CHECKS", "KINDS", "PEER_CHECKS", "Check", "Inspected", "PeerEntry", "PeerGroup", "PeerTensor", "is_temp_name"]
