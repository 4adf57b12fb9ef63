"""``device-tagged``: a storage saved with a location other than ``cpu``.

torch.load without ``map_location`` then fails on a CPU-only machine ("Attempting to deserialize
object on a CUDA device") or lands the tensor on that GPU, which later surfaces as "Expected all
tensors to be on the same device". SimpleTuner and OneTrainer save without ``.cpu()``.
"""

from __future__ import annotations

from collections.abc import Iterable

from cachedoctor.checks.interface import Check, Inspected
from cachedoctor.findings import Finding, Fix, Severity


class DeviceTagged(Check):
    kind = "device-tagged"
    severity = Severity.WARNING
    fix = Fix.REWRITE_CPU
    summary = "a storage's location is not cpu (saved from a GPU without .cpu())"
    why = (
        "A storage saved from a GPU keeps its location (cuda:3) in the file. torch.load "
        'without map_location fails on a CPU-only machine with "RuntimeError: Attempting to '
        'deserialize object on a CUDA device"; on a machine with GPUs the tensor lands on '
        'cuda:3 whichever rank loads it, which later raises "Expected all tensors to be on '
        "the same device\", or quietly fills that GPU's memory. SimpleTuner itself loads "
        'with map_location="cpu", so this is a warning: other readers, scripts and '
        "notebooks break."
    )
    repair = (
        "rewrite-cpu, lossless: the same tensors are saved again with every storage on "
        "cpu; keys, key order, dtypes, shapes and values stay bitwise identical, and so "
        "does the container (a bare tensor, a dict, a gzipped or legacy file). The "
        "tensors to be saved are compared bit for bit with those read, the written file "
        "is read back deep, and the old file goes to the quarantine. A file whose pickle "
        "names a global outside the allow-list is never loaded; it is quarantined instead "
        "(unsafe-pickle)."
    )

    def check_file(self, item: Inspected) -> Iterable[Finding]:
        if item.meta is None or item.meta.format == "torch-shard":
            return  # diffusion-pipe's only loader of its shards maps every item to the cpu (utils/cache.py)
        tagged = {t.display_key: t.location for t in item.meta.tensors if t.location not in (None, "cpu")}
        if tagged:
            locations = sorted(set(tagged.values()))
            yield self.finding(
                item.path,
                f"tensors are tagged {', '.join(locations)}: loading without map_location fails on a "
                f"CPU machine or lands them on that GPU",
                locations=locations,
                keys=tagged,
            )
