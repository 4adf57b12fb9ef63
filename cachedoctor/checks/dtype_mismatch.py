"""``dtype-mismatch``: a file's dtype differs from the majority of its peers, or from the dtype
its key names.

Peers are the files of one folder with the same structure; a bf16 cache with a stray fp32 file
trains with mixed precision inputs, or fails a ``torch.stack`` in the collate function. Keys
that spell their dtype (musubi-tuner's ``latents_1x8x8_bfloat16``) are compared within their
family (``keynames``), so a float32 latent is judged against its bfloat16 peers rather than
being a family of one, and a key whose dtype is not its tensor's is a finding of its own.
"""

from __future__ import annotations

from collections.abc import Iterable

from cachedoctor import keynames
from cachedoctor.checks.interface import Check, Inspected, PeerGroup
from cachedoctor.findings import Finding, Fix, Severity


class DtypeMismatch(Check):
    kind = "dtype-mismatch"
    severity = Severity.WARNING
    fix = Fix.RECOMPUTE
    summary = "a file's dtype differs from the majority of its folder's cache, or from the dtype its key names"
    why = (
        "torch.stack promotes a batch that holds one float32 latent among bfloat16 peers to "
        "float32, so that batch alone reaches the model in another dtype: outside autocast "
        'it fails with "Input type (float) and bias type (c10::BFloat16) should be the '
        'same", inside it trains on inputs of another precision. The odd file usually comes '
        "from another caching run (another VAE dtype, another machine or VAE), so its values "
        "may not match its peers' either."
    )
    repair = (
        "recompute: the item is encoded again and saved in its peers' dtype (a healthy "
        "file of the folder is the template for container, keys and dtypes), and the odd "
        "file goes to the quarantine. It is not cast in place."
    )

    def check_file(self, item: Inspected) -> Iterable[Finding]:
        if item.meta is None:
            return
        for t in item.meta.tensors:
            named = keynames.parse(t.key).dtype
            if named is not None and named != t.dtype:
                yield self.finding(
                    item.path,
                    f"{t.key} is {t.dtype}: its key says {named}",
                    keys={t.key: t.dtype},
                    expected={t.key: named},
                )
                return

    def check_peers(self, group: PeerGroup) -> Iterable[Finding]:
        majority = {key: group.majority(key, lambda t: t.dtype) for key in group.keys()}  # noqa: SIM118 - not a dict
        for tensors, paths in group.variants.items():
            odd = [
                (t.label, t.dtype, majority[t.key])
                for t in tensors
                if majority[t.key][0] is not None and t.dtype != majority[t.key][0]
            ]
            if not odd:
                continue
            key, dtype, (usual, _) = odd[0]
            for path in paths:
                yield self.finding(
                    path,
                    f"{key} is {dtype} where most of its {len(group.entries) - 1} peers are {usual}",
                    keys={k: d for k, d, _ in odd},
                    expected={k: m[0] for k, _, m in odd},
                    peers=len(group.entries) - 1,
                )
