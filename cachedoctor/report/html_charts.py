"""Inline SVG charts for ``--format html``, drawn in Python.

The HTML report must open as one file on a machine without network (a cluster's login node, an
artifact downloaded from CI), so no chart library, font or script is fetched: each chart is an
``<svg>`` element written here from the numbers the JSON report holds. Every label is escaped
(bucket names and keys come from the cache). Colours are the Okabe-Ito palette, which stays
distinguishable for the common colour-vision deficiencies.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from html import escape

#: Okabe-Ito: blue, orange, bluish green, vermillion, reddish purple, sky blue, yellow, black
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
EVEN = "#BBBBBB"  # the buckets every rank takes alike
_WIDTH = 760
_LABEL = 170  # the left column: rank, kind and folder names
_CLIP = 26  # characters of a label shown (a long path: its end)
_RIGHT = 70  # the right margin: totals


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def stacked_bars(
    rows: Sequence[tuple[str, Sequence[float]]], series: Sequence[tuple[str, str]], *, title: str, unit: str
) -> str:
    """Horizontal bars, one per row, each cut into the ``series`` (name, colour) in order.

    ``rows``: (label, one value per series); the row's total is written at the bar's end. Many
    rows (a 512-GPU run) get thinner bars, and labels only while they fit.
    """
    total = max((sum(values) for _, values in rows), default=0) or 1
    bar = max(3.0, min(22.0, 560 / max(len(rows), 1)))
    gap = bar * 0.35
    legend_h = 22 * math.ceil(len(series) / 3)
    height = 30 + len(rows) * (bar + gap) + 24 + legend_h
    span = _WIDTH - _LABEL - _RIGHT
    out = [_open(height, title), f'<text x="0" y="16" class="t">{escape(title)}</text>']
    y = 30.0
    labels = bar >= 10
    for label, values in rows:
        x = float(_LABEL)
        if labels:
            out.append(
                f'<text x="{_LABEL - 8}" y="{y + bar * 0.75:.1f}" text-anchor="end">{escape(clip(label))}</text>'
            )
        for (name, colour), value in zip(series, values, strict=True):
            if value <= 0:
                continue
            w = span * value / total
            out.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{bar:.1f}" fill="{colour}">'
                f"<title>{escape(label)}: {escape(name)}: {_fmt(value)} {escape(unit)}</title></rect>"
            )
            x += w
        if labels:
            out.append(f'<text x="{x + 6:.1f}" y="{y + bar * 0.75:.1f}">{_fmt(sum(values))}</text>')
        y += bar + gap
    out.append(_axis(y, span, total, unit))
    y += 30
    for i, (name, colour) in enumerate(series):
        lx, ly = _LABEL + (i % 3) * (span / 3), y + (i // 3) * 22
        out.append(f'<rect x="{lx:.1f}" y="{ly:.1f}" width="12" height="12" fill="{colour}"/>')
        out.append(f'<text x="{lx + 18:.1f}" y="{ly + 11:.1f}">{escape(name)}</text>')
    out.append("</svg>")
    return "".join(out)


def clip(label: str) -> str:
    """A chart label: the end of a long path (the table beside the chart has it whole)."""
    return label if len(label) <= _CLIP else "…" + label[-(_CLIP - 1) :]


def _axis(y: float, span: float, total: float, unit: str) -> str:
    """A baseline under the bars with ticks at 0, half and the longest bar."""
    parts = [f'<line x1="{_LABEL}" y1="{y:.1f}" x2="{_LABEL + span:.1f}" y2="{y:.1f}" class="ax"/>']
    for share in (0.0, 0.5, 1.0):
        if share == 0.5 and total % 2 and float(total).is_integer():  # no half a finding
            continue
        x = _LABEL + span * share
        parts.append(f'<text x="{x:.1f}" y="{y + 14:.1f}" text-anchor="middle" class="s">{_fmt(total * share)}</text>')
    parts.append(f'<text x="{_LABEL + span + 6:.1f}" y="{y + 14:.1f}" class="s">{escape(unit)}</text>')
    return "".join(parts)


def channel_dots(
    title: str,
    own: Sequence[float | None],
    centre: Sequence[float | None],
    spread: Sequence[float | None],
    *,
    flagged: Collection[int] = (),
    deviations: float = 3.0,
) -> str:
    """One column per channel: the peers' median (a dash) with a band of ``deviations`` robust
    spreads around it, and the file's own value (a dot; red for the ``flagged`` channels, the
    ones the finding names: the check scores a channel after the file's own scale and shift are
    taken out, so a dot inside the band can still be the wrong one)."""
    channels = len(own)
    lows, highs = [], []
    for c in range(channels):
        mid, width = centre[c] or 0.0, (spread[c] or 0.0) * deviations
        lows.append(mid - width)
        highs.append(mid + width)
        if own[c] is not None:
            lows.append(own[c] or 0.0)
            highs.append(own[c] or 0.0)
    lo, hi = min(lows, default=0.0), max(highs, default=1.0)
    if hi - lo < 1e-9:
        lo, hi = lo - 1, hi + 1
    pad = (hi - lo) * 0.08
    lo, hi = lo - pad, hi + pad
    plot_h, top, left = 150.0, 26.0, 52.0
    step = max(12.0, min(48.0, 300 / max(channels, 1)))
    width = left + step * channels + 10

    def ty(v: float) -> float:
        return top + plot_h * (hi - v) / (hi - lo)

    out = [
        f'<svg role="img" width="{width:.0f}" height="{top + plot_h + 30:.0f}" '
        f'viewBox="0 0 {width:.0f} {top + plot_h + 30:.0f}"><title>{escape(title)}</title>',
        f'<text x="0" y="14" class="t">{escape(title)}</text>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" class="ax"/>',
    ]
    for v in (lo + pad, (lo + hi) / 2, hi - pad):
        out.append(f'<text x="{left - 4}" y="{ty(v) + 4:.1f}" text-anchor="end" class="s">{_fmt(v)}</text>')
    if lo < 0 < hi:
        out.append(f'<line x1="{left}" y1="{ty(0):.1f}" x2="{width - 10:.1f}" y2="{ty(0):.1f}" class="zero"/>')
    for c in range(channels):
        x = left + step * (c + 0.5)
        mid, band = centre[c] or 0.0, (spread[c] or 0.0) * deviations
        out.append(
            f'<rect x="{x - step * 0.3:.1f}" y="{ty(mid + band):.1f}" width="{step * 0.6:.1f}" '
            f'height="{max(ty(mid - band) - ty(mid + band), 1):.1f}" class="band"/>'
            f'<line x1="{x - step * 0.3:.1f}" y1="{ty(mid):.1f}" x2="{x + step * 0.3:.1f}" y2="{ty(mid):.1f}" class="mid"/>'
        )
        value = own[c]
        if value is not None:
            off = c in flagged
            out.append(
                f'<circle cx="{x:.1f}" cy="{ty(value):.1f}" r="4.5" class="{"off" if off else "on"}">'
                f"<title>channel {c}: {_fmt(value)} (peers {_fmt(mid)})</title></circle>"
            )
        if channels <= 32 or c % 4 == 0:
            out.append(f'<text x="{x:.1f}" y="{top + plot_h + 16:.1f}" text-anchor="middle" class="s">{c}</text>')
    out.append("</svg>")
    return "".join(out)


def _open(height: float, title: str) -> str:
    return (
        f'<svg role="img" width="{_WIDTH}" height="{height:.0f}" '
        f'viewBox="0 0 {_WIDTH} {height:.0f}"><title>{escape(title)}</title>'
    )


__all__ = ["EVEN", "PALETTE", "channel_dots", "clip", "stacked_bars"]
