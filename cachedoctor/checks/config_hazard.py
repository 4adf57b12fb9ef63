"""``config-hazard``: a trainer setting known to lose or corrupt the cache.

The layout finds the settings while it reads the trainer's configuration (``DatasetPlan.hazards``,
see ``layouts/_hazards.py``); this rule reports each one the run makes real. A hazard that holds
only on several ranks is reported when the run's world size (``--world-size``, else the count
the trainer's configuration holds) reaches it, and not when the world size is not known. Nothing
in the cache is wrong yet, so the fix is ``none``: the message names the setting to change.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cachedoctor.checks.interface import Check, RunView
from cachedoctor.findings import Finding, Fix, Severity


class ConfigHazard(Check):
    kind = "config-hazard"
    severity = Severity.WARNING
    fix = Fix.NONE
    summary = "a trainer setting known to lose or corrupt the cache (e.g. vae_cache_clear_each_epoch on several GPUs)"
    why = (
        "Each comes from a public issue thread, named in the finding's details.reference. "
        "vae_cache_clear_each_epoch: true deletes the VAE cache at every epoch's end and rebuilds it "
        'split over the ranks; on 8 GPUs entries went missing ("Some images were not correctly cached '
        'during the VAE Cache operations") where one GPU was fine (bghira/SimpleTuner#848, #1474). '
        "Two image datasets with one cache_dir_vae: latents are named after the image's stem, so "
        "same-named images overwrite each other's entries; SimpleTuner refuses two identical strings "
        "(bghira/SimpleTuner#1074) but not two spellings of one folder (name-collision lists each "
        "file; this kind names the setting once per pair of datasets). A text-embed cache holding "
        "several model families' embeds is shared by runs of different families "
        "(bghira/SimpleTuner#1263, #1646 put {model_family} in cache paths for that reason). "
        "compress_disk_cache off over gzip files: SimpleTuner gunzips only with the option on, so "
        "it cannot load them and deletes each one whose error says 'invalid load key' (its reader "
        "data_backend/local.py; no issue thread found, bghira/SimpleTuner#1297 is the pull request "
        "'s3 backend fix for reading compressed cache'); on over plain files is harmless (its gunzip "
        "falls back to the raw bytes) and not reported. A cache on NFS, CIFS, Lustre and the like "
        "written by several machines: a network file system caches attributes and listings per "
        "machine, so one node can miss entries another wrote (bghira/SimpleTuner#1446: a "
        "multi-machine run stopped on a text embed missing from the cache); when num_machines is "
        "not in the config it is worded as a risk."
    )
    repair = (
        "none: the cache may be healthy today; the setting is what loses it. Change the setting the "
        "message names (details.change) and scan again. A finding that only holds on several GPUs "
        "is reported unless --world-size (or the trainer's num_processes) says the run has one GPU; "
        "when the count is not known, the message says it holds on several."
    )

    found = (
        "Judged once per scan from the trainer's configuration, as the layout reads it "
        "(--config multidatabackend.json with its config.json, and the accelerate config it "
        "names), and from the cache folders' file system and first files; a quick scan is "
        "enough. The hazards that hold only on several GPUs need the run's size: --world-size, "
        "or num_processes in the trainer's config."
    )

    def check_run(self, run: RunView) -> Iterable[Finding]:
        if run.dataset is None:
            return
        for hazard in run.dataset.hazards:
            ranks = run.world_size if run.world_size is not None else hazard.config_ranks
            if hazard.min_ranks > 1 and ranks is not None and ranks < hazard.min_ranks:
                continue  # a known single-GPU run is safe; an unknown count is said as a condition
            details: dict[str, Any] = {
                "hazard": hazard.name,
                "setting": hazard.setting,
                "change": hazard.change,
                "reference": hazard.reference,
            }
            on = ""
            if hazard.min_ranks > 1:
                details["ranks"] = ranks
                on = f" on {ranks} ranks" if ranks is not None else f" (if the run has {hazard.min_ranks} or more GPUs)"
            message = f"{hazard.setting}{on}: {hazard.message}; set {hazard.change} ({hazard.reference})"
            yield self.finding(hazard.path, message, **details)
