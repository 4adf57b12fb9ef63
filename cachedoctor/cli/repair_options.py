"""The options only ``cachedoctor repair`` takes: what to recompute with and on what, which
findings to act on, how to treat an interrupted run and blocked files.

Split from ``cli/repair.py`` (as the shared options live in ``cli/options.py``) so that the command
reads as what it does with them: parse, resolve the settings once, call the core.
"""

from __future__ import annotations

import enum
from typing import Annotated

import typer

from cachedoctor.cli.completion import complete_kind_list


class Posterior(str, enum.Enum):
    TRAINER = "trainer"
    MODE = "mode"
    SAMPLE = "sample"


DryRunOption = Annotated[bool, typer.Option("--dry-run", help="Scan and show the plan; change nothing.")]

EncoderOption = Annotated[
    list[str] | None,
    typer.Option(
        "--encoder",
        metavar="SPEC",
        help="NAME[:ARG] or module:factory[:ARG]; give one for images and one for captions.",
    ),
]

GpusOption = Annotated[
    int | None, typer.Option("--gpus", metavar="N", min=1, help="One recompute worker per GPU (cuda:0..N-1).")
]

DeviceOption = Annotated[
    str, typer.Option("--device", metavar="DEVICE", help="Device for recompute workers without --gpus.")
]

RecomputeWorkersOption = Annotated[
    int,
    typer.Option(
        "--workers",
        "-j",
        metavar="N",
        min=1,
        help="Recompute worker processes on --device (the scan's readers: the workers setting).",
    ),
]

BatchSizeOption = Annotated[int, typer.Option("--batch-size", metavar="N", min=1, help="Items per encoder batch.")]

OnlyOption = Annotated[
    str | None,
    typer.Option(
        "--only",
        metavar="KINDS",
        help="Repair only findings of these kinds (comma-separated).",
        autocompletion=complete_kind_list,
    ),
]

ResumeOption = Annotated[
    bool, typer.Option("--resume", help="Finish an interrupted repair (the default whenever one is found).")
]

FreshOption = Annotated[
    bool, typer.Option("--fresh", help="Give up an interrupted repair and start a new run (its quarantine stays).")
]

DeepOption = Annotated[
    bool | None,
    typer.Option("--deep", help="Read every file's data first (the default): bad CRCs, NaN/Inf.", show_default=False),
]

QuickOption = Annotated[
    bool,
    typer.Option("--quick", help="Read metadata only: leaves bad CRCs and NaN/Inf it has not seen before."),
]

KeepBlockedOption = Annotated[
    bool,
    typer.Option(
        "--keep-blocked",
        help="Leave unreadable files that cannot be recomputed in place (default: quarantine them, "
        "so the trainer re-caches them). Unsafe pickles are always quarantined.",
    ),
]

PosteriorOption = Annotated[
    Posterior,
    typer.Option(
        "--posterior",
        help="Recomputed latents: as the trainer caches them (default), the posterior's mode, "
        "or a sample (mean + std * noise, seeded by --seed and the entry's path).",
    ),
]

SeedOption = Annotated[
    int, typer.Option("--seed", metavar="N", help="Where a sample is drawn: the noise seed (per file).")
]
