"""A ``distribution-outlier`` finding carries the channels a report draws: the file's own mean and
std per channel, the medians of its folder's latents and their robust spread, measured on the
same values the scores use; a non-finite recorded value is ``null``, never NaN in the JSON."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from cachedoctor.checks._channel_profile import ChannelProfile, rounded
from cachedoctor.scan import ScanOptions, scan
from fixtures.builders.natural_latents import DEFECTS, healthy_set


def test_the_unscaled_latents_channels_and_its_peers_are_in_the_details(tmp_path: Path) -> None:
    latents = healthy_set(0, 31, h=16, w=16)  # 16x16: every value is sampled, so numpy sees the same
    latents[7] = DEFECTS["unscaled"](latents[7])
    for i, x in enumerate(latents):
        np.savez(tmp_path / f"img_{i:06d}.npz", latents=x)
    [finding] = [f for f in scan([str(tmp_path)], ScanOptions(deep=True, workers=1, state=None)).findings]
    assert finding.kind == "distribution-outlier" and finding.path.endswith("img_000007.npz")
    d = finding.details
    stack = np.stack([x.astype(np.float64) for x in latents])  # files x channels x H x W
    means, stds = stack.mean(axis=(2, 3)), stack.std(axis=(2, 3))
    assert d["means"] == pytest.approx(means[7].tolist(), rel=2e-3, abs=1e-4)
    assert d["stds"] == pytest.approx(stds[7].tolist(), rel=2e-3)
    assert d["peer_means"] == pytest.approx(np.median(means, axis=0).tolist(), rel=2e-3, abs=1e-4)
    assert d["peer_stds"] == pytest.approx(np.median(stds, axis=0).tolist(), rel=2e-3)
    mad = 1.4826 * np.median(np.abs(stds - np.median(stds, axis=0)), axis=0)
    assert d["peer_std_spread"] == pytest.approx(mad.tolist(), rel=2e-3)
    assert min(d["stds"]) > 3 * max(d["peer_stds"])  # what the chart shows: every channel ~5.5x
    assert json.loads(json.dumps(finding.to_json()))["details"] == d


def test_a_non_finite_recorded_value_is_null_and_left_out_of_the_medians() -> None:
    rows = [(0.0, 1.0), (0.5, 2.0), (float("nan"), float("inf")), (1.0, 3.0)]  # one channel per file
    raw = b"".join(struct.pack("<2f", mean, std) for mean, std in rows)
    profile = ChannelProfile(raw, len(rows), 1)
    tampered = profile.details(2)
    assert (tampered["means"], tampered["stds"]) == ([None], [None])
    assert profile.details(0)["peer_means"] == [0.5] and profile.details(0)["peer_stds"] == [2.0]
    assert json.dumps(tampered, allow_nan=False)  # valid JSON
    assert (rounded(1 / 3), rounded(123456.0), rounded(float("-inf"))) == (0.3333, 123500.0, None)
