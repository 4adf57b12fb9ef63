"""kohya-ss sd-scripts golden caches (``fixtures/trainers/kohya``, written by sd-scripts 48d368f's
own ``tools/cache_latents.py``; see ``fixtures/trainers/README.md``): cachedoctor reads them as
healthy, and what its repair recomputes from the same images and tiny VAEs equals them.

Uses only committed files, never sd-scripts. The check of a repaired file is sd-scripts' own
load rule, re-implemented from reading ``library/strategy_base.py``
(``_default_is_disk_cached_latents_expected``, ``_default_load_latents_from_disk``) and the older
``train_util.is_disk_cached_latents_is_expected`` (which also compares the latent's size with the
bucket's): the keys it needs for the image's bucket, of the bucket's size.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from cachedoctor.cli import run
from cachedoctor.cli.environment import Environment

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "trainers"
GOLD = FIXTURES / "kohya"
BUCKETS = json.loads((GOLD / "golden_buckets.json").read_text())
#: dataset TOML -> (arch suffix, tiny model family, flip_aug folders, alpha_mask folders)
CASES = {
    "sdxl.toml": ("sdxl", "sdxl", {"sdxl/flip"}, set()),
    "flux.toml": ("flux", "flux", set(), {"flux/img"}),
    "legacy.toml": ("sdxl", "sdxl", set(), set()),
}
MAX_DIFF: dict[str, float] = {}


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdout_isatty=False, stderr_isatty=False, stdin_isatty=False, cwd="/")
    return run(list(argv), env), out.getvalue(), err.getvalue()


def findings(root: Path, toml: str) -> list[tuple[str, str]]:
    arch = CASES[toml][0]
    code, out, err = cli(
        "scan", "--deep", "--no-state", "--format", "json", "--kohya-config", str(root / toml), "--model-family", arch
    )
    assert err == "", err
    return sorted((f["kind"], Path(f["path"]).name) for f in json.loads(out)["findings"])


def repair(root: Path, toml: str, *extra: str) -> tuple[int, str, str]:
    arch, family, _, _ = CASES[toml]
    config = ("--kohya-config", str(root / toml)) if toml else ()
    return cli(
        "repair",
        *config,
        "--model-family",
        arch,
        "--encoder",
        f"diffusers-vae:{FIXTURES / 'models' / family}",
        "--yes",
        "--deep",
        *extra,
    )


def golden_files(toml: str) -> list[Path]:
    return sorted(GOLD / str(Path(image).parent) / name for image in BUCKETS[toml] for name in _names(toml, image))


def _names(toml: str, image: str) -> list[str]:
    folder = GOLD / Path(image).parent
    stem = Path(image).stem
    return [
        p.name
        for p in folder.iterdir()
        if p.suffix == ".npz" and (p.name == f"{stem}.npz" or p.name.startswith(f"{stem}_"))
    ]


def sd_scripts_load(path: Path, toml: str, image: str) -> dict[str, np.ndarray]:
    """What sd-scripts requires of the entry for ``image``: the latent keys for its bucket (the
    arch's size suffix for Flux), flipped latents with flip_aug, an alpha mask with alpha_mask,
    original_size and crop_ltrb; the latent of the bucket's size (latent = bucket // 8)."""
    arch, _, flips, alphas = CASES[toml]
    bw, bh = BUCKETS[toml][image]["bucket"]
    h, w = bh // 8, bw // 8
    suffix = f"_{h}x{w}" if arch == "flux" else ""
    folder = str(Path(image).parent)
    with np.load(path) as npz:
        data = {k: npz[k] for k in npz.files}
    need = ["latents", "original_size", "crop_ltrb"]
    need += ["latents_flipped"] if folder in flips else []
    need += ["alpha_mask"] if folder in alphas else []
    for key in need:
        assert key + suffix in data, f"{path.name}: sd-scripts needs {key + suffix}"
    assert data["latents" + suffix].shape[1:3] == (h, w)
    if folder in flips:
        assert data["latents_flipped" + suffix].shape[1:3] == (h, w)
    if folder in alphas:
        assert data["alpha_mask" + suffix].shape == (bh, bw)  # pixels, H x W
    assert folder in alphas or not any(k.startswith("alpha_mask") for k in data)
    return data


def same_as_golden(made: Path, golden: Path, label: str) -> None:
    with np.load(made) as a, np.load(golden) as b:
        assert a.files == b.files, (made.name, a.files, b.files)
        worst = 0.0
        for key in b.files:
            assert a[key].dtype == b[key].dtype, (key, a[key].dtype, b[key].dtype)
            assert a[key].shape == b[key].shape, (key, a[key].shape, b[key].shape)
            worst = max(worst, float(np.abs(a[key].astype(np.float64) - b[key]).max()))
    assert worst < 1e-4, (made.name, worst)
    MAX_DIFF[label] = max(MAX_DIFF.get(label, 0.0), worst)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    root = tmp_path / "kohya"
    shutil.copytree(GOLD, root, ignore=shutil.ignore_patterns("make_golden.py", "*.json"))
    return root


@pytest.mark.parametrize("toml", sorted(CASES))
def test_golden_cache_scans_clean(toml: str) -> None:
    """No false alarm on what sd-scripts wrote, with its buckets checked against each entry."""
    assert findings(GOLD, toml) == []


@pytest.mark.parametrize("toml", sorted(CASES))
def test_every_latent_recomputed_equals_golden(cache: Path, toml: str) -> None:
    """All latents deleted; one repair makes them again as sd-scripts made them."""
    for path in golden_files(toml):
        (cache / path.relative_to(GOLD)).unlink()
    code, out, err = repair(cache, toml)
    assert code == 0, out + err
    for image, seen in BUCKETS[toml].items():
        w, h = seen["image_size"]
        stem = Path(image).stem
        folder = cache / Path(image).parent
        # the old <stem>.npz gone, sd-scripts writes the new name (SdSdxlLatentsCachingStrategy)
        made = folder / f"{stem}_{w:04d}x{h:04d}_{CASES[toml][0]}.npz"
        golden = next(p for p in golden_files(toml) if p.parent.name == folder.name and p.name.startswith(stem))
        sd_scripts_load(made, toml, image)
        same_as_golden(made, golden, toml)
    assert findings(cache, toml) == []


def _plant(path: Path, defect: str) -> None:
    if defect == "missing":
        path.unlink()
    elif defect == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif defect == "zero-byte":
        path.write_bytes(b"")
    else:
        with np.load(path) as npz:
            data = {k: npz[k] for k in npz.files}
        if defect == "wrong-bucket":  # a 12x12 latent where the bucket (160x96) needs 12x20
            data["latents"] = data["latents"][:, :, :12].copy()
        else:  # nan
            data["latents"][0, 0, 0] = np.nan
        np.savez(path, **data)


#: defect -> what the scan reports for it
DEFECTS = {
    "missing": "missing-entry",
    "truncated": "corrupt-archive",
    "zero-byte": "corrupt-archive",
    "wrong-bucket": "shape-mismatch",
    "nan": "non-finite",
}


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_planted_defect_repaired_and_loads_with_sd_scripts_rules(cache: Path, defect: str) -> None:
    """The issue's "done when": each defect in a kohya cache with a dataset TOML is repaired, and
    the file holds what sd-scripts loads for the image's bucket, equal to the golden values."""
    image = "sdxl/flip/a.png"
    victim = cache / "sdxl" / "flip" / "a_0150x0100_sdxl.npz"
    _plant(victim, defect)
    assert findings(cache, "sdxl.toml") == [(DEFECTS[defect], victim.name)]
    code, out, err = repair(cache, "sdxl.toml")
    assert code == 0, out + err
    sd_scripts_load(victim, "sdxl.toml", image)
    same_as_golden(victim, GOLD / "sdxl" / "flip" / victim.name, f"sdxl {defect}")


def test_without_config_a_missing_entry_is_blocked_naming_the_option(cache: Path) -> None:
    """Without the TOML the bucket is known only inside the entry: a deleted one is blocked, and
    the reason says how to give the bucket."""
    victim = cache / "sdxl" / "plain" / "e_0070x0060_sdxl.npz"
    victim.unlink()
    code, out, err = cli(
        "repair",
        str(cache / "sdxl" / "plain"),
        "--layout",
        "kohya",
        "--encoder",
        f"diffusers-vae:{FIXTURES / 'models' / 'sdxl'}",
        "--yes",
        "--deep",
    )
    assert "--kohya-config dataset.toml" in out + err
    assert not victim.exists()


def test_without_config_a_non_finite_entry_keeps_the_bucket_it_recorded(cache: Path) -> None:
    """Without the TOML, an entry still readable enough to show its latent's shape is made again
    at that size (the bucket it recorded), equal to the golden one."""
    victim = cache / "sdxl" / "plain" / "d_0128x0128_sdxl.npz"
    with np.load(victim) as npz:
        data = {k: npz[k] for k in npz.files}
    data["latents"][0, 0, 0] = np.inf
    np.savez(victim, **data)
    code, out, err = cli(
        "repair",
        str(cache / "sdxl" / "plain"),
        "--layout",
        "kohya",
        "--encoder",
        f"diffusers-vae:{FIXTURES / 'models' / 'sdxl'}",
        "--yes",
        "--deep",
    )
    assert code == 0, out + err
    same_as_golden(victim, GOLD / "sdxl" / "plain" / victim.name, "sdxl no-config")


def test_scan_with_config_alone_takes_its_image_dirs(cache: Path) -> None:
    code, out, err = cli("scan", "--no-state", "--format", "json", "--kohya-config", str(cache / "sdxl.toml"))
    assert code == 0, err
    assert json.loads(out)["targets"] == [str(cache / "sdxl" / "flip"), str(cache / "sdxl" / "plain")]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('[[datasets]]\nresolution = 128\n[[datasets.subsets]]\nimage_dir = "nowhere"\n', "nowhere: image_dir"),
        ("[general\nresolution = 128\n", "not valid TOML"),
    ],
)
def test_unusable_config_is_one_line_exit_2(tmp_path: Path, text: str, problem: str) -> None:
    toml = tmp_path / "dataset.toml"
    toml.write_text(text)
    code, out, err = cli("scan", "--kohya-config", str(toml))
    assert code == 2
    assert err.count("\n") == 1 and problem in err, err


def test_bucket_options_without_a_toml_recompute_the_old_style_entry(cache: Path) -> None:
    """sd-scripts' bucket options on the command line stand for the TOML: the deleted <stem>.npz
    is made again under the name sd-scripts now writes, equal to the golden old-style file."""
    folder = cache / "legacy" / "img"
    (folder / "j.npz").unlink()
    code, out, err = cli(
        "repair",
        str(folder),
        "--layout",
        "kohya",
        "--resolution",
        "96",
        "--no-enable-bucket",
        "--encoder",
        f"diffusers-vae:{FIXTURES / 'models' / 'sdxl'}",
        "--yes",
        "--deep",
    )
    assert code == 0, out + err
    made = folder / "j_0120x0080_sdxl.npz"
    sd_scripts_load(made, "legacy.toml", "legacy/img/j.png")
    same_as_golden(made, GOLD / "legacy" / "img" / "j.npz", "legacy options")


def test_text_encoder_output_recompute_is_blocked_with_the_reason(cache: Path) -> None:
    """kohya's text-encoder outputs (here an SDXL ``_te_outputs.npz`` with sd-scripts' keys, made
    by this test: the golden set has none) cannot be made by the one-encoder text adapter: a
    truncated one is blocked, and the reason says why and what to run."""
    folder = cache / "sdxl" / "plain"
    for stem in ("d", "e", "f"):
        np.savez(
            folder / f"{stem}_te_outputs.npz",
            hidden_state1=np.zeros((77, 768), np.float32),
            hidden_state2=np.zeros((77, 1280), np.float32),
            pool2=np.zeros((1280,), np.float32),
        )
    victim = folder / "e_te_outputs.npz"
    victim.write_bytes(victim.read_bytes()[:100])
    code, out, err = cli(
        "repair",
        str(folder),
        "--layout",
        "kohya",
        "--encoder",
        f"diffusers-vae:{FIXTURES / 'models' / 'sdxl'}",
        "--yes",
        "--deep",
    )
    said = " ".join((out + err).split())  # the plan is wrapped at 80 columns
    assert "cachedoctor's one-encoder text adapter cannot make" in said
    assert "cache_text_encoder_outputs.py" in said
