"""The library API: :func:`audit` is ``cachedoctor scan`` without the command line.

It does everything that decides the verdict: the layout, the scan, the ``severity`` overrides,
the baseline and ``fail-on``. The CLI's ``scan`` only parses, resolves the settings and renders
what this returns, so a library caller gets the same findings and the same exit code::

    import sys
    from cachedoctor.api import audit, load_settings

    report = audit(["cache"], load_settings(deep=True), baseline="cachedoctor-baseline.json")
    sys.exit(report.exit_code)

``__all__`` below is the stable surface (docs/api.md documents every name in it, and a test
holds the two equal): the function, the settings loader, and the types it returns or raises,
re-exported here so a caller imports from one module. Other modules of the package may change
between minor versions. The package ships a ``py.typed`` marker: these signatures are checked
by a caller's type checker.

Problems that stop the audit (a missing target, a broken config or baseline) raise
:class:`~cachedoctor.errors.PathError`; settings that contradict each other raise
:class:`~cachedoctor.errors.UsageError`. Files it could not read are in the report (exit 2).
So is a scan with nothing to check, targets that hold no cache file and no dataset entry
(``report.nothing_to_check``, exit 2, ``report.empty_problem()`` says why) unless the settings'
``allow_empty`` accepts it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from cachedoctor.errors import PathError, UsageError
from cachedoctor.exit_status import ExitStatus
from cachedoctor.findings import Finding, Fix, Severity
from cachedoctor.report import FailOn, ScanReport, ScanSummary
from cachedoctor.report.summary import Counts, DatasetSummary, Problem
from cachedoctor.settings import COMMAND_LINE, Settings
from cachedoctor.settings import load as load_settings

if TYPE_CHECKING:  # pragma: no cover
    from cachedoctor.layouts.interface import DatasetPlan, Expected
    from cachedoctor.progress import Progress
    from cachedoctor.scan import ScanOptions, ScanResult
    from cachedoctor.sharding.ranks import RankGroup

MISSING = "no such file or folder; check the path (and that its disk is mounted)"


def require_existing(paths: Sequence[str]) -> list[str]:
    """``paths``, absolute; a missing one is the user's first problem, whatever the layout.
    Remote targets (``s3://bucket/prefix``) are kept as given: the scan's first LIST checks them."""
    from cachedoctor.stores.interface import is_remote

    targets = [p if is_remote(p) else os.path.abspath(p) for p in paths]
    for target in targets:
        if not is_remote(target) and not os.path.exists(target):
            if os.path.islink(target):  # a dangling link named on its own: say what it is
                raise PathError(
                    target,
                    f"a symlink to {os.readlink(target)}, which does not exist; scan its folder to have it "
                    "reported (broken-link) and quarantined by repair",
                )
            raise PathError(target, MISSING)
    return targets


def apply_severity(findings: list[Finding], overrides: Mapping[str, str]) -> list[Finding]:
    """``findings`` with the configured severity per kind (``[tool.cachedoctor.severity]``)."""
    if not overrides:
        return findings
    return sorted(
        (replace(f, severity=Severity(overrides[f.kind])) if f.kind in overrides else f for f in findings),
        key=Finding.sort_key,
    )


def audit(
    targets: Sequence[str] | None = None,
    settings: Settings | None = None,
    *,
    model_family: str | None = None,
    output_dir: str | None = None,
    baseline: str | None = None,
    write_baseline: str | None = None,
    progress: Progress | None = None,
    ranks: RankGroup | None = None,
) -> ScanReport:
    """Scan ``targets`` (default: the settings' ``paths``) as ``cachedoctor scan`` does.

    ``settings`` default to :func:`load_settings` (the environment and the config file
    of the current folder). ``write_baseline`` records today's findings there and then reports
    none of them, as ``--write-baseline`` does; ``baseline`` leaves out those recorded in it.
    ``progress(stage, done, total)`` is told how far the scan has got (:mod:`cachedoctor.progress`).
    ``ranks``: the ranks of a ``torchrun`` job (:class:`~cachedoctor.sharding.ranks.RankGroup`),
    each scanning its shard; every rank gets the same report, the whole cache's.
    """
    from cachedoctor.scan import scan

    settings = settings if settings is not None else load_settings()
    if baseline and write_baseline:
        raise UsageError("pass baseline or write_baseline, not both")
    try:
        job = prepare(targets, settings, model_family, output_dir)
    except Exception as exc:  # a rank that cannot plan the dataset: the others are told, rank 0 says it
        if ranks is None:
            raise
        ranks.fail(exc)
    options = job.options if ranks is None else replace(job.options, shard=ranks.shard, ranks=ranks)
    result = scan(job.roots, options, progress=progress, dataset=job.plan, watch=job.existing)
    return report_of(result, settings, job, baseline=baseline, write_baseline=write_baseline)


@dataclass(frozen=True)
class Job:
    """What a scan of the settings' targets is, before it runs (:func:`prepare`)."""

    options: ScanOptions
    plan: DatasetPlan | None
    layout_line: str | None
    existing: list[str]  # the targets named, absolute
    local: list[str]
    roots: list[str]  # what the scan walks: the targets, or the layout's cache folders
    model_family: str | None = None
    output_dir: str | None = None


def prepare(
    targets: Sequence[str] | None, settings: Settings, model_family: str | None = None, output_dir: str | None = None
) -> Job:
    """The scan the settings describe: its options, the layout's plan of the dataset, its roots."""
    from cachedoctor.layouts import plan_for
    from cachedoctor.options import layout_name, layout_options, scan_options

    given = list(settings.paths.value if targets is None else targets)
    if not given and not settings.config.value and not settings.kohya_config.value and not settings.manifest.value:
        raise UsageError("nothing to scan: name a cache folder, or set config, kohya-config or manifest")
    options = scan_options(settings, inventory=True)
    if options.sample is not None and options.state is None:
        raise UsageError("a sample chooses its files through the state database; it needs state")
    existing = require_existing(given)
    local, remote = _split(existing)
    _no_layout_for_urls(settings, local, remote)
    plan, layout_line = plan_for(layout_name(settings), local, layout_options(settings, model_family, output_dir))
    roots = _outermost_remote(plan.roots + remote) if plan is not None else existing
    if (
        options.inventory is not None
        and not any("://" in r for r in roots)
        and settings.inventory.source == COMMAND_LINE
    ):
        raise UsageError("--inventory lists s3:// targets, and none is named; name one (s3://bucket/prefix) or drop it")
    return Job(options, plan, layout_line, existing, local, roots, model_family, output_dir)


def report_of(
    result: ScanResult,
    settings: Settings,
    job: Job,
    *,
    baseline: str | None = None,
    write_baseline: str | None = None,
) -> ScanReport:
    """The verdict on a scan's result: severity overrides, the baseline, ``fail-on``, and what
    repair would do (the same for a whole scan and for the merge of its shards' parts)."""
    from cachedoctor.repair.preview import preview

    summary = ScanSummary.of(result)
    summary.findings = apply_severity(summary.findings, settings.severity.value)
    suppressed = None
    if (summary.empty or summary.unchecked) and not settings.allow_empty.value:
        write_baseline = None  # nothing was checked: no baseline records that as the norm
    if write_baseline or baseline:
        from cachedoctor import baseline as baselines  # (here: only a run that names one)
    if write_baseline:  # every finding is in the baseline just written (not read back: it may be a FIFO)
        baselines.write(write_baseline, summary.findings)
        summary.findings, suppressed = [], len(summary.findings)
        baseline = write_baseline
    elif baseline:
        summary.findings, suppressed = baselines.suppress(baseline, summary.findings)
    plan, local = job.plan, job.local
    return ScanReport(
        summary,
        FailOn(settings.fail_on.value),
        job.layout_line,
        suppressed=suppressed,
        baseline=baseline,
        baseline_written=bool(write_baseline),
        allow_empty=bool(settings.allow_empty.value),
        repair=preview(
            summary.findings,
            result.targets,
            lambda paths: _expected_again(settings, local, paths, job.model_family, job.output_dir),
            plan.layout_for if plan else None,  # per path: a tree that mixes trainers has one layout per part
        ),
    )


def _no_layout_for_urls(settings: Settings, local: list[str], remote: list[str]) -> None:
    """A trainer's layout named for ``s3://`` targets alone: the layouts plan a dataset from its
    folders on disk (kohya reads every image's size, OneTrainer its index); a remote dataset
    comes with the trainer's description of it, or as a plain cache (file and peer checks)."""
    named = str(settings.layout.value)
    described = settings.config.value or settings.kohya_config.value or settings.manifest.value
    if remote and not local and named not in ("auto", "none") and not described:
        raise UsageError(
            f"--layout {named} plans a dataset from its folders on disk, and {remote[0]} is in a bucket; "
            "scan it as a cache (no --layout), or describe the dataset: --config multidatabackend.json "
            "(SimpleTuner aws datasets) or --manifest"
        )


def _split(targets: list[str]) -> tuple[list[str], list[str]]:
    """``(local paths, remote URLs)``: the layouts plan local datasets; a remote target is a
    cache scanned as it is (its dataset, where a SimpleTuner config names one, comes from the
    config)."""
    from cachedoctor.stores.interface import is_remote

    return [t for t in targets if not is_remote(t)], [t for t in targets if is_remote(t)]


def _outermost_remote(roots: list[str]) -> list[str]:
    """``roots`` with each s3:// one that another contains left out: a remote prefix is listed and
    read once, whether the plan (a manifest's cache folders) or the command line named it."""
    from cachedoctor.layouts._manifest_remote import is_remote, outermost

    remote = [r for r in roots if is_remote(r)]
    return [r for r in roots if not is_remote(r)] + outermost(remote) if remote else roots


def _expected_again(
    settings: Settings, given: list[str], paths: set[str], model_family: str | None, output_dir: str | None
) -> dict[str, list[Expected]]:
    """The dataset's entries for ``paths``, planned again: the scan consumed its plan folder by
    folder (so a clean scan of millions of items keeps flat memory), and only a scan with
    findings pays for a second plan, to say what repair would do with them."""
    from cachedoctor.layouts import plan_for
    from cachedoctor.options import layout_name, layout_options

    plan, _line = plan_for(layout_name(settings), given, layout_options(settings, model_family, output_dir))
    return plan.by_path(paths) if plan is not None else {}


__all__ = [
    "MISSING",
    "Counts",
    "DatasetSummary",
    "ExitStatus",
    "FailOn",
    "Finding",
    "Fix",
    "PathError",
    "Problem",
    "ScanReport",
    "ScanSummary",
    "Settings",
    "Severity",
    "UsageError",
    "apply_severity",
    "audit",
    "load_settings",
    "require_existing",
]
