"""Every sampler model by trainer name, and the pick for a layout.

Apart from the package's ``__init__``: the scan's bucket census (``census.py``) lives in this
package, and a scan of no multi-GPU run should not import every sampler model to reach it.
"""

from __future__ import annotations

from cachedoctor.layouts.samplers.interface import Sampler
from cachedoctor.layouts.samplers.kohya import KohyaSampler
from cachedoctor.layouts.samplers.onetrainer import OneTrainerSampler
from cachedoctor.layouts.samplers.sana import SanaSampler
from cachedoctor.layouts.samplers.simpletuner import SimpleTunerSampler

SAMPLERS: dict[str, Sampler] = {
    s.name: s for s in (SimpleTunerSampler(), KohyaSampler(), SanaSampler(), OneTrainerSampler())
}
DEFAULT = "sana"


def sampler_for(trainer: str | None) -> tuple[Sampler, bool]:
    """The model for ``trainer`` and whether it is the trainer's own (``False``: the default)."""
    found = SAMPLERS.get(trainer or "")
    return (found, True) if found is not None else (SAMPLERS[DEFAULT], False)


__all__ = ["DEFAULT", "SAMPLERS", "sampler_for"]
