"""``distribution-outlier``: a latent whose values are unlike its peers' (deep).

A latent encoded with another VAE or another scaling, or from a blank image, has the right
shape, dtype and CRC; training on it silently degrades. What gives it away is its per-channel
mean and standard deviation (measured in the deep pass, ``formats/_channel_stats.py``) next to
the robust statistics (median and MAD) of the other latents of the same key and channel count
in the same folder. Natural images vary a lot (flat, textured, dark, bright), so a file is
flagged only when it is many robust deviations away *and* off by a clear factor; a folder of
fewer than :data:`MIN_PEERS` such latents is not judged.

Three scores per file, each on its peers' spread of that score:

- **scale**: the median over channels of ``log(std) - peers' median log(std)``, a factor shared
  by every channel (a missing or wrong ``scaling_factor``, a blank image);
- **shift**: the median over channels of the mean's offset from the peers' median, in units of
  the peers' median std (a Flux shift not applied);
- **channel**: the largest per-channel deviation of a mean or log-std once the file's own
  scale and shift are taken out (another VAE: its channels mean something else).

Thresholds, and the false-alarm and detection rates they give, are in docs/kinds.md.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import replace

from cachedoctor.checks._channel_profile import ChannelProfile
from cachedoctor.checks._peer_scores import peer_scores
from cachedoctor.checks.interface import Check, PeerEntry, PeerGroup
from cachedoctor.findings import Finding, Fix, Severity

MIN_PEERS = 20  # latents of one key and channel count in a folder, at least, to judge any of them
DEVIATIONS = 8.0  # robust deviations (MAD x 1.4826) a score must exceed
MIN_FACTOR = 1.3  # and a scale factor at least this far from 1 (identical files have a MAD of ~0)
#: A scale factor this far off needs fewer deviations: natural images spread their std over
#: ~10x (flat to grainy), so a 5.5x unscaled latent is only ~4 deviations from the median.
CLEAR_UP, CLEAR_DOWN, CLEAR_DEVIATIONS = 3.0, 1 / 8, 3.0
CLEAR_SHIFT = 3.5  # likewise a common mean shift of 3.5 std: healthy images stay within ~2.5 (99.9th percentile)
MIN_SHIFT = 0.15  # a common mean shift, in units of the peers' std, at least this large
CHANNEL_DEVIATIONS = 12.0  # one channel alone: its spread is tighter and noisier (small latents)
MIN_CHANNEL_STD = 1.1  # a channel's own std off by at least 3x (log units)
MIN_CHANNEL_MEAN = 1.0  # or its own mean off by at least this, in units of the peers' std


class DistributionOutlier(Check):
    kind = "distribution-outlier"
    severity = Severity.WARNING
    fix = Fix.RECOMPUTE
    summary = "a latent's per-channel mean/std far from its peers' (deep): wrong VAE, scaling or blank image"
    why = (
        "A latent encoded with another VAE, without the scaling factor (x1/0.18215: std about "
        "5.5x its peers), with SD1.5's factor in an SDXL cache, without the Flux shift, or "
        "from a blank or failed image decodes, has the right shape and passes every other "
        "check; the model trains on it as if it were right and learns the wrong thing, or "
        "the loss spikes on its batches. Only its values, next to its peers', say so."
    )
    repair = (
        "recompute: the item is encoded again with the configured encoder and the old file "
        "goes to the quarantine. A warning, because an unusual but real image can be an "
        "outlier too: look at the source image first (a blank image needs a new image, not "
        "a new latent), and pass --severity distribution-outlier=info to silence it."
    )
    deep_only = True

    def check_peers(self, group: PeerGroup) -> Iterable[Finding]:
        return self.outliers(group.entries)

    def outliers(self, entries: Iterable[PeerEntry]) -> Iterator[Finding]:
        """The findings among ``entries`` (one folder's files of one structure): the one rule
        the scan and repair's write-time check (``repair/peer_scale.py``) both judge by."""
        for (_family, channels), items in sorted(samples_of(entries).items()):
            if len(items) >= MIN_PEERS and channels > 0:
                yield from _with_channels(self._judge(channels, items), channels, items)

    def _judge(self, channels: int, items: list[tuple[str, bytes, str]]) -> Iterable[Finding]:
        n = len(items)
        scale, shift, own_log, own_mean, z_scale, z_shift, z_log, z_mean, channel_max = peer_scores(
            b"".join(b for _, b, _ in items), n, channels
        )
        peers = n - 1
        for i in range(n):
            # only files some score puts past the smallest threshold are looked at further
            if (
                abs(z_scale[i]) <= CLEAR_DEVIATIONS
                and abs(z_shift[i]) <= CLEAR_DEVIATIONS
                and channel_max[i] <= CHANNEL_DEVIATIONS
            ):
                continue
            path, key = items[i][0], items[i][2]
            factor = math.exp(scale[i])
            if _scale_off(factor, z_scale[i]):
                yield self._scale(path, key, channels, factor, z_scale[i], peers)
            elif _shift_off(shift[i], z_shift[i]):
                yield self.finding(
                    path,
                    f"{key}: mean shifted by {shift[i]:+.2f} std in every channel "
                    f"({abs(z_shift[i]):.0f} robust deviations from {peers} peers): Flux shift not applied?",
                    key=key,
                    channels=channels,
                    shift=round(shift[i], 4),
                    deviations=round(abs(z_shift[i]), 1),
                    peers=peers,
                )
            else:
                row = (
                    [own_log[c][i] for c in range(channels)],
                    [z_log[c][i] for c in range(channels)],
                    [own_mean[c][i] for c in range(channels)],
                    [z_mean[c][i] for c in range(channels)],
                )
                yield from self._channel(path, key, channels, row, peers)

    def _scale(self, path: str, key: str, channels: int, factor: float, z: float, peers: int) -> Finding:
        if factor >= 3:
            guess = "unscaled latents?"
        elif factor > 1:
            guess = "another scaling factor (SD1.5's in an SDXL cache)?"
        elif factor <= 0.2:
            guess = "a blank image?"
        else:
            guess = "another scaling factor, or a nearly blank image?"
        shown = (
            f"{factor:.1f}" if factor >= 0.95 else f"{factor:.2g}" if factor >= 1e-4 else "0"
        )  # a flat latent: std 0
        return self.finding(
            path,
            f"{key}: std {shown}x its peers ({abs(z):.0f} robust deviations from {peers} peers): {guess}",
            key=key,
            channels=channels,
            factor=round(factor, 4),
            deviations=round(abs(z), 1),
            peers=peers,
        )

    def _channel(
        self, path: str, key: str, channels: int, row: tuple[list[float], ...], peers: int
    ) -> Iterable[Finding]:
        """The worst single channel of one file: ``row`` holds its own log-std and mean
        deviations and their robust scores, per channel."""
        own_log, z_log, own_mean, z_mean = row
        worst: tuple[float, str, int, float] | None = None
        for what, dev, z, floor in (
            ("std", own_log, z_log, MIN_CHANNEL_STD),
            ("mean", own_mean, z_mean, MIN_CHANNEL_MEAN),
        ):
            for c in range(channels):
                if abs(z[c]) > CHANNEL_DEVIATIONS and abs(dev[c]) > floor and (worst is None or abs(z[c]) > worst[0]):
                    worst = (abs(z[c]), what, c, dev[c])
        if worst is None:
            return
        z_c, what, c, dev_c = worst
        offset = f"{dev_c:+.2f} std" if what == "mean" else f"{math.exp(dev_c):.2f}x"
        yield self.finding(
            path,
            f"{key}: channel {c} {what} {offset} off its peers ({z_c:.0f} robust deviations "
            f"from {peers} peers) while the others agree: another VAE?",
            key=key,
            channels=channels,
            channel=c,
            stat=what,
            deviation=round(dev_c, 4),
            deviations=round(z_c, 1),
            peers=peers,
        )


def _with_channels(
    findings: Iterable[Finding], channels: int, items: list[tuple[str, bytes, str]]
) -> Iterable[Finding]:
    """Each finding with the file's per-channel mean and std and its peers' in its details
    (``_channel_profile.py``), worked out once for a group that has a finding."""
    profile: ChannelProfile | None = None
    where: dict[tuple[str, str], int] = {}
    for finding in findings:
        if profile is None:
            profile = ChannelProfile(b"".join(b for _, b, _ in items), len(items), channels)
            where = {(path, key): i for i, (path, _, key) in enumerate(items)}
        i = where[(finding.path, finding.details["key"])]
        yield replace(finding, details={**finding.details, **profile.details(i)})


def samples_of(entries: Iterable[PeerEntry]) -> dict[tuple[str, int], list[tuple[str, bytes, str]]]:
    """``(key family, channels) -> [(path, stats, key as the file names it)]``: the latents
    judged together (a key family's peers, keynames; the message names the key a file holds)."""
    samples: dict[tuple[str, int], list[tuple[str, bytes, str]]] = defaultdict(list)
    for entry in entries:
        for key, stats in entry.stats:
            name = next((t.label for t in entry.tensors if t.key == key), key or "<root>")
            samples[(key, len(stats) // 8)].append((entry.path, stats, name))
    return samples


def typical_std(stats: bytes) -> float:
    """One file's typical standard deviation: the median over its channels (what a refusal
    shows next to its peers')."""
    from cachedoctor.formats._channel_stats import decode_stats

    stds = sorted(x if math.isfinite(x) else 0.0 for x in decode_stats(stats)[1])
    mid = len(stds) // 2
    return 0.0 if not stds else stds[mid] if len(stds) % 2 else (stds[mid - 1] + stds[mid]) / 2


def _scale_off(factor: float, z: float) -> bool:
    """Many deviations and a clear factor, or a factor no healthy image reaches and fewer."""
    if abs(z) > DEVIATIONS and not (1 / MIN_FACTOR < factor < MIN_FACTOR):
        return True
    return (factor >= CLEAR_UP and z > CLEAR_DEVIATIONS) or (factor <= CLEAR_DOWN and z < -CLEAR_DEVIATIONS)


def _shift_off(shift: float, z: float) -> bool:
    return (abs(z) > DEVIATIONS and abs(shift) > MIN_SHIFT) or (abs(shift) >= CLEAR_SHIFT and abs(z) > CLEAR_DEVIATIONS)
