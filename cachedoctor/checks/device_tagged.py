"""``device-tagged``: a storage saved with a location other than ``cpu``.

torch.load without ``map_location`` then fails on a CPU-only machine ("Attempting to deserialize
object on a CUDA device") or lands the tensor on that GPU, which later surfaces as "Expected all
tensors to be on the same device". SimpleTuner and OneTrainer save without ``.cpu()``.
"""

from __future__ import annotations

from typing import Iterable

from cachedoctor.checks.interface import Check, Inspected
from cachedoctor.findings import Finding, Fix, Severity


class DeviceTagged(Check):
    kind = "device-tagged"
    severity = Severity.WARNING
    fix = Fix.REWRITE_CPU
    summary = "a storage's location is not cpu (saved from a GPU without .cpu())"

    def check_file(self, item: Inspected) -> Iterable[Finding]:
        if item.meta is None:
            return
        tagged = {t.display_key: t.location for t in item.meta.tensors if t.location not in (None, "cpu")}
        if tagged:
            locations = sorted(set(tagged.values()))
            yield self.finding(
                item.path,
                f"tensors are tagged {', '.join(locations)}: loading without map_location fails on a "
                f"CPU machine or lands them on that GPU",
                locations=locations, keys=tagged)
