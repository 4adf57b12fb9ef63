"""The HTML report's run-level sections: a multi-GPU run's steps per rank and bucket
(``rank-imbalance``, ``dropped-bucket``) and a latent's channels against its peers
(``distribution-outlier``), each a chart and the table of the numbers drawn.

Every number comes from the finding's details as the JSON report holds them (docs/json.md): the
steps per rank (``steps``), each uneven bucket's steps per rank (``by_bucket``) and, drawn grey,
the rest of each rank's steps (``steps`` minus the uneven buckets': the buckets every rank takes
alike); the file's ``means`` and ``stds`` per channel next to ``peer_means`` / ``peer_stds``
(the medians of the folder's latents of that key) and their spreads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape
from typing import Any

from cachedoctor.findings import Finding
from cachedoctor.report.html_charts import EVEN, PALETTE, channel_dots, stacked_bars
from cachedoctor.report.outcome import ScanReport
from cachedoctor.report.text import displayable

NAMED = 7  # uneven buckets drawn in colours of their own; the rest share one
CHANNEL_FINDINGS = 50  # distribution outliers drawn; the JSON report holds every one
WIDE = 16  # ranks shown as columns of the bucket table, at most (beyond: min and max)


def rank_section(report: ScanReport, rel: Callable[[str], str]) -> str:
    """Each ``rank-imbalance`` finding as a chart of steps per rank, and ``dropped-bucket``'s
    buckets; "" when the scan judged no multi-GPU run."""
    found = [f for f in report.findings if f.kind in ("rank-imbalance", "dropped-bucket")]
    if not found:
        return ""
    parts = ['<section id="ranks"><h2>Steps per rank (multi-GPU run)</h2>']
    for n, f in enumerate(found):
        d = f.details
        parts.append(
            f'<div class="rank-finding" id="rank-{n}" data-kind="{_e(f.kind)}" data-path="{_e(f.path)}">'
            f"<h3>{_e(f.kind)}: dataset {_e(str(d.get('dataset', '?')))} in {_e(rel(f.path))}</h3>"
            f"<p>{_e(f.message)}</p>"
        )
        if f.kind == "dropped-bucket":
            parts.append(_count_table(f"dropped-{n}", "images that never train", d.get("dropped") or {}))
        elif "buckets" in d:  # the trainer refuses the split: images per bucket say why
            buckets = d["buckets"]
            parts.append(
                stacked_bars(
                    [(str(b), [v]) for b, v in buckets.items()],
                    [("images", PALETTE[0])],
                    title="Images per bucket",
                    unit="images",
                )
            )
            parts.append(_count_table(f"buckets-{n}", "images", buckets))
        else:
            parts.append(_steps(n, d))
        parts.append("</div>")
    parts.append("</section>")
    return "".join(parts)


def _steps(n: int, d: Any) -> str:
    """The chart and table of one uneven split."""
    steps: list[int] = list(d.get("steps") or [])
    by_bucket: dict[str, list[int]] = {str(b): list(v) for b, v in (d.get("by_bucket") or {}).items()}
    named = list(by_bucket)[:NAMED]
    rest = list(by_bucket)[NAMED:]
    series = [(f"bucket {b}", PALETTE[i % len(PALETTE)]) for i, b in enumerate(named)]
    if rest:
        series.append((f"{len(rest)} more uneven buckets", PALETTE[NAMED % len(PALETTE)]))
    series.append(("buckets every rank takes alike", EVEN))
    rows = []
    for r, total in enumerate(steps):
        values = [float(by_bucket[b][r]) for b in named]
        if rest:
            values.append(float(sum(by_bucket[b][r] for b in rest)))
        values.append(float(max(total - sum(by_bucket[b][r] for b in by_bucket), 0)))
        rows.append((f"rank {r}", values))
    chart = stacked_bars(rows, series, title="Steps per rank in the first epoch, by bucket", unit="steps")
    ranks = range(len(steps))
    wide = len(steps) <= WIDE
    head = (
        "".join(f'<th class="n">rank {r}</th>' for r in ranks)
        if wide
        else '<th class="n">min</th><th class="n">max</th>'
    )

    def cells(values: Sequence[int]) -> str:
        if wide:
            return "".join(f'<td class="n">{v}</td>' for v in values)
        return f'<td class="n">{min(values, default=0)}</td><td class="n">{max(values, default=0)}</td>'

    images = d.get("images") or {}
    body = [f'<tr data-row="steps"><th>steps (all buckets)</th><td class="n"></td>{cells(steps)}</tr>']
    for i, epoch in enumerate(d.get("later_epochs") or []):
        body.append(f'<tr data-row="epoch-{i + 2}"><th>steps, epoch {i + 2}</th><td class="n"></td>{cells(epoch)}</tr>')
    for b, shares in by_bucket.items():
        body.append(
            f'<tr data-row="bucket" data-bucket="{_e(b)}"><td>bucket {_e(b)}</td>'
            f'<td class="n">{_e(str(images.get(b, "")))}</td>{cells(shares)}</tr>'
        )
    notes = "".join(f'<p class="muted">{_e(note)}</p>' for note in d.get("notes") or [])
    return (
        f'{chart}<table class="rank-steps" id="rank-steps-{n}"><tr><th></th><th class="n">images</th>{head}</tr>'
        f"{''.join(body)}</table>{notes}"
    )


def _count_table(table_id: str, what: str, counts: dict[str, int]) -> str:
    rows = "".join(
        f'<tr data-bucket="{_e(str(b))}"><td>{_e(str(b))}</td><td class="n">{v}</td></tr>' for b, v in counts.items()
    )
    return f'<table id="{table_id}"><tr><th>bucket</th><th class="n">{_e(what)}</th></tr>{rows}</table>'


def channel_section(report: ScanReport, rel: Callable[[str], str]) -> str:
    """Each ``distribution-outlier`` finding's channels against its peers; "" when there is none
    (or the finding predates the per-channel details)."""
    found = [f for f in report.findings if f.kind == "distribution-outlier" and "means" in f.details]
    if not found:
        return ""
    parts = [
        '<section id="channels"><h2>Latent channels against their peers</h2><p class="muted">Each dot is '
        "the file's own value; the dash is the median of the folder's latents of that key, the band 3 "
        "robust deviations (1.4826 x MAD) either side.</p>"
    ]
    for n, f in enumerate(found[:CHANNEL_FINDINGS]):
        parts.append(_channels(n, f, rel))
    if len(found) > CHANNEL_FINDINGS:
        parts.append(f'<p class="muted">... and {len(found) - CHANNEL_FINDINGS} more (--format json lists all)</p>')
    parts.append("</section>")
    return "".join(parts)


def _channels(n: int, f: Finding, rel: Callable[[str], str]) -> str:
    d = f.details
    columns = ("means", "peer_means", "peer_mean_spread", "stds", "peer_stds", "peer_std_spread")
    values = {c: list(d.get(c) or []) for c in columns}
    every = range(len(values["means"]))  # a scale or shift: every channel is off
    one = {d["channel"]} if isinstance(d.get("channel"), int) else set()
    mean_off = one if d.get("stat") == "mean" else every if "shift" in d else ()
    std_off = one if d.get("stat") == "std" else every if "factor" in d else ()
    charts = channel_dots(
        "Mean per channel", values["means"], values["peer_means"], values["peer_mean_spread"], flagged=mean_off
    )
    charts += channel_dots(
        "Std per channel", values["stds"], values["peer_stds"], values["peer_std_spread"], flagged=std_off
    )
    head = "".join(
        f'<th class="n">{t}</th>'
        for t in ("mean", "peers' mean", "peers' spread", "std", "peers' std", "peers' spread")
    )
    rows = []
    for c in range(len(values["means"])):
        cells = "".join(f'<td class="n" data-col="{col}">{_num(_at(values[col], c))}</td>' for col in columns)
        rows.append(f'<tr data-channel="{c}"><td class="n">{c}</td>{cells}</tr>')
    return (
        f'<div class="channel-finding" id="channels-{n}" data-path="{_e(f.path)}">'
        f"<h3>{_e(rel(f.path))} ({_e(str(d.get('key', '')))}, {d.get('peers', '?')} peers)</h3><p>{_e(f.message)}</p>"
        f'<div class="charts">{charts}</div><table class="channel-stats" id="channel-stats-{n}">'
        f'<tr><th class="n">channel</th>{head}</tr>{"".join(rows)}</table></div>'
    )


def _at(values: list[Any], i: int) -> Any:
    return values[i] if i < len(values) else None


def _num(x: Any) -> str:
    """A detail's number as the JSON has it (already rounded), ``n/a`` for a non-finite one."""
    return "n/a" if x is None else repr(x)


def _e(text: str) -> str:
    return escape(displayable(text), quote=True)


__all__ = ["channel_section", "rank_section"]
