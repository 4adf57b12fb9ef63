"""``batch-leak``: a per-item cache file that carries a whole batch.

Two shapes of the same bug (formats.md, "The batch leak"):

* ``torch.save(batch[i])`` keeps the view: the record holds the whole batch's storage while the
  tensor spans one item. Offset is no test (``batch[0]`` has offset 0); the storage's size
  against the span the views need is. The view itself is the right data: ``clone-storage``.
* an older bug saves the batch itself, a leading batch dimension > 1 where the folder's peers
  have none. Which slice belongs to the item is unknown: ``recompute``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING, TypedDict

from cachedoctor.checks.interface import Check, Inspected, PeerGroup, feature_dim
from cachedoctor.findings import Finding, Fix, Severity

if TYPE_CHECKING:  # type-only: importing formats/layouts would load every reader (explain, --version stay light)
    from cachedoctor.formats.interface import TensorMeta


def _whole_storages(tensors: tuple[TensorMeta, ...]) -> bool:
    """The usual file, screened in one pass: every view starts at its storage's first element
    and spans all of it (or past it, which is corruption, reported elsewhere), so no storage
    can hold more than its views need."""
    for t in tensors:
        if t.stride is not None and t.storage_numel is not None and (t.offset != 0 or t.span < t.storage_numel):
            return False
    return True


class _Leak(TypedDict):
    keys: list[str]
    storage_bytes: int
    needed_bytes: int
    offset: int


class BatchLeak(Check):
    kind = "batch-leak"
    severity = Severity.ERROR
    fix = Fix.CLONE_STORAGE
    summary = (
        "a record holds more bytes than its tensor spans (a saved view of a batch), or a "
        "per-item tensor has a leading batch dimension its peers lack"
    )
    why = (
        "torch.save(batch[i]) keeps the view, so each file carries the whole batch's "
        "storage: a view of a 7-item batch makes every file 7x larger (7,226,836 bytes "
        "instead of 1,033,684 for a 16x96x168 fp32 latent), and every load reads the whole "
        "batch and keeps it in memory, multiplying disk use, I/O and the data loader's RAM. "
        "Nothing errors, so it goes unnoticed until the disk fills. The older form, a "
        "per-item file that holds the batch itself ([7,4,128,128] where its peers are "
        '[4,128,128]), fails torch.stack in the collate function ("stack expects each '
        'tensor to be equal size") or trains seven latents against one caption.'
    )
    repair = (
        "clone-storage (view form), lossless: the file is read through the safe path only "
        "(the restricted reader, then torch.load(weights_only=True, "
        'map_location="cpu")), each tensor is saved again as a clone of its own view, '
        "on cpu; the tensors to be saved are compared bit for bit with those read, the "
        "written file is read back deep, and the old file goes to the quarantine. The "
        "leading-batch form is recomputed: which slice belongs to the item is unknown."
    )

    def check_file(self, item: Inspected) -> Iterable[Finding]:
        meta = item.meta
        if meta is None or _whole_storages(meta.tensors):
            return
        by_storage: dict[str | None, list[TensorMeta]] = defaultdict(list)
        for t in meta.tensors:
            if t.stride is not None and t.storage_numel is not None:
                by_storage[t.storage].append(t)
        leaks: list[_Leak] = []
        for views in by_storage.values():
            numel = views[0].storage_numel or 0
            touched = [(t.offset, t.offset + span) for t in views if (span := t.span) > 0]
            if not touched:
                continue
            start, end = min(a for a, _ in touched), max(b for _, b in touched)
            if end > numel:
                continue  # a view past its storage is corruption, reported as such
            if end - start < numel:
                itemsize = views[0].itemsize
                leaks.append(
                    {
                        "keys": [t.display_key for t in views],
                        "storage_bytes": numel * itemsize,
                        "needed_bytes": (end - start) * itemsize,
                        "offset": start,
                    }
                )
        if leaks:
            first = leaks[0]
            ratio = first["storage_bytes"] / max(first["needed_bytes"], 1)
            yield self.finding(
                item.path,
                f"{', '.join(first['keys'])} is a view of a larger batch: the file stores "
                f"{first['storage_bytes']} bytes for {first['needed_bytes']} ({ratio:.1f}x)",
                leaks=leaks,
            )

    def check_peers(self, group: PeerGroup) -> Iterable[Finding]:
        for key in group.keys():  # noqa: SIM118 - PeerGroup.keys() is a sorted list, not a dict view
            rank, _ = group.majority(key, lambda t: len(t.shape))
            if rank is None:
                continue
            feature, _ = group.majority(key, lambda t: feature_dim(t.label, t.shape) if len(t.shape) == rank else None)  # noqa: B023 - called at once
            for tensors, paths in group.variants.items():
                for t in tensors:
                    if t.key == key and is_leading_batch(t.shape, rank, feature, t.label):
                        for path in paths:
                            yield self.finding(
                                path,
                                f"{t.label} has shape {list(t.shape)}: a leading batch dimension of "
                                f"{t.shape[0]} where its peers are rank {rank}; which item is this file's is unknown",
                                fix=Fix.RECOMPUTE,
                                key=t.label,
                                shape=list(t.shape),
                                peer_rank=rank,
                            )


def is_leading_batch(shape: tuple[int, ...], peer_rank: int, peer_feature: object, key: str) -> bool:
    """``shape`` is a peer-shaped tensor with an extra leading dimension greater than one."""
    return (
        len(shape) == peer_rank + 1
        and shape[0] > 1
        and (peer_feature is None or feature_dim(key, shape[1:]) == peer_feature)
    )
