"""The options commands share, as ``Annotated`` aliases (borg's ``define_exclusion_group`` in
Typer terms): one definition per option, so ``--exclude`` or ``--layout`` reads the same in
every command's help and parses the same way. The runs of them that several commands take
together (the dataset, kohya, selection, terminal, S3 options...) are grouped in
``option_groups.py``; a command takes a group as one parameter.

* the dataset options: ``--layout``, ``--config``, ``--manifest``, ``--model-family``, ``--output-dir``
* the scan selection: ``--exclude``, ``--state``/``--no-state``, ``--sample``, ``--workers``,
  ``--file-timeout`` (scan and ``settings show``)
* what ``repair`` and ``recover`` share: ``PATH...``, ``--yes`` and the dataset options

Only light modules are imported here: the layout names come from ``settings.py``, not from the
layouts (``--version`` and ``explain`` must not load them).
"""

from __future__ import annotations

import enum
from typing import Annotated

import typer

from cachedoctor.report.interface import OutputFormat
from cachedoctor.report.outcome import FailOn
from cachedoctor.settings import LAYOUT_NAMES, MAX_BATCH_SIZE, MAX_WORLD_SIZE


#: ``--layout``'s choices; ``layouts.LayoutName`` by value (a test keeps the two equal).
class LayoutChoice(str, enum.Enum):
    AUTO = "auto"
    SIMPLETUNER = "simpletuner"
    KOHYA = "kohya"
    ONETRAINER = "onetrainer"
    MUSUBI = "musubi"
    AI_TOOLKIT = "ai-toolkit"
    DIFFUSION_PIPE = "diffusion-pipe"
    MANIFEST = "manifest"
    NONE = "none"


assert tuple(c.value for c in LayoutChoice) == LAYOUT_NAMES  # settings' list (a test holds LayoutName equal too)


# --- the terminal options (scan, repair, recover, explain, quarantine) ---
class ColorChoice(str, enum.Enum):
    AUTO = "auto"
    ALWAYS = "always"
    NEVER = "never"


ColorOption = Annotated[
    ColorChoice,
    typer.Option(
        "--color",
        help="Colour and styles: auto (a terminal, unless NO_COLOR is set; FORCE_COLOR forces them), always, never.",
        case_sensitive=False,
    ),
]
QuietOption = Annotated[
    bool, typer.Option("--quiet", "-q", help="Print only the findings and errors: no progress, no notes.")
]
VerboseOption = Annotated[bool, typer.Option("--verbose", "-v", help="Name every file, not only the first few.")]

# --- the dataset options (scan, repair, recover, manifest build, settings show) ---
LayoutOption = Annotated[
    LayoutChoice,
    typer.Option(
        "--layout",
        metavar="NAME",
        help=(
            "How the trainer maps dataset items to cache files: auto, simpletuner, kohya, onetrainer, musubi, "
            "ai-toolkit, diffusion-pipe, manifest or none."
        ),
        case_sensitive=False,
    ),
]
ConfigOption = Annotated[
    str | None,
    typer.Option(
        "--config",
        metavar="FILE",
        help=(
            "The trainer's dataset config, any trainer's (told by its content): SimpleTuner's multidatabackend.json, "
            "a kohya or musubi-tuner dataset TOML, a diffusion-pipe dataset or training TOML, an ai-toolkit job YAML."
        ),
    ),
]
KohyaConfigOption = Annotated[
    str | None,
    typer.Option(
        "--kohya-config",
        metavar="FILE",
        help="kohya sd-scripts dataset config (TOML): its image folders, and each image's bucket to check and recompute.",
    ),
]
_BUCKETS = "kohya (without --kohya-config, or below its values): "
ResolutionOption = Annotated[
    str | None,
    typer.Option("--resolution", metavar="W[,H]", help=_BUCKETS + "sd-scripts' --resolution (the bucket area)."),
]
EnableBucketOption = Annotated[
    bool | None,
    typer.Option(
        "--enable-bucket/--no-enable-bucket", help=_BUCKETS + "sd-scripts' --enable_bucket.", show_default=False
    ),
]
MinBucketResoOption = Annotated[
    int | None,
    typer.Option("--min-bucket-reso", metavar="PX", min=1, help=_BUCKETS + "sd-scripts' --min_bucket_reso (256)."),
]
MaxBucketResoOption = Annotated[
    int | None,
    typer.Option("--max-bucket-reso", metavar="PX", min=1, help=_BUCKETS + "sd-scripts' --max_bucket_reso (1024)."),
]
BucketResoStepsOption = Annotated[
    int | None,
    typer.Option("--bucket-reso-steps", metavar="PX", min=1, help=_BUCKETS + "sd-scripts' --bucket_reso_steps (64)."),
]
BucketNoUpscaleOption = Annotated[
    bool | None,
    typer.Option(
        "--bucket-no-upscale/--bucket-upscale", help=_BUCKETS + "sd-scripts' --bucket_no_upscale.", show_default=False
    ),
]
ManifestOption = Annotated[
    str | None,
    typer.Option("--manifest", metavar="FILE", help="A manifest (.jsonl or .csv) naming each cache file's source."),
]
ModelFamilyOption = Annotated[
    str | None,
    typer.Option(
        "--model-family", metavar="NAME", help="SimpleTuner model family / kohya arch suffix (sdxl, flux, sd3, ...)."
    ),
]
OutputDirOption = Annotated[
    str | None,
    typer.Option("--output-dir", metavar="DIR", help="SimpleTuner output_dir, for {output_dir} in the config."),
]

# --- the scan selection (scan, settings show, and repair's and recover's own scans) ---
ExcludeOption = Annotated[
    list[str] | None,
    typer.Option(
        "--exclude",
        help="Skip files and folders matching this glob (relative to each PATH, or a name); repeatable.",
        show_default=False,
        metavar="GLOB",
    ),
]
StateOption = Annotated[
    str | None,
    typer.Option(
        "--state",
        help="The state database that lets a rescan read only changed files (default: .cachedoctor/state.sqlite in each cache folder). With --shard K/N, shard K keeps PATH with .shard-K-of-N before its suffix.",
        metavar="PATH",
    ),
]
InventoryOption = Annotated[
    str | None,
    typer.Option(
        "--inventory",
        metavar="MANIFEST",
        help="List s3:// targets from this S3 Inventory manifest.json (a path or s3:// URL) instead of LIST requests.",
    ),
]
NoStateOption = Annotated[
    bool, typer.Option("--no-state", help="Read every file; neither use nor write the state database.")
]
SampleOption = Annotated[
    str | None,
    typer.Option(
        "--sample",
        help="Deep-read this share of the files, rotating through the cache run by run (never-checked files first): 5% or 3/10.",
        metavar="SHARE",
    ),
]
WorkersOption = Annotated[
    int | None, typer.Option("--workers", "-j", metavar="N", min=1, help="Reader processes (default: one per CPU).")
]
FileTimeoutOption = Annotated[
    float | None,
    typer.Option(
        "--file-timeout",
        help="Seconds to judge one file; a file that takes longer is reported (read-timeout) and its reader stopped.  [default: 10]",
        show_default=False,
        metavar="SECONDS",
    ),
]

# --- scan's own verdict settings ---
PathsArgument = Annotated[
    list[str] | None,
    typer.Argument(
        help="Cache folders or files to scan (kohya: the image folder).", show_default=False, metavar="PATH..."
    ),
]
DeepOption = Annotated[
    bool | None,
    typer.Option(
        "--deep",
        help="Also read the data: CRC-32 of every zip member and NaN/Inf in every floating tensor.",
        show_default=False,
    ),
]
FailOnOption = Annotated[
    FailOn, typer.Option("--fail-on", help="Exit 1 when a finding is at or above this severity.", case_sensitive=False)
]
ReportOutputOption = Annotated[
    str | None, typer.Option("--output", "-o", metavar="FILE", help="Write the report to FILE instead of stdout.")
]
WriteBaselineOption = Annotated[
    str | None,
    typer.Option(
        "--write-baseline",
        help="Record today's findings in FILE, so later scans with --baseline FILE report only new ones.",
        metavar="FILE",
    ),
]
FormatOption = Annotated[
    OutputFormat,
    typer.Option(
        "--format", help="Report format (html: one self-contained page with charts; use -o FILE).", case_sensitive=False
    ),
]

# --- what repair and recover share ---
RepairPathsArgument = Annotated[
    list[str] | None,
    typer.Argument(help="Cache folders or files (kohya: the image folder).", show_default=False, metavar="PATH..."),
]
RepairManifestOption = Annotated[
    str | None, typer.Option("--manifest", metavar="FILE", help="A manifest naming each cache file's source.")
]
YesOption = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before changing anything.")]

# --- nothing to check (scan, repair, recover, settings show) ---
AllowEmptyOption = Annotated[
    bool | None,
    typer.Option(
        "--allow-empty",
        help="Accept targets that hold no cache file (and no dataset entry) instead of exit 2.",
        show_default=False,
    ),
]

NO_PATH = (
    "no PATH given; name a cache folder, or pass --config multidatabackend.json, --kohya-config dataset.toml "
    "or --manifest FILE"
)

__all__ = [
    "NO_PATH",
    "AllowEmptyOption",
    "BucketNoUpscaleOption",
    "BucketResoStepsOption",
    "ColorChoice",
    "ColorOption",
    "ConfigOption",
    "DeepOption",
    "EnableBucketOption",
    "ExcludeOption",
    "FailOnOption",
    "FileTimeoutOption",
    "FormatOption",
    "KohyaConfigOption",
    "LayoutChoice",
    "LayoutOption",
    "ManifestOption",
    "MaxBucketResoOption",
    "MinBucketResoOption",
    "ModelFamilyOption",
    "NoStateOption",
    "OutputDirOption",
    "PathsArgument",
    "QuietOption",
    "RepairManifestOption",
    "RepairPathsArgument",
    "ReportOutputOption",
    "ResolutionOption",
    "SampleOption",
    "StateOption",
    "VerboseOption",
    "WorkersOption",
    "WriteBaselineOption",
    "YesOption",
]

# --- the training run (rank-imbalance) ---
WorldSizeOption = Annotated[
    int | None,
    typer.Option(
        "--world-size",
        metavar="N",
        min=1,
        max=MAX_WORLD_SIZE,
        help="GPUs (ranks) of the training run, to predict rank imbalance (default: the trainer's config).",
    ),
]
BatchSizeOption = Annotated[
    int | None,
    typer.Option(
        "--batch-size",
        metavar="B",
        min=1,
        max=MAX_BATCH_SIZE,
        help="Per-GPU batch size of the training run, to predict rank imbalance (default: the trainer's config).",
    ),
]

# --- how s3:// targets are reached (scan, manifest build, repair, recover, quarantine, settings show) ---
S3EndpointUrlOption = Annotated[
    str | None,
    typer.Option(
        "--s3-endpoint-url",
        metavar="URL",
        help="S3-compatible endpoint for s3:// targets (MinIO, R2, Ceph); default: AWS_ENDPOINT_URL, else AWS.",
    ),
]
S3ProfileOption = Annotated[
    str | None,
    typer.Option("--s3-profile", metavar="NAME", help="AWS profile for s3:// targets (default: AWS_PROFILE)."),
]
S3RegionOption = Annotated[
    str | None,
    typer.Option("--s3-region", metavar="REGION", help="Region of s3:// targets (default: the AWS chain's)."),
]
