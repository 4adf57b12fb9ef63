"""``cachedoctor explain [KIND]``: what a finding kind means, why it breaks training, what repair does.

The texts live on the checks themselves (``summary``, ``why``, ``repair``); how a kind is found
is read off the check (``deep_only``, which of ``check_file``/``check_peers``/``check_entry`` it
implements). Plain text wrapped at 88 columns. Imports nothing heavy: no torch, no numpy.
"""

from __future__ import annotations

import difflib
import textwrap

from cachedoctor.checks import CHECKS, KINDS, Check
from cachedoctor.findings import Fix

WIDTH = 88
_INDENT = "  "

#: Appended to "What repair does" for every kind that can end in a recompute.
RECOMPUTE_NOTE = (
    "A recompute encodes the item again from its source through --encoder (diffusers-vae:PATH for "
    "images; transformers-text:PATH or an adapter for captions), at the size the layout expects and in "
    "the format of a healthy peer file, and the old file, if any, goes to the quarantine (undo: "
    "cachedoctor quarantine restore RUN CACHE_ROOT). It is not lossless: the encoder's posterior mean, "
    "not the sample the trainer drew. It is blocked, and changes nothing, without the dataset "
    "(--config, --layout or --manifest), without an --encoder for the item's role, when the source is "
    "gone, or when the layout does not record the entry's size: kohya keeps a latent's bucket only "
    "inside the entry, so move an unreadable one away and let sd-scripts re-cache it (or pass a "
    "manifest with latent_hw); re-cache OneTrainer text caches with OneTrainer."
)

_DATASET = ("--config multidatabackend.json (SimpleTuner), --layout kohya|onetrainer (auto-detected "
            "when the folder shows it) or --manifest FILE")


class UnknownKind(LookupError):
    """A KIND that names no check; ``suggestion`` is the closest known kind, if any."""

    def __init__(self, kind: str, suggestion: str | None) -> None:
        self.kind = kind
        self.suggestion = suggestion
        hint = f"did you mean '{suggestion}'?" if suggestion else f"`cachedoctor explain` lists the {len(CHECKS)} kinds"
        super().__init__(f"unknown finding kind '{kind}'; {hint}")

    def __str__(self) -> str:
        return str(self.args[0])


def normalise(kind: str) -> str:
    """``Device_Tagged`` -> ``device-tagged``."""
    return kind.strip().lower().replace("_", "-")


def check_for(kind: str) -> Check:
    """The registered check for ``kind`` (underscores and case tolerated), or :class:`UnknownKind`."""
    name = normalise(kind)
    if name in KINDS:
        return KINDS[name]
    close = difflib.get_close_matches(name, list(KINDS), n=1, cutoff=0.6)
    raise UnknownKind(kind, close[0] if close else None)


def how_found(check: Check) -> str:
    """Quick or ``--deep``; from the files alone or only with the dataset."""
    cls = type(check)
    per_file = cls.check_file is not Check.check_file
    peers = cls.check_peers is not Check.check_peers
    entry = cls.check_entry is not Check.check_entry
    if check.deep_only:
        text = "Needs --deep: a quick scan does not read tensor data."
    elif per_file or peers:
        how = " and ".join(w for w, on in (("from each file alone", per_file),
                                            ("by comparing each file with the files of its folder", peers)) if on)
        text = f"A quick scan finds it {how} (no --deep, no dataset needed)."
        if "(deep)" in check.summary:
            text += " The part marked (deep) above needs --deep."
    else:
        text = ""
    if peers:
        text += (" Peers are the files that share its format, container and tensor keys; only a strict "
                 "majority is trusted, so a folder split half and half is not reported.")
    if entry and (per_file or peers):
        text += (" When the scan knows the dataset (--config, --layout or --manifest), it is also judged "
                 "against what each item needs.")
    elif entry:
        text = (f"Needs the dataset: scan with {_DATASET}. A scan of the cache files alone never reports "
                "it. A quick scan is enough.")
    return text.strip()


#: Kinds whose default fix is not ``recompute`` but whose findings are sometimes recomputed: the
#: leading-batch form of ``batch-leak`` (finding fix ``recompute``), and an ``unsafe-pickle`` file the
#: dataset expects (the planner quarantines it and makes the item again).
SOMETIMES_RECOMPUTED = frozenset({"batch-leak", "unsafe-pickle"})


def _can_recompute(check: Check) -> bool:
    return check.fix is Fix.RECOMPUTE or check.kind in SOMETIMES_RECOMPUTED


def _wrap(text: str, indent: str = _INDENT) -> str:
    return textwrap.fill(" ".join(text.split()), width=WIDTH, initial_indent=indent, subsequent_indent=indent,
                         break_on_hyphens=False, break_long_words=False)


def explain(kind: str) -> str:
    """Everything about one kind, as plain text (no trailing newline)."""
    check = check_for(kind)
    repair = [_wrap(check.repair)] + ([_wrap(RECOMPUTE_NOTE)] if _can_recompute(check) else [])
    sections = [
        "\n".join([check.kind,
                   f"{_INDENT}default severity: {check.severity.value}",
                   f"{_INDENT}fix: {check.fix.value}"]),
        "What it means\n" + _wrap(check.summary),
        "Why it breaks training\n" + _wrap(check.why),
        "What repair does\n" + "\n\n".join(repair),
        "How to find it\n" + _wrap(how_found(check)),
    ]
    return "\n\n".join(sections)


def listing() -> str:
    """Every kind with its one-line summary, in the scan's order (no trailing newline)."""
    width = max(len(c.kind) for c in CHECKS) + 2
    lines = [f"{len(CHECKS)} finding kinds; `cachedoctor explain KIND` says more about one:", ""]
    for check in CHECKS:
        head = f"{_INDENT}{check.kind:<{width}}"
        lines.append(textwrap.fill(check.summary, width=WIDTH, initial_indent=head,
                                   subsequent_indent=" " * len(head), break_on_hyphens=False,
                                   break_long_words=False))
    return "\n".join(lines)


__all__ = ["RECOMPUTE_NOTE", "SOMETIMES_RECOMPUTED", "UnknownKind", "WIDTH", "check_for", "explain", "how_found", "listing", "normalise"]
