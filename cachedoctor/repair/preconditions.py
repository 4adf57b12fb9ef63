"""What must hold before a local repair scans or writes anything: its encoders are usable, the GPUs
it asks for are there, its cache folders are writable.

Split from ``run.py`` so that the run reads as its stages; each check here fails fast with one
line naming what is wrong and what to do (:class:`RepairError`), before any file is touched.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from cachedoctor.repair.model import RepairError

if TYPE_CHECKING:
    from cachedoctor.encoders import Encoder
    from cachedoctor.repair.outcome import RepairOptions
    from cachedoctor.scan import ScanResult


def load_encoders(options: RepairOptions) -> list[Encoder]:
    """The encoders ``--encoder`` names, constructed without weights (cheap: it validates paths),
    refusing ``--posterior sample`` with an image encoder that cannot report its posterior's std."""
    from cachedoctor.encoders import load_encoder
    from cachedoctor.extras import require_torch

    if options.encoders or options.gpus or options.device != "cpu":  # a recompute, or GPUs to count
        require_torch("repair")
    encoders = [load_encoder(spec) for spec in options.encoders]
    for spec, encoder in zip(options.encoders, encoders, strict=True):
        if options.posterior == "sample" and encoder.modality.value == "image" and not encoder.posterior_std:
            raise RepairError(
                spec, "--posterior sample needs an encoder that reports its posterior's std; use --posterior mode"
            )
    return encoders


def check_devices(options: RepairOptions) -> None:
    """``--device cuda`` needs a visible GPU and ``--gpus N`` at most as many as are visible."""
    from cachedoctor.repair.pool import visible_gpus

    if options.device.startswith("cuda") and not options.gpus and visible_gpus() == 0:
        raise RepairError(f"--device {options.device}", "no GPU is visible here; use --device cpu")
    if options.gpus:
        have = visible_gpus()
        if options.gpus > have:
            raise RepairError(
                f"--gpus {options.gpus}",
                f"only {have} GPU(s) are visible here; ask for at most {have}, or use --device cpu --workers N",
            )


def require_writable(roots: list[str]) -> None:
    """A read-only cache (a read-only mount, a folder of another user) cannot be repaired in
    place: one line naming it and what to do, before anything is written (``repair`` and
    ``recover --apply`` alike)."""
    from cachedoctor.fsinfo import not_writable
    from cachedoctor.statedir import quarantine_root, state_dir

    for root in roots:
        for own in (state_dir(root), quarantine_root(root)):  # where the replaced files go
            if os.path.lexists(own) and not os.path.isdir(own):
                raise RepairError(
                    own,
                    "is not a folder, and repair keeps what it replaces there; nothing was changed. "
                    "Move it aside, then run the same command again",
                )
        why = not_writable(root)
        if why is not None:
            fix = "remount it read-write" if "read-only" in why else "fix its permissions, or run as its owner"
            raise RepairError(
                root,
                f"the cache folder {why}, so nothing can be repaired in place and nothing was changed; make it "
                f"writable ({fix}), or copy the cache to a writable disk and run the same command on the copy",
            )


def require_something(before: ScanResult, options: RepairOptions) -> None:
    """Targets with nothing to check (no cache file, no dataset entry) stop a repair as they stop
    a scan (exit 2), unless ``--allow-empty``: a mistyped folder or prefix is not "repaired".
    Every repair path asks this of its first scan (``run.py``, ``store_flow.py``)."""
    if not (before.empty or before.unchecked) or options.allow_empty:
        return
    from cachedoctor.report.outcome import nothing_to_check

    excluded = bool(options.scan.exclude)
    if before.empty:
        others = before.stats.files_skipped + before.stats.files_dataset
        raise RepairError(
            *nothing_to_check(before.targets, dataset=before.dataset is not None, others=others, excluded=excluded)
        )
    raise RepairError(*nothing_to_check(before.unchecked, excluded=excluded))
