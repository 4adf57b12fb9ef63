"""``cachedoctor manifest build``: one row per cache file with its source's size, mtime and xxh3
(an ``s3://`` source's ETag instead: ``manifest_build.py``)."""

from __future__ import annotations

from typing import Annotated

import typer

from cachedoctor.cli.environment import current
from cachedoctor.cli.option_groups import DatasetOptions, S3Options, TrainerPathOptions, with_option_groups
from cachedoctor.errors import UsageError
from cachedoctor.exit_status import ExitStatus

manifest_app = typer.Typer(
    help="Build a manifest of a dataset: per item its size, mtime, xxh3 and cache path(s).", no_args_is_help=True
)


@manifest_app.command("build")
@with_option_groups
def manifest_build(
    ctx: typer.Context,
    *,
    dataset: Annotated[
        str | None,
        typer.Argument(
            help="The dataset (kohya: image folder; OneTrainer: cache folder).",
            show_default=False,
            metavar="DATASET_DIR",
        ),
    ] = None,
    output: Annotated[
        str, typer.Option("--output", "-o", metavar="FILE", help="Where to write the manifest (.jsonl).")
    ] = "manifest.jsonl",
    dataset_layout: DatasetOptions,
    trainer: TrainerPathOptions,
    s3: S3Options,
) -> int:
    """Write one row per cache file: its source's path, size, mtime and xxh3, and the cache path."""
    import os
    import time

    from cachedoctor.cli.settings import resolve
    from cachedoctor.layouts import LayoutError, plan_for
    from cachedoctor.manifest_build import build
    from cachedoctor.options import layout_name, layout_options, s3_settings

    env = current()
    # The dataset is named here, never by a configured manifest (this writes one) or paths.
    settings = resolve(ctx, dataset_layout, s3)
    if dataset is None and not settings.config.value:
        raise UsageError(
            "no DATASET_DIR given; name the dataset folder, or pass the trainer's dataset config (--config)"
        )
    if settings.layout.value == "manifest":
        raise UsageError("--layout manifest reads a manifest; pick the trainer's layout to build one")
    if dataset and "://" in dataset:
        # The folder layouts plan through the file system (kohya reads every image's header, and
        # both it and OneTrainer walk folders); only a SimpleTuner config plans a bucket, by one LIST.
        raise UsageError(
            f"{dataset}: manifest build plans a dataset folder on disk; for a SimpleTuner aws dataset "
            "pass --config multidatabackend.json (its images are listed in the bucket, never read)"
        )
    targets = [os.path.abspath(dataset)] if dataset else []
    started = time.perf_counter()
    if dataset and not os.path.isdir(dataset):
        what = (
            "is a file, not a folder; name the dataset folder"
            if os.path.exists(dataset)
            else ("no such folder; check the path (and that its disk is mounted)")
        )
        raise LayoutError(targets[0], what)
    plan, line = plan_for(
        layout_name(settings),
        targets,
        layout_options(settings, trainer.model_family, trainer.output_dir, manifest=False),
    )
    if plan is None:
        raise LayoutError(
            targets[0] if targets else ".",
            "no trainer layout recognised here; pass the trainer's dataset config (--config) or --layout NAME",
        )
    result = build(plan, output, exclude=tuple(settings.exclude.value or ()), s3=s3_settings(settings))
    print(
        f"{line}\nwrote {result.rows} rows for {plan.items} items to {output} in {time.perf_counter() - started:.2f}s",
        file=env.stdout,
    )
    for source in result.unreadable:
        if "://" in source:
            env.error(f"{source}: gone from the bucket since it was planned; build again once the dataset is settled")
        else:
            env.error(f"{source}: cannot read to hash it; fix its permissions, then build again")
    return ExitStatus.ERROR if result.unreadable else ExitStatus.CLEAN


__all__ = ["manifest_app", "manifest_build"]
