"""The per-channel numbers a ``distribution-outlier`` finding carries, so that a report can show
them: the file's own mean and std per channel next to its peers' (the folder's latents of the
same key and channel count).

The finding's message gives one score (a factor, a shift, the worst channel); a person judging
whether the image is really wrong, and the HTML report's chart, need the channels themselves.
They go into the finding's details (and so the JSON report), computed only for a group that has
a finding: ``peer_means`` and ``peer_stds`` are the medians over the group (the centre the
scores are measured from), ``peer_mean_spread`` and ``peer_std_spread`` its robust spread
(1.4826 x MAD), all from the same recorded ``2*C`` little-endian float32 values the scores use.
Values are rounded to 4 significant digits; a non-finite value (a tampered state row) is
``None`` (valid JSON, unlike NaN).
"""

from __future__ import annotations

import math
import sys
from array import array
from typing import Any

_DIGITS = 4


def rounded(x: float) -> float | None:
    """``x`` to 4 significant digits, or ``None`` when it is NaN or infinite."""
    return float(f"{x:.{_DIGITS}g}") if math.isfinite(x) else None


class ChannelProfile:
    """The peers' per-channel centre and spread of one group, and each file's own values."""

    def __init__(self, raw: bytes, n: int, channels: int) -> None:
        values = array("f")
        values.frombytes(raw)
        if sys.byteorder == "big":
            values.byteswap()  # recorded little-endian
        self.values = values
        self.channels = channels
        width = 2 * channels
        columns = [values[c::width].tolist() for c in range(width)]  # means, then stds
        finite = [[x for x in col if math.isfinite(x)] or [0.0] for col in columns]
        centres = [_median(col) for col in finite]
        spreads = [1.4826 * _median([abs(x - mid) for x in col]) for col, mid in zip(finite, centres, strict=True)]
        self.centre = centres
        self.spread = spreads
        self.n = n

    def details(self, i: int) -> dict[str, Any]:
        """File ``i``'s channels and its peers', as the finding's details hold them."""
        c = self.channels
        own = self.values[2 * c * i : 2 * c * (i + 1)].tolist()
        return {
            "means": [rounded(x) for x in own[:c]],
            "stds": [rounded(x) for x in own[c:]],
            "peer_means": [rounded(x) for x in self.centre[:c]],
            "peer_stds": [rounded(x) for x in self.centre[c:]],
            "peer_mean_spread": [rounded(x) for x in self.spread[:c]],
            "peer_std_spread": [rounded(x) for x in self.spread[c:]],
        }


def _median(xs: list[float]) -> float:
    ordered = sorted(xs)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


__all__ = ["ChannelProfile", "rounded"]
