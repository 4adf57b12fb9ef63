"""``non-finite``: NaN or Inf values in a floating tensor (deep mode reads the data).

Trainers find these lazily, one batch at a time, as a NaN loss hours into a run.
"""

from __future__ import annotations

from collections.abc import Iterable

from cachedoctor.checks.interface import Check, Inspected
from cachedoctor.findings import Finding, Fix, Severity


class NonFinite(Check):
    kind = "non-finite"
    severity = Severity.ERROR
    fix = Fix.RECOMPUTE
    summary = "NaN or Inf in a floating tensor (deep)"
    why = (
        "One NaN in one latent is enough: the batch that holds it gives a NaN loss, the "
        "optimizer step can write NaN into the weights, and every step after that is NaN "
        "too. Trainers find it lazily, a batch at a time, so it surfaces some steps or hours "
        "into a run, and checkpoints saved after it are ruined. The usual cause is a VAE run "
        "in fp16 that overflows on some images."
    )
    repair = (
        "recompute: the item is encoded again and the file with NaN/Inf goes to the "
        "quarantine. If the encoder itself overflows in fp16, recompute in bf16 or fp32 "
        "(diffusers-vae:PATH@bfloat16), or the new file fails its read-back check the "
        "same way."
    )
    deep_only = True

    def check_file(self, item: Inspected) -> Iterable[Finding]:
        if item.meta is None:
            return
        bad = {t.display_key: t.nonfinite for t in item.meta.tensors if t.nonfinite}
        if bad:
            total = sum(bad.values())
            yield self.finding(item.path, f"{total} NaN/Inf value(s) in {', '.join(bad)}", counts=bad)
