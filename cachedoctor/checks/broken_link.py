"""``broken-link``: a symlink under a cache name that leads nowhere (dangling, or a loop).

The walk lists it because its name claims a cache file (``broken.pt -> /nonexistent``); nothing
opens it, the link alone is judged. A symlink that resolves to a real file is read as that file.
Links under other names are not cache entries and are left alone, as other foreign files are.
"""

from __future__ import annotations

from collections.abc import Iterable

from cachedoctor.checks.interface import Check, Inspected
from cachedoctor.findings import Finding, Fix, Severity


class BrokenLink(Check):
    kind = "broken-link"
    severity = Severity.ERROR
    fix = Fix.QUARANTINE
    summary = "a symlink named like a cache file whose target does not exist (or a symlink loop)"
    why = (
        "The name promises a cache entry that is not there. Anything that opens it fails: "
        'torch.load, np.load and safetensors raise FileNotFoundError ("Too many levels of '
        'symbolic links" for a loop), in a trainer that loads lazily only when the batch that '
        "holds it comes up, possibly hours in. It usually means the cache was moved or copied "
        "without what its links point to, or the disk that holds the targets is not mounted."
    )
    repair = (
        "quarantine: the link itself is moved into <cache root>/.cachedoctor/quarantine/<run>/ "
        "(never followed; what it points to is not touched), so the trainer re-caches the item. "
        "With the dataset, an entry the dataset expects is also a missing-entry and is "
        "recomputed in its place. `cachedoctor quarantine restore RUN CACHE_ROOT` puts the link "
        "back. If the targets are only on an unmounted disk, mount it and scan again instead."
    )

    def check_file(self, item: Inspected) -> Iterable[Finding]:
        if item.link_target is None:
            return
        if item.link_loop:
            message = f"symlink loop (it points to {item.link_target}, which leads back to itself); nothing can open it"
        else:
            message = f"symlink to {item.link_target}, which does not exist; nothing can open it"
        yield self.finding(
            item.path, message, target=item.link_target, problem="loop" if item.link_loop else "dangling"
        )
