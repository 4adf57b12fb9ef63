"""``shape-mismatch``: rank or channel count differs from the majority of the folder's peers.

Spatial sizes vary legitimately with aspect buckets, so only rank and the feature dimension
(latent channels, embedding width) are compared here; bucket-aware checks need the dataset.
A leading batch dimension is ``batch-leak``'s, not this rule's.
"""

from __future__ import annotations

from typing import Iterable

from cachedoctor.checks.batch_leak import is_leading_batch
from cachedoctor.checks.interface import Check, PeerGroup, feature_dim
from cachedoctor.findings import Finding, Fix, Severity


class ShapeMismatch(Check):
    kind = "shape-mismatch"
    severity = Severity.WARNING
    fix = Fix.RECOMPUTE
    summary = "rank or channel count differs from the majority of its folder's cache"

    def check_peers(self, group: PeerGroup) -> Iterable[Finding]:
        for key in group.keys():
            rank, _ = group.majority(key, lambda t: len(t.shape))
            if rank is None:
                continue
            feature, _ = group.majority(key, lambda t: feature_dim(t.key, t.shape) if len(t.shape) == rank else None)
            for entry in group.entries:
                for t in entry.tensors:
                    if t.key != key or is_leading_batch(t.shape, rank, feature, key):
                        continue
                    mine = feature_dim(key, t.shape)
                    if len(t.shape) != rank:
                        why = f"rank {len(t.shape)} where peers have rank {rank}"
                    elif feature is not None and mine != feature:
                        why = f"{mine} channels where peers have {feature}"
                    else:
                        continue
                    yield self.finding(entry.path, f"{key or '<root>'} has shape {list(t.shape)}: {why}",
                                       key=key or "<root>", shape=list(t.shape), peer_rank=rank, peer_channels=feature)
