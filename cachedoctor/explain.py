"""``cachedoctor explain [KIND]``: what a finding kind means, why it breaks training, what repair does.

The texts live on the checks themselves (``summary``, ``why``, ``repair``); how a kind is found
is read off the check (``deep_only``, which of ``check_file``/``check_peers``/``check_entry`` it
implements). Plain text, wrapped at word boundaries to the terminal's width (80 columns when
there is no terminal; the CLI passes ``Environment.width``).

The checks import the format and layout types only for type checking, so importing them here
loads no reader, layout or scan module: ``explain`` starts as fast as ``--version``.
"""

from __future__ import annotations

import difflib
import functools
import textwrap
from dataclasses import dataclass
from typing import Any

from cachedoctor.findings import Fix

WIDTH = 80  #: the width when none is given (no terminal)
_INDENT = "  "
_METHODS = ("check_file", "check_peers", "check_entry")


@dataclass(frozen=True)
class KindInfo:
    """What ``explain`` says of one finding kind: its check's texts and how it is found."""

    kind: str
    severity: str
    fix: str
    summary: str
    why: str
    repair: str
    deep_only: bool = False
    per_file: bool = False  # implements check_file
    peers: bool = False  # implements check_peers
    entry: bool = False  # implements check_entry
    found: str = ""  # the check's own account of how it is found (run-level and state-bound kinds)

    @classmethod
    def of(cls, check: Any) -> KindInfo:
        """From a check object (a ``KindInfo`` is returned as it is)."""
        if isinstance(check, KindInfo):
            return check
        from cachedoctor.checks import Check

        per_file, peers, entry = (getattr(type(check), m) is not getattr(Check, m) for m in _METHODS)
        return cls(
            check.kind,
            check.severity.value,
            check.fix.value,
            check.summary,
            check.why,
            check.repair,
            bool(check.deep_only),
            per_file,
            peers,
            entry,
            getattr(check, "found", ""),
        )


@functools.cache
def catalogue() -> tuple[KindInfo, ...]:
    """Every finding kind, in the scan's order (``checks.CHECKS``)."""
    from cachedoctor.checks import CHECKS

    return tuple(KindInfo.of(c) for c in CHECKS)


def kinds() -> dict[str, KindInfo]:
    """Kind name -> its :class:`KindInfo`."""
    return {info.kind: info for info in catalogue()}


#: Appended to "What repair does" for every kind that can end in a recompute.
RECOMPUTE_NOTE = (
    "A recompute encodes the item again from its source through --encoder (diffusers-vae:PATH for "
    "images; transformers-text:PATH or an adapter for captions), at the size the layout expects and in "
    "the format of a healthy peer file, and the old file, if any, goes to the quarantine (undo: "
    "cachedoctor quarantine restore RUN CACHE_ROOT). It is not lossless: what the trainer caches (its "
    "posterior mean, or a sample drawn with a seed per entry: never the trainer's own draw). It is blocked, and changes nothing, without the dataset "
    "(--config, --layout or --manifest), without an --encoder for the item's role, when the source is "
    "gone, or when the layout does not record the entry's size: kohya keeps a latent's bucket only "
    "inside the entry, so move an unreadable one away and let sd-scripts re-cache it (or pass a "
    "manifest with latent_hw); re-cache OneTrainer text caches with OneTrainer."
)

_DATASET = (
    "--config multidatabackend.json (SimpleTuner), --layout kohya|onetrainer (auto-detected "
    "when the folder shows it) or --manifest FILE"
)


class UnknownKind(LookupError):
    """A KIND that names no check; ``suggestion`` is the closest known kind, if any."""

    def __init__(self, kind: str, suggestion: str | None) -> None:
        self.kind = kind
        self.suggestion = suggestion
        hint = (
            f"did you mean '{suggestion}'?"
            if suggestion
            else f"`cachedoctor explain` lists the {len(catalogue())} kinds"
        )
        super().__init__(f"unknown finding kind '{kind}'; {hint}")

    def __str__(self) -> str:
        return str(self.args[0])


def normalise(kind: str) -> str:
    """``Device_Tagged`` -> ``device-tagged``."""
    return kind.strip().lower().replace("_", "-")


def check_for(kind: str) -> KindInfo:
    """What the registered check for ``kind`` says (underscores and case tolerated), or :class:`UnknownKind`."""
    name = normalise(kind)
    known = kinds()
    if name in known:
        return known[name]
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    raise UnknownKind(kind, close[0] if close else None)


def how_found(check: KindInfo | Any) -> str:
    """Quick or ``--deep``; from the files alone or only with the dataset (a check or its :class:`KindInfo`)."""
    check = KindInfo.of(check)
    if check.found:
        return check.found
    per_file, peers, entry = check.per_file, check.peers, check.entry
    if check.deep_only:
        text = "Needs --deep: a quick scan does not read tensor data."
    elif per_file or peers:
        how = " and ".join(
            w
            for w, on in (
                ("from each file alone", per_file),
                ("by comparing each file with the files of its folder", peers),
            )
            if on
        )
        text = f"A quick scan finds it {how} (no --deep, no dataset needed)."
        if "(deep)" in check.summary:
            text += " The part marked (deep) above needs --deep."
    else:
        text = ""
    if peers:
        text += (
            " Peers are the files that share its format, container and tensor keys; only a strict "
            "majority is trusted, so a folder split half and half is not reported."
        )
    if entry and (per_file or peers):
        text += (
            " When the scan knows the dataset (--config, --layout or --manifest), it is also judged "
            "against what each item needs."
        )
    elif entry:
        text = (
            f"Needs the dataset: scan with {_DATASET}. A scan of the cache files alone never reports "
            "it. A quick scan is enough."
        )
    if not text:  # a rule about the run as a whole (Check.check_run)
        text = (
            f"Judged once per scan, about the run as a whole: needs the dataset ({_DATASET}); a quick "
            "scan is enough. Rules about ranks also need the run's size (--world-size, or the trainer's config)."
        )
    return text.strip()


#: Kinds whose default fix is not ``recompute`` but whose findings are sometimes recomputed: the
#: leading-batch form of ``batch-leak`` (finding fix ``recompute``), and an ``unsafe-pickle`` file the
#: dataset expects (the planner quarantines it and makes the item again).
SOMETIMES_RECOMPUTED = frozenset({"batch-leak", "unsafe-pickle"})


def _can_recompute(check: KindInfo) -> bool:
    return check.fix == Fix.RECOMPUTE.value or check.kind in SOMETIMES_RECOMPUTED


def _wrap(text: str, width: int, indent: str = _INDENT) -> str:
    return textwrap.fill(
        " ".join(text.split()),
        width=width,
        initial_indent=indent,
        subsequent_indent=indent,
        break_on_hyphens=False,
        break_long_words=False,
    )


def explain(kind: str, width: int = WIDTH) -> str:
    """Everything about one kind, as plain text wrapped to ``width`` (no trailing newline)."""
    check = check_for(kind)
    repair = [_wrap(check.repair, width)] + ([_wrap(RECOMPUTE_NOTE, width)] if _can_recompute(check) else [])
    sections = [
        "\n".join([check.kind, f"{_INDENT}default severity: {check.severity}", f"{_INDENT}fix: {check.fix}"]),
        "What it means\n" + _wrap(check.summary, width),
        "Why it breaks training\n" + _wrap(check.why, width),
        "What repair does\n" + "\n\n".join(repair),
        "How to find it\n" + _wrap(how_found(check), width),
    ]
    return "\n\n".join(sections)


def listing(width: int = WIDTH) -> str:
    """Every kind with its one-line summary, in the scan's order, wrapped to ``width`` (no
    trailing newline). Below 60 columns the summaries go under the names, not beside them."""
    every = catalogue()
    name = max(len(c.kind) for c in every) + 2
    intro = f"{len(every)} finding kinds; `cachedoctor explain KIND` says more about one:"
    lines = [_wrap(intro, width, ""), ""]
    for check in every:
        head = f"{_INDENT}{check.kind:<{name}}"
        if width - len(head) < 30:
            lines.append(f"{_INDENT}{check.kind}\n{_wrap(check.summary, width, _INDENT * 2)}")
            continue
        lines.append(
            textwrap.fill(
                check.summary,
                width=width,
                initial_indent=head,
                subsequent_indent=" " * len(head),
                break_on_hyphens=False,
                break_long_words=False,
            )
        )
    return "\n".join(lines)


__all__ = [
    "RECOMPUTE_NOTE",
    "SOMETIMES_RECOMPUTED",
    "WIDTH",
    "KindInfo",
    "UnknownKind",
    "catalogue",
    "check_for",
    "explain",
    "how_found",
    "kinds",
    "listing",
    "normalise",
]
