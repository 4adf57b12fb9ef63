"""ostris/ai-toolkit golden caches (``fixtures/trainers/aitoolkit``, written by ai-toolkit 27a03a9's own
dataloader caching; see its README): recognised with no hand-written manifest, no false alarm on
the pristine caches, every planted defect found by ``scan --deep``, and broken latents recomputed
into ai-toolkit's own file: key ``latent``, its metadata (the settings its name hashes), scaled
as ai-toolkit scales (``0.18215 * sample`` for SD 1.5, ``0.3611 * (sample - 0.1159)`` for Flux).

Uses only committed files, never ai-toolkit. The check of a repaired file is ai-toolkit's own
load rule, re-implemented from reading ``toolkit/dataloader_mixins.py`` (``get_latent_path``:
``<stem>_<hash of the info>.safetensors``; ``get_latent``: ``safetensors.load_file(path)['latent']``).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import torch
from cli_run import cli
from PIL import Image
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from cachedoctor.layouts import _aitoolkit_rules as rules

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "trainers"
GOLD = FIXTURES / "aitoolkit"
VAES = {"sd15": FIXTURES / "models" / "sd", "flux": FIXTURES / "models" / "flux"}


@pytest.fixture
def aitk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "aitk"
    shutil.copytree(GOLD, root, ignore=shutil.ignore_patterns("make_golden.py", "*.json", "*.pt"))
    monkeypatch.chdir(root)  # the job's folder_path is relative to the folder ai-toolkit runs in
    return root


def scan(*args: str) -> list[tuple[str, str]]:
    code, out, err = cli("scan", "--deep", "--no-state", "--format", "json", *args)
    assert err == "", err
    return sorted({(f["kind"], os.path.relpath(f["path"])) for f in json.loads(out)["findings"]})


def latents(family: str = "sd15") -> list[Path]:
    return sorted(Path(f"{family}/images/_latent_cache").glob("*.safetensors"))


def latent_of(image: str, *, flip: bool = False, family: str = "sd15", resolution: int = 0) -> Path:
    """The golden latent of ``image`` (its metadata names the image, the flip and the crop)."""
    found = []
    for path in latents(family):
        with safe_open(str(path), "pt") as f:
            meta = f.metadata()
        if meta["filename"] == image and ("flip_x" in meta) == flip:
            found.append((int(meta["crop_width"]) * int(meta["crop_height"]), path))
    return sorted(found)[resolution][1]


@pytest.mark.parametrize("args", [["--config", "sd15.yaml"], ["--config", "flux.yaml"], ["sd15/images"], ["flux"]])
def test_pristine_caches_have_no_finding_and_name_the_layout(aitk: Path, args: list[str]) -> None:
    code, out, err = cli("scan", "--deep", "--no-state", *args)
    assert (code, err) == (0, ""), out
    assert "layout: ai-toolkit (" in out and "No findings" in out


def _replace(path: Path, latent: torch.Tensor) -> None:
    with safe_open(str(path), "pt") as f:
        meta = f.metadata()
    save_file({"latent": latent}, str(path), metadata=meta)


def _plant(defect: str) -> tuple[list[str], list[tuple[str, str]]]:
    """Plant one defect; return the scan arguments and the findings they must give."""
    config = ["--config", "sd15.yaml"]
    victim = latent_of("a_land.png")
    rel = str(victim)
    if defect == "missing":
        victim.unlink()
        return config, [("missing-entry", rel)]
    if defect == "orphan":  # the image is gone: its latents and text embeddings too
        os.remove("sd15/images/d_square.png")
        gone = [str(p) for p in Path("sd15/images").rglob("d_square_*.safetensors")]
        return config, [("orphan-entry", p) for p in gone]
    if defect == "stale-image":
        later = time.time() + 3600
        os.utime("sd15/images/a_land.png", (later, later))
        return ["sd15/images"], [("stale-entry", str(p)) for p in latents() if p.name.startswith("a_land_")]
    if defect == "resized-image":  # without the config the latent's own placement says it no longer fits
        with Image.open("sd15/images/b_tall.png") as image:
            image.resize((100, 190)).save("sd15/images/b_tall.png")
        os.utime("sd15/images/b_tall.png", (1e9, 1e9))  # an old time: judged by content
        return ["sd15/images"], [("stale-entry", str(p)) for p in latents() if p.name.startswith("b_tall_")]
    if defect == "other-bucket":
        _replace(victim, torch.randn(4, 10, 10))
        return config, [("shape-mismatch", rel)]
    if defect == "nan":
        tensor = load_file(rel)["latent"]
        tensor[0, 0, 0] = float("nan")
        _replace(victim, tensor)
        return config, [("non-finite", rel)]
    if defect == "truncated":
        victim.write_bytes(victim.read_bytes()[:-64])
        return config, [("corrupt-archive", rel)]
    if defect == "torch-zip":  # what an earlier repair wrote: ai-toolkit's load_file fails on it
        torch.save({"latent": load_file(rel)["latent"].clone()}, rel)  # (a copy: load_file maps the file)
        return config, [("corrupt-archive", rel)]
    if defect == "renamed":  # a latent whose settings do not hash to its name: ai-toolkit never finds it
        odd = victim.with_name("a_land_" + "A" * 22 + ".safetensors")
        shutil.copy(victim, odd)
        return ["sd15/images"], [("orphan-entry", str(odd))]
    if defect == "caption":  # a new caption: a new text-embedding name; the old one is left behind
        old = [str(p) for p in Path("sd15/images/_t_e_cache").glob("a_land_*") if "cxJtIU" not in p.name]
        Path("sd15/images/a_land.txt").write_text("a different caption\n")
        return config, [("missing-entry", p) for p in _texts("a_land.png")] + [("orphan-entry", p) for p in old]
    if defect == "resolution":  # a new resolution in the job: new names, the old latents left behind
        text = Path("sd15.yaml").read_text().replace("resolution: [96, 128]", "resolution: [96, 112]")
        Path("sd15.yaml").write_text(text)
        made = {str(p) for p in latents()}
        want = _wanted_latents()
        return config, [("missing-entry", p) for p in sorted(want - made)] + [
            ("orphan-entry", p) for p in sorted(made - want)
        ]
    raise AssertionError(defect)


def _texts(image: str) -> list[str]:
    [dataset] = rules.load_job_config("sd15.yaml")
    path = f"sd15/images/{image}"
    caption = rules.cache_caption(rules.raw_caption(path, dataset), dataset)
    return [os.path.relpath(rules.text_name(path, rules.text_info(caption, "sd1")))]


def _wanted_latents() -> set[str]:
    [dataset] = rules.load_job_config("sd15.yaml")
    out = set()
    for image in sorted(p for p in Path("sd15/images").iterdir() if p.suffix in (".png", ".jpg")):
        size = rules.image_size(str(image))
        for where in rules.buckets(size, dataset):
            for flip in (False, True):
                info = rules.latent_info(image.name, where, dataset, flip_x=flip)
                out.add(os.path.relpath(rules.latent_name(str(image), info)))
    return out


DEFECTS = (
    "missing",
    "orphan",
    "stale-image",
    "resized-image",
    "other-bucket",
    "nan",
    "truncated",
    "torch-zip",
    "renamed",
    "caption",
    "resolution",
)


@pytest.mark.parametrize("defect", DEFECTS)
def test_each_planted_defect_is_found_by_a_deep_scan(aitk: Path, defect: str) -> None:
    args, want = _plant(defect)
    found = scan(*args)
    assert {p for _, p in found} == {p for _, p in want}, found
    assert set(want) <= set(found), found


def aitoolkit_loads(path: Path) -> torch.Tensor:
    """ai-toolkit's read of a latent: the name is its info's hash, ``load_file(path)['latent']``."""
    with safe_open(str(path), "pt") as f:
        info = rules.info_from_metadata(f.metadata())
    assert info is not None and rules.settings_hash(info) == rules.split_name(path.name)[1]  # type: ignore[index]
    return load_file(str(path))["latent"]


#: a broken SD 1.5 latent per defect, one repair for all (each of another image: flipped ones too)
BROKEN = {
    "missing": ("a_land.png", True),
    "truncated": ("b_tall.png", False),
    "nan": ("c_exif.jpg", True),
    "torch-zip": ("d_square.png", False),
    "other-bucket": ("f_wide.png", True),
}


def _break(victim: Path, defect: str) -> None:
    if defect == "missing":
        victim.unlink()
    elif defect == "truncated":
        victim.write_bytes(victim.read_bytes()[:200])
    elif defect == "nan":
        tensor = load_file(str(victim))["latent"]
        tensor[0, 0, 0] = float("nan")
        _replace(victim, tensor)
    elif defect == "torch-zip":  # what an earlier repair wrote: ai-toolkit's load_file fails on it
        torch.save({"latent": load_file(str(victim))["latent"].clone()}, str(victim))
    else:
        _replace(victim, torch.randn(4, 10, 10))


@pytest.mark.slow  # a real diffusers VAE encodes every broken latent
def test_each_broken_latent_is_recomputed_as_ai_toolkit_wrote_it(aitk: Path) -> None:
    victims = {defect: latent_of(image, flip=flip) for defect, (image, flip) in BROKEN.items()}
    for defect, victim in victims.items():
        _break(victim, defect)
    code, out, err = cli(
        "repair", "--config", "sd15.yaml", "--encoder", f"diffusers-vae:{VAES['sd15']}", "--deep", "--yes"
    )
    assert (code, err) == (0, ""), out
    for victim in victims.values():
        golden = GOLD / victim
        with safe_open(str(victim), "pt") as made, safe_open(str(golden), "pt") as gold:
            assert list(made.keys()) == ["latent"] and made.metadata() == gold.metadata()
        a, b = aitoolkit_loads(victim), load_file(str(golden))["latent"]
        assert a.dtype == b.dtype and a.shape == b.shape
        assert float((a - b).abs().max()) < 1e-4, victim  # 0.18215 x the posterior (sample == mean here)
    assert scan("--config", "sd15.yaml") == []


@pytest.mark.parametrize("family", ["sd15", "flux"])
def test_every_latent_deleted_is_recomputed_with_no_peer_left(aitk: Path, family: str) -> None:
    golden = {p.name: p for p in (GOLD / f"{family}/images/_latent_cache").iterdir()}
    for path in latents(family):
        path.unlink()
    code, out, err = cli("repair", "--config", f"{family}.yaml", "--encoder", f"diffusers-vae:{VAES[family]}", "--yes")
    assert (code, err) == (0, ""), out
    assert {p.name for p in latents(family)} == set(golden)
    for path in latents(family):
        with safe_open(str(path), "pt") as made, safe_open(str(golden[path.name]), "pt") as gold:
            assert made.metadata() == gold.metadata()
        a, b = aitoolkit_loads(path), load_file(str(golden[path.name]))["latent"]
        assert float((a - b).abs().max()) < 1e-4, path.name


def test_text_embeddings_are_refused_in_one_line(aitk: Path) -> None:
    for path in Path("sd15/images/_t_e_cache").glob("a_land_*"):
        path.write_bytes(b"")
    code, out, err = cli("repair", "--config", "sd15.yaml", "--encoder", f"diffusers-vae:{VAES['sd15']}", "--yes")
    assert code == 1 and err == ""
    assert "ai-toolkit encodes captions with its model's own text encoders" in " ".join(out.split())


def test_without_the_config_an_unreadable_latent_is_not_guessed(aitk: Path) -> None:
    """The placement of a latent is in its own metadata: when that does not read and no job config
    says it, nothing is recomputed from a guess (the file leaves the cache; ai-toolkit re-caches)."""
    victim = latent_of("a_land.png")
    victim.write_bytes(b"\x00" * 64)
    code, out, err = cli(
        "repair", "sd15/images", "--encoder", f"diffusers-vae:{VAES['sd15']}", "--yes", "--format", "json"
    )
    result = json.loads(out)["result"]
    assert not victim.exists()
    assert [r["action"] for r in result["files"] if r["path"].endswith(victim.name)] == ["quarantine"]


def test_a_text_embedding_with_nan_leaves_the_cache_for_ai_toolkit_to_make_again(aitk: Path) -> None:
    """Repair cannot run ai-toolkit's text encoders, but ai-toolkit encodes any embedding missing at
    start-up: the broken one is moved to the quarantine (not left for a person to fix)."""
    victim = next(iter(sorted(Path("sd15/images/_t_e_cache").glob("a_land_*"))))
    with safe_open(str(victim), "pt") as f:
        meta = f.metadata()
    tensors = load_file(str(victim))
    key = sorted(tensors)[0]
    tensors[key] = tensors[key].clone()
    tensors[key].view(-1)[0] = float("nan")
    save_file(tensors, str(victim), metadata=meta)
    code, out, err = cli("repair", "--deep", "--config", "sd15.yaml", "--yes", "--format", "json")
    result = json.loads(out)["result"]
    assert [r["action"] for r in result["files"] if r["path"].endswith(victim.name)] == ["quarantine"]
    assert not victim.exists()
    assert scan("--config", "sd15.yaml") == [("missing-entry", str(victim))]


@pytest.mark.parametrize("layout", [[], ["--layout", "ai-toolkit"]])
def test_the_cache_folder_itself_is_ai_toolkits(aitk: Path, layout: list[str]) -> None:
    time.sleep(0.01)
    Path("flux/images/a_land.png").touch()  # newer than its latents: stale
    found = scan("flux/images/_latent_cache", *layout)
    assert found and {k for k, _ in found} == {"stale-entry"}, found
