"""Scans split into jobs that do not talk to each other (SLURM job arrays, Kubernetes indexed
jobs): each job scans one shard and writes a part (``scan --shard K/N``); one more step joins
the parts into the report a single scan would have printed (``cachedoctor merge``).

A part records the settings its scan ran with and a fingerprint of them, so the merge judges
the parts by the same settings (``fail-on``, severity overrides, the baseline) without being
told them again, and refuses parts that do not belong together: another cache or other
options (another fingerprint), another run (the launcher's job id differs), another number of
shards, a shard twice or a shard missing. Each of those is one line naming the part.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from cachedoctor import __version__
from cachedoctor.errors import PathError, UsageError
from cachedoctor.settings import Setting, Settings, checked

if TYPE_CHECKING:
    from cachedoctor.report import ScanReport
    from cachedoctor.scan.part import Part
    from cachedoctor.sharding.interface import Shard

#: Settings that change how a scan runs, not what it reports: parts may differ in them.
_RUN_ONLY = ("workers", "progress", "progress_interval")
#: Where a launcher names the run all its tasks belong to.
RUN_ID_VARIABLES = ("CACHEDOCTOR_RUN_ID", "SLURM_ARRAY_JOB_ID", "SLURM_JOB_ID")
#: Missing shards named in the line that says so (a part may claim 65536 shards).
_NAMED = 8


def run_id(environ: Mapping[str, str] | None = None) -> str:
    """The run a job-array task belongs to: ``CACHEDOCTOR_RUN_ID``, else SLURM's array job id;
    empty where the launcher gives none (a Kubernetes indexed job: set ``CACHEDOCTOR_RUN_ID`` to
    the job's name)."""
    env = os.environ if environ is None else environ
    return next((env[v] for v in RUN_ID_VARIABLES if env.get(v)), "")


def scan_shard(
    settings: Settings,
    shard: Shard,
    *,
    baseline: str | None = None,
    write_baseline: str | None = None,
    model_family: str | None = None,
    output_dir: str | None = None,
    progress: Any = None,
    environ: Mapping[str, str] | None = None,
) -> Part:
    """Scan ``shard`` of the settings' targets; the part, ready to be written."""
    from cachedoctor.api import prepare
    from cachedoctor.scan.engine import scan_part

    if write_baseline:
        raise UsageError("--write-baseline records the whole scan's findings: pass it to `cachedoctor merge`")
    job = prepare(None, settings, model_family, output_dir)
    part = scan_part(job.roots, replace(job.options, shard=shard), progress, job.plan, job.existing)
    part.settings = {
        "values": {name: setting.value for name, setting in settings.items()},  # (JSON makes tuples lists)
        "sources": {name: setting.source for name, setting in settings.items()},
        "file": settings.file,
        "baseline": os.path.abspath(baseline) if baseline else None,
        "model_family": model_family,
        "output_dir": output_dir,
        "cwd": os.getcwd(),  # relative paths (the targets, a config's) are the tasks' folder's
    }
    part.fingerprint = fingerprint(part.settings, shard.count)
    part.run = run_id(environ)
    return part


def fingerprint(recorded: Mapping[str, Any], count: int) -> str:
    """What parts to be merged must share: the version, the number of shards and every
    setting that decides the report."""
    values = {k: v for k, v in recorded["values"].items() if k not in _RUN_ONLY}
    text = json.dumps(
        [
            __version__,
            count,
            values,
            recorded.get("baseline"),
            recorded.get("model_family"),
            recorded.get("output_dir"),
        ],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def load_parts(paths: Sequence[str]) -> list[Part]:
    """The parts in ``paths`` (files, or folders holding ``*.json`` parts), checked to belong
    together and to cover every shard once."""
    from cachedoctor.scan.part import Part

    files = _files(paths)
    parts: list[tuple[str, Part]] = []
    for path in files:
        try:
            with open(path, encoding="utf-8") as handle:
                part = Part.from_json(json.load(handle))
            _check_settings(part.settings)
            parts.append((path, part))
        except OSError as exc:
            raise PathError(path, f"cannot be read ({exc.strerror or exc}); check the path") from None
        except (ValueError, KeyError, TypeError, RecursionError, UsageError):
            raise PathError(
                path, "is not a part written by `cachedoctor scan --shard K/N`; pass the parts' files"
            ) from None
    first_path, first = parts[0]
    seen: dict[int, str] = {}
    for path, part in parts:
        if part.shard.count != first.shard.count:
            raise PathError(path, f"is shard {part.shard.text}, and {first_path} one of {first.shard.count}: "
                            "merge the parts of one run")  # fmt: skip
        if part.run != first.run:
            raise PathError(path, f"belongs to run {part.run or '(none)'}, and {first_path} to run "
                            f"{first.run or '(none)'}: merge the parts of one run")  # fmt: skip
        if part.fingerprint != first.fingerprint:
            raise PathError(path, f"was scanned with other targets or options than {first_path} "
                            "(or another cachedoctor version): merge the parts of one run")  # fmt: skip
        if part.shard.index in seen:
            raise PathError(
                path, f"is shard {part.shard.text} again (so is {seen[part.shard.index]}): pass one part per shard"
            )
        seen[part.shard.index] = path
    missing = [str(k) for k in range(first.shard.count) if k not in seen]
    if missing:
        named = ", ".join(missing[:_NAMED]) + (f" and {len(missing) - _NAMED} more" if len(missing) > _NAMED else "")
        raise UsageError(
            f"shard {named} of {first.shard.count} is missing ({len(parts)} part(s) given); "
            "run it (scan --shard K/N with the same arguments), then merge all the parts"
        )
    return [part for _, part in parts]


def merge_parts(parts: list[Part], *, write_baseline: str | None = None) -> ScanReport:
    """The report of the scan the parts are shards of, judged by the settings they recorded."""
    from cachedoctor.api import prepare, report_of
    from cachedoctor.scan.merge import merge

    recorded = parts[0].settings
    settings = Settings(
        **{name: Setting(value, recorded["sources"].get(name, "part")) for name, value in _values(recorded).items()},
        file=recorded.get("file"),
    )
    write_baseline = os.path.abspath(write_baseline) if write_baseline else None  # the caller's folder's
    with _scanned_in(recorded.get("cwd")):  # the parts' relative paths are the tasks' folder's
        job = prepare(None, settings, recorded.get("model_family"), recorded.get("output_dir"))
        result = merge(parts, job.options)
        baseline = None if write_baseline else recorded.get("baseline")
        return report_of(result, settings, job, baseline=baseline, write_baseline=write_baseline)


@contextmanager
def _scanned_in(cwd: str | None) -> Iterator[None]:
    """The folder the tasks scanned from, as the current one, for as long as the merge plans:
    a target, a config named relatively, and the paths inside a config, are relative to it."""
    if not cwd or cwd == os.getcwd():
        yield
        return
    here = os.getcwd()
    try:
        os.chdir(cwd)
    except OSError as exc:
        raise PathError(
            cwd,
            f"the parts were scanned from this folder, and it is not here ({exc.strerror or exc}); "
            "run the merge where the tasks ran (the cache mounted as they saw it)",
        ) from None
    try:
        yield
    finally:
        os.chdir(here)


def _check_settings(recorded: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` unless the part's recorded settings are ones a scan could have had
    (each checked as a config file's value is), so that the merge can judge by them."""
    values, sources = recorded["values"], recorded["sources"]
    if not isinstance(values, dict) or not isinstance(sources, dict):
        raise ValueError("the recorded settings are not a table")
    for name, value in values.items():
        if value is not None and value != []:
            checked(name, value)
    for key in ("file", "baseline", "model_family", "output_dir", "cwd"):
        if recorded.get(key) is not None and not isinstance(recorded[key], str):
            raise ValueError(f"{key}: not a string")


def _values(recorded: Mapping[str, Any]) -> dict[str, Any]:
    values = recorded["values"]  # JSON has no tuples: the settings' sequences are tuples
    return {name: tuple(v) if isinstance(v := values.get(name), list) else v for name in Settings.NAMES}


def _files(paths: Sequence[str]) -> list[str]:
    files: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".json"))
            if not found:
                raise PathError(path, "holds no part (*.json); pass the folder the shards wrote their parts to")
            files.extend(found)
        elif os.path.exists(path):
            files.append(path)
        else:
            raise PathError(path, "no such file or folder; check the path")
    if not files:
        raise UsageError("name the parts to merge: the files `scan --shard K/N -o FILE` wrote, or their folder")
    return files


__all__ = ["fingerprint", "load_parts", "merge_parts", "run_id", "scan_shard"]
