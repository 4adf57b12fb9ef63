"""``config-hazard``: each SimpleTuner setting planted alone in a copy of the healthy fixture
dataset, scanned through ``cachedoctor scan --config`` (in process), and its safe twin."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from cachedoctor.checks import KINDS, RunView
from cachedoctor.layouts import _simpletuner_config
from cachedoctor.layouts._hazards import accelerate_counts, sniff_gzip
from cachedoctor.layouts._simpletuner_hazards import hazards
from cachedoctor.layouts.interface import LayoutOptions
from cachedoctor.layouts.simpletuner import SimpleTunerLayout
from tests.cli_run import cli, scan_json

HEALTHY = Path(__file__).resolve().parents[3] / "fixtures" / "datasets" / "simpletuner-healthy"
CHECK = KINDS["config-hazard"]


@pytest.fixture
def st(tmp_path: Path) -> Path:
    """A copy of the healthy SimpleTuner dataset (configs, images, caches)."""
    root = tmp_path / "st"
    shutil.copytree(HEALTHY, root)
    return root


def edit(root: Path, name: str, change: Any) -> Path:
    """Apply ``change`` to ``config/<name>`` (a dict for config.json; a function of the dataset
    list for multidatabackend.json) and return the data-backend config's path."""
    path = root / "config" / name
    data = json.loads(path.read_text())
    if isinstance(change, dict):
        data.update(change)
    else:
        change(data)
    path.write_text(json.dumps(data, indent=2))
    return root / "config" / "multidatabackend.json"


def dataset(entries: list[dict], ident: str) -> dict:
    return next(e for e in entries if e["id"] == ident)


def hazard_findings(config: Path) -> list[tuple[str, str]]:
    doc = scan_json("--config", str(config), "--workers", "1")
    return [(f["path"], f["message"]) for f in doc["findings"] if f["kind"] == "config-hazard"]


def details(config: Path) -> list[dict]:
    doc = scan_json("--config", str(config), "--workers", "1")
    return [f["details"] for f in doc["findings"] if f["kind"] == "config-hazard"]


def clear_each_epoch(entries: list[dict]) -> None:
    dataset(entries, "renders")["vae_cache_clear_each_epoch"] = True


def test_healthy_config_has_no_hazard(st: Path) -> None:
    assert hazard_findings(st / "config" / "multidatabackend.json") == []


def test_clear_each_epoch_on_the_configs_eight_processes(st: Path) -> None:
    edit(st, "config.json", {"num_processes": 8})
    config = edit(st, "multidatabackend.json", clear_each_epoch)
    assert hazard_findings(config) == [
        (
            str(config),
            "dataset 'renders': vae_cache_clear_each_epoch: true on 8 ranks: SimpleTuner deletes this VAE cache "
            "at every epoch's end and rebuilds it split over the ranks; on more than one GPU entries go missing "
            '("Some images were not correctly cached during the VAE Cache operations") and training stops; '
            'set "vae_cache_clear_each_epoch": false (bghira/SimpleTuner#848, bghira/SimpleTuner#1474)',
        )
    ]
    assert details(config) == [
        {
            "hazard": "vae-cache-clear-each-epoch",
            "setting": "dataset 'renders': vae_cache_clear_each_epoch: true",
            "change": '"vae_cache_clear_each_epoch": false',
            "reference": "bghira/SimpleTuner#848, bghira/SimpleTuner#1474",
            "ranks": 8,
        }
    ]


def test_clear_each_epoch_on_one_process_is_safe(st: Path) -> None:
    edit(st, "config.json", {"num_processes": 1})
    assert hazard_findings(edit(st, "multidatabackend.json", clear_each_epoch)) == []


def test_clear_each_epoch_with_no_known_world_size_is_said_as_a_condition(st: Path) -> None:
    """`accelerate launch` with its default config on a multi-GPU box names no count anywhere:
    the hazard is said, on the condition; a run known to have one GPU is safe."""
    config = edit(st, "multidatabackend.json", clear_each_epoch)
    found = hazard_findings(config)
    assert len(found) == 1 and "(if the run has 2 or more GPUs)" in found[0][1]
    plan = SimpleTunerLayout().plan([], LayoutOptions(config=str(config)))
    assert list(CHECK.check_run(RunView(plan, world_size=1))) == []


def test_world_size_wins_over_the_configs_count(st: Path) -> None:
    edit(st, "config.json", {"num_processes": 8})
    config = edit(st, "multidatabackend.json", clear_each_epoch)
    plan = SimpleTunerLayout().plan([], LayoutOptions(config=str(config)))
    assert list(CHECK.check_run(RunView(plan, world_size=1))) == []
    (finding,) = CHECK.check_run(RunView(plan, world_size=2))
    assert finding.details["ranks"] == 2 and " on 2 ranks: " in finding.message


def test_process_count_from_the_accelerate_config(st: Path) -> None:
    (st / "accelerate.yaml").write_text(
        "compute_environment: LOCAL_MACHINE\ndeepspeed_config:\n  num_processes: 99\nnum_machines: 1\nnum_processes: 4\n"
    )
    edit(st, "config.json", {"accelerate_config": "accelerate.yaml"})
    (finding,) = details(edit(st, "multidatabackend.json", clear_each_epoch))
    assert finding["ranks"] == 4
    assert accelerate_counts(str(st / "accelerate.yaml")) == (4, 1)


def test_two_spellings_of_one_cache_dir_vae(st: Path) -> None:
    def share(entries: list[dict]) -> None:
        dataset(entries, "photos")["cache_dir_vae"] = "./cache/vae/renders/"

    config = edit(st, "multidatabackend.json", share)
    assert hazard_findings(config) == [
        (
            str(config),
            f"datasets 'photos' and 'renders': one cache_dir_vae ({st}/cache/vae/renders): their latents are named "
            "after the image's stem, so same-named images of the two datasets overwrite each other's entries "
            "(spelled differently, so SimpleTuner's own check (it compares the strings) lets it through); "
            "name-collision lists each file; set a cache_dir_vae of its own for each dataset "
            "(e.g. cache/vae/{model_family}/{id}) (bghira/SimpleTuner#1074)",
        )
    ]


def test_distinct_cache_dir_vae_are_safe(st: Path) -> None:
    def apart(entries: list[dict]) -> None:
        dataset(entries, "photos")["cache_dir_vae"] = "./cache/vae/photos"

    (st / "cache" / "vae" / "photos").mkdir()
    assert hazard_findings(edit(st, "multidatabackend.json", apart)) == []


def test_text_embed_cache_of_two_model_families(st: Path) -> None:
    text = st / "output" / "cache" / "text" / "sdxl"
    stray = text / f"{hashlib.md5(b'a cat').hexdigest()}-flux.pt"
    shutil.copyfile(next(text.glob("*-sdxl.pt")), stray)
    sdxl = len(list(text.glob("*-sdxl.pt")))
    found = hazard_findings(st / "config" / "multidatabackend.json")
    assert found == [
        (
            str(text),
            f"text_embeds dataset 'captions': cache_dir {text} holds embeds of flux (1), sdxl ({sdxl}): runs of "
            "different model families share this text-embed cache, kept apart only by the -<family> suffix: a "
            "scan of one run takes the other families' embeds for orphans (repair quarantines them), and the "
            "family is read off the most common suffix; set a cache_dir of its own per model family "
            "(cache/text/{model_family}) (bghira/SimpleTuner#1263, bghira/SimpleTuner#1646)",
        )
    ]


def gzip_one(folder: Path) -> Path:
    victim = sorted(folder.glob("*.pt"))[0]
    victim.write_bytes(gzip.compress(victim.read_bytes()))
    return victim


def test_gzip_files_with_compress_disk_cache_off(st: Path) -> None:
    gzip_one(st / "cache" / "vae" / "renders")
    assert hazard_findings(st / "config" / "multidatabackend.json") == [
        (
            str(st / "config" / "config.json"),
            f"dataset 'renders': compress_disk_cache off, but 1 of 4 sampled files in {st}/cache/vae/renders are "
            "gzip: SimpleTuner gunzips only with the option on, so it cannot load these files, and it deletes "
            "each one whose error says 'invalid load key'; set \"compress_disk_cache\": true in config.json "
            "(or re-cache this folder) (bghira/SimpleTuner#1297)",
        )
    ]


def test_gzip_files_with_compression_on_are_safe(st: Path) -> None:
    gzip_one(st / "cache" / "vae" / "renders")
    assert hazard_findings(edit(st, "config.json", {"compress_disk_cache": True})) == []


def test_a_datasets_own_compress_cache_is_the_setting(st: Path) -> None:
    gzip_one(st / "cache" / "vae" / "renders")

    def per_dataset(entries: list[dict]) -> None:
        dataset(entries, "renders")["compress_cache"] = False

    config = edit(st, "multidatabackend.json", per_dataset)
    edit(st, "config.json", {"compress_disk_cache": True})
    ((path, message),) = hazard_findings(config)
    assert path == str(config) and message.startswith("dataset 'renders': compress_cache: false, but 1 of 4")
    assert sniff_gzip(str(st / "cache" / "vae" / "renders"), ".pt") == (1, 4)


def network_mounts(tmp_path: Path, folder: Path) -> str:
    mounts = tmp_path / "mounts"
    mounts.write_text(f"/dev/sda1 / ext4 rw 0 0\nserver:/export {folder} nfs4 rw 0 0\n")
    return str(mounts)


@pytest.mark.parametrize(
    ("machines", "expected"),
    [
        (None, "cache folder on nfs4: if the run spans more than one machine, they all write and list this cache"),
        (2, "cache folder on nfs4: 2 machines (num_machines in {config}) write and list this cache at once"),
        (1, None),
    ],
)
def test_network_cache_written_by_several_machines(
    st: Path, tmp_path: Path, machines: int | None, expected: str | None
) -> None:
    if machines is not None:
        edit(st, "config.json", {"num_machines": machines})
    cfg = _simpletuner_config.load(LayoutOptions(config=str(st / "config" / "multidatabackend.json")))
    found = [
        h for h in hazards(cfg, mounts=network_mounts(tmp_path, st / "cache")) if h.name == "network-cache-multi-node"
    ]
    if expected is None:
        assert found == []
        return
    (hazard,) = found
    assert hazard.path == str(st / "cache" / "vae" / "renders")
    (finding,) = CHECK.check_run(RunView(_plan_with(hazard)))
    assert finding.path == hazard.path
    assert finding.message.startswith(expected.format(config=st / "config" / "config.json"))
    assert finding.message.endswith(
        "set a node-local cache_dir per machine (or cache once on one machine before the run) (bghira/SimpleTuner#1446)"
    )


def test_local_disk_is_no_network_hazard(st: Path) -> None:
    cfg = _simpletuner_config.load(LayoutOptions(config=str(st / "config" / "multidatabackend.json")))
    assert [h for h in hazards(cfg) if h.name == "network-cache-multi-node"] == []


def _plan_with(hazard: Any) -> Any:
    from cachedoctor.layouts.interface import DatasetPlan

    return DatasetPlan("simpletuner", [], hazards=[hazard])


def test_repair_leaves_a_hazard_alone(st: Path) -> None:
    edit(st, "config.json", {"num_processes": 8})
    config = edit(st, "multidatabackend.json", clear_each_epoch)
    before = config.read_bytes()
    code, out, err = cli("repair", "--config", str(config), "--dry-run", "--workers", "1")
    assert (code, err) == (0, "") and "1 finding(s) in 1 file(s)" in out and "nothing to repair" in out
    said = " ".join(out.split())
    assert "warning: config-hazard: " in said and 'set "vae_cache_clear_each_epoch": false' in said
    assert config.read_bytes() == before


def test_github_annotation_names_the_config(st: Path) -> None:
    def share(entries: list[dict]) -> None:
        dataset(entries, "photos")["cache_dir_vae"] = "cache/vae/renders"

    config = edit(st, "multidatabackend.json", share)
    code, out, err = cli("scan", "--config", str(config), "--workers", "1", "--format", "github", cwd=str(st))
    assert (code, err) == (1, "")  # 1: photos' latents are missing from renders' folder (missing-entry)
    assert (
        "::warning file=config/multidatabackend.json,title=config-hazard::datasets 'photos' and 'renders': "
        "one cache_dir_vae" in out
    )
    assert "SimpleTuner refuses to start with two identical cache_dir_vae" in out
