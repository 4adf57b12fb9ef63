"""kohya-ss/musubi-tuner golden caches (``fixtures/trainers/musubi``, written by musubi-tuner 30c658c's
own caching scripts; see its README): recognised with no hand-written manifest, no false alarm
on the pristine caches, every planted defect found by ``scan --deep``, and deleted or unreadable
Z-Image latents recomputed into musubi's container, key and metadata, equal to the golden entry.

Uses only committed files, never musubi-tuner. The check of a repaired file is musubi's own load
rule, re-implemented from reading ``dataset/image_video_dataset.py`` ``prepare_for_training`` and
``dataset/bucket.py`` ``BucketBatchManager.__getitem__``: the name's size gives the item's bucket,
its text file must exist, both load with ``safetensors.load_file``, and the latent, its key's
shape and dtype stripped, stacks with the other latents of its bucket.
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
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from cachedoctor.layouts import _musubi_rules as rules

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "trainers"
GOLD = FIXTURES / "musubi"
VAE = FIXTURES / "models" / "flux"  # the weights musubi's own Z-Image AutoencoderKL encoded with


def scan(root: Path, *args: str) -> list[tuple[str, str]]:
    code, out, err = cli("scan", "--deep", "--no-state", "--format", "json", *args, cwd=str(root))
    assert err == "", err
    return sorted((f["kind"], os.path.relpath(f["path"], root)) for f in json.loads(out)["findings"])


@pytest.fixture
def musubi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the goldens, as the current folder (the configs' relative paths start at theirs)."""
    root = tmp_path / "musubi"
    shutil.copytree(GOLD, root, ignore=shutil.ignore_patterns("make_golden.py", "*.json", "*.npz"))
    monkeypatch.chdir(root)
    return root


def metadata(path: Path) -> dict[str, str]:
    with safe_open(str(path), "pt") as f:
        return dict(f.metadata())


@pytest.mark.parametrize("args", [["--config", "zi.toml"], ["--config", "wan.toml"], ["."], ["zi/cache"]])
def test_pristine_caches_have_no_finding_and_name_the_layout(musubi: Path, args: list[str]) -> None:
    code, out, err = cli("scan", "--deep", "--no-state", *args, cwd=str(musubi))
    assert (code, err) == (0, ""), out
    assert out.splitlines()[1].startswith("layout: musubi (")
    assert "No findings" in out


def test_auto_at_the_dataset_root_uses_the_configs_it_finds(musubi: Path) -> None:
    code, out, err = cli("scan", "--no-state", ".", cwd=str(musubi))
    text = " ".join(out.split())
    assert "layout: musubi (auto: " in text and "wan.toml describes the datasets" in text
    assert "musubi-tuner dataset config found" in text


def _replace(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    save_file(tensors, str(path), metadata=metadata(path))


def _plant(root: Path, defect: str) -> list[tuple[str, str]]:
    """Plant one defect in a copy of the goldens; return the findings it must give."""
    zi, wan = root / "zi", root / "wan"
    if defect == "missing":
        (zi / "cache" / "a_wide_0200x0120_zi.safetensors").unlink()
        return [("missing-entry", "zi/cache/a_wide_0200x0120_zi.safetensors")]
    if defect == "missing-text":
        (zi / "cache" / "a_wide_zi_te.safetensors").unlink()
        return [("missing-entry", "zi/cache/a_wide_zi_te.safetensors")]
    if defect == "orphan":
        (zi / "images" / "d_small.png").unlink()
        return [
            ("orphan-entry", "zi/cache/d_small_0060x0070_zi.safetensors"),
            ("orphan-entry", "zi/cache/d_small_zi_te.safetensors"),
        ]
    if defect == "stale-image":
        later = time.time() + 3600
        os.utime(zi / "images" / "e_big.png", (later, later))
        return [("stale-entry", "zi/cache/e_big_0200x0180_zi.safetensors")]
    if defect == "stale-caption":  # caption1 in the text file's metadata is no longer the caption
        (zi / "images" / "f_pal.txt").write_text("a different caption")
        os.utime(zi / "images" / "f_pal.txt", (1e9, 1e9))  # not newer: found by content, not by time
        return [("stale-entry", "zi/cache/f_pal_zi_te.safetensors")]
    if defect == "key-size":  # the key says 1x12x20 (the bucket) while the tensor is 5x7
        path = zi / "cache" / "a_wide_0200x0120_zi.safetensors"
        _replace(path, {"latents_1x12x20_float32": torch.zeros(16, 5, 7)})
        return [("shape-mismatch", "zi/cache/a_wide_0200x0120_zi.safetensors")]
    if defect == "other-bucket":  # a consistent latent of another bucket (16x16) where 12x20 is needed
        path = zi / "cache" / "a_wide_0200x0120_zi.safetensors"
        _replace(path, {"latents_1x16x16_float32": torch.randn(16, 16, 16)})
        return [("shape-mismatch", "zi/cache/a_wide_0200x0120_zi.safetensors")]
    if defect == "float32-among-bf16":
        path = wan / "cache_image" / "b_tall_0090x0150_wan.safetensors"
        [(key, tensor)] = load_file(str(path)).items()
        _replace(path, {key.replace("bfloat16", "float32"): tensor.float()})
        return [("dtype-mismatch", "wan/cache_image/b_tall_0090x0150_wan.safetensors")]
    if defect == "nan":
        path = wan / "cache_image" / "e_big_0200x0180_wan.safetensors"
        [(key, tensor)] = load_file(str(path)).items()
        tensor[0, 0, 0, 0] = float("nan")
        _replace(path, {key: tensor})
        return [("non-finite", "wan/cache_image/e_big_0200x0180_wan.safetensors")]
    if defect == "truncated":
        path = wan / "cache_image" / "f_pal_0180x0070_wan.safetensors"
        path.write_bytes(path.read_bytes()[:-10])
        return [("corrupt-archive", "wan/cache_image/f_pal_0180x0070_wan.safetensors")]
    if defect == "window-frames":  # a 5-frame window needs 2 latent frames; its key and tensor say 1
        path = wan / "cache_video" / "v_tall_00000-005_0080x0112_wan.safetensors"
        [(key, tensor)] = load_file(str(path)).items()
        _replace(path, {key.replace("latents_2x", "latents_1x"): tensor[:, :1].contiguous()})
        return [("shape-mismatch", "wan/cache_video/v_tall_00000-005_0080x0112_wan.safetensors")]
    if defect == "clip-uncached":
        for path in (wan / "cache_video").glob("v_wide_0*_wan.safetensors"):
            path.unlink()
        return [("missing-entry", "wan/cache_video/v_wide_*_wan.safetensors")]
    raise AssertionError(defect)


DEFECTS = (
    "missing",
    "missing-text",
    "orphan",
    "stale-image",
    "stale-caption",
    "key-size",
    "other-bucket",
    "float32-among-bf16",
    "nan",
    "truncated",
    "window-frames",
    "clip-uncached",
)


@pytest.mark.parametrize("defect", DEFECTS)
def test_each_planted_defect_is_found_by_a_deep_scan(musubi: Path, defect: str) -> None:
    want = _plant(musubi, defect)
    config = "wan.toml" if any(p.startswith("wan/") for _, p in want) else "zi.toml"
    found = scan(musubi, "--config", config)
    assert sorted(set(found)) == sorted(want), found


def musubi_loads(cache: Path, arch: str, resolution: tuple[int, int]) -> dict[tuple[int, int], torch.Tensor]:
    """musubi's training read of an image cache folder: glob ``*_<arch>.safetensors``, the bucket from
    the name's size, the text file beside it, ``load_file``, keys stripped, stacked per bucket."""
    batches: dict[tuple[int, int], list[torch.Tensor]] = {}
    for path in sorted(cache.glob(f"*_{arch}.safetensors")):
        parsed = rules.parse_cache_name(path.name, "image")
        assert parsed is not None and parsed.size is not None, path.name
        assert (cache / parsed.te_name).exists(), f"{path.name}: musubi skips an item without its text file"
        bucket = rules.bucket_resolution(parsed.size, resolution, True, False, arch)
        for key, tensor in load_file(str(path)).items():
            assert rules.loaded_as(key) == ("latents", False), key
            assert tensor.shape[-2:] == (bucket[1] // 8, bucket[0] // 8), (path.name, tensor.shape)
            batches.setdefault(bucket, []).append(tensor)
    return {bucket: torch.stack(items) for bucket, items in batches.items()}


#: a broken Z-Image latent per defect, one repair for all (each a different image and bucket)
BROKEN = {
    "missing": "a_wide_0200x0120_zi.safetensors",
    "truncated": "b_tall_0090x0150_zi.safetensors",
    "zero-byte": "c_rgba_0100x0100_zi.safetensors",
    "nan": "d_small_0060x0070_zi.safetensors",
    "other-bucket": "e_big_0200x0180_zi.safetensors",
    "key-size": "f_pal_0180x0070_zi.safetensors",
}


def _break(path: Path, defect: str) -> None:
    if defect == "missing":
        path.unlink()
    elif defect == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    elif defect == "zero-byte":
        path.write_bytes(b"")
    else:
        [(key, tensor)] = load_file(str(path)).items()
        if defect == "nan":
            tensor[0, 0, 0] = float("nan")
            _replace(path, {key: tensor})
        elif defect == "other-bucket":  # a consistent latent of another bucket (12x20, a_wide's)
            _replace(path, {"latents_1x12x20_float32": torch.randn(16, 12, 20)})
        else:  # its key says its bucket, its tensor is another size
            _replace(path, {key: torch.zeros(16, 5, 7)})


@pytest.mark.slow  # a real diffusers VAE encodes every broken latent
def test_each_broken_z_image_latent_is_recomputed_as_musubi_wrote_it(musubi: Path) -> None:
    cache = musubi / "zi" / "cache"
    for defect, name in BROKEN.items():
        _break(cache / name, defect)
    code, out, err = cli(
        "repair", "--config", "zi.toml", "--encoder", f"diffusers-vae:{VAE}", "--deep", "--yes", cwd=str(musubi)
    )
    assert (code, err) == (0, ""), out
    for name in BROKEN.values():
        victim, golden = cache / name, GOLD / "zi" / "cache" / name
        with safe_open(str(victim), "pt") as made, safe_open(str(golden), "pt") as gold:
            [key] = list(gold.keys())
            assert list(made.keys()) == [key] and made.metadata() == gold.metadata(), name
            a, b = made.get_tensor(key), gold.get_tensor(key)
            assert a.dtype == b.dtype == torch.float32
            assert float((a - b).abs().max()) < 1e-4, name
    musubi_loads(cache, "zi", (128, 128))
    assert scan(musubi, "--config", "zi.toml") == []


def test_every_z_image_latent_deleted_is_recomputed_with_no_peer_left(musubi: Path) -> None:
    for path in (musubi / "zi" / "cache").glob("*_zi.safetensors"):
        path.unlink()
    code, out, err = cli("repair", "--config", "zi.toml", "--encoder", f"diffusers-vae:{VAE}", "--yes", cwd=str(musubi))
    assert (code, err) == (0, ""), out
    for golden in (GOLD / "zi" / "cache").glob("*_zi.safetensors"):
        made = musubi / "zi" / "cache" / golden.name
        assert metadata(made) == metadata(golden)
        [(key, a)], [(gkey, b)] = load_file(str(made)).items(), load_file(str(golden)).items()
        assert key == gkey and float((a - b).abs().max()) < 1e-4, golden.name
    musubi_loads(musubi / "zi" / "cache", "zi", (128, 128))


def test_what_this_repair_cannot_make_is_refused_in_one_line(musubi: Path) -> None:
    (musubi / "wan" / "cache_image" / "a_wide_0200x0120_wan.safetensors").unlink()
    (musubi / "zi" / "cache" / "b_tall_zi_te.safetensors").unlink()
    for config in ("wan.toml", "zi.toml"):
        code, out, err = cli(
            "repair", "--config", config, "--encoder", f"diffusers-vae:{VAE}", "--yes", cwd=str(musubi)
        )
        text = " ".join(out.split())
        assert code == 1 and err == "", out
        if config == "wan.toml":
            assert "Wan caches a 3D causal VAE's mean normalised per channel, which this repair does not run" in text
            assert "wan_cache_latents.py" in text
        else:
            assert "re-cache them with musubi-tuner's zimage_cache_text_encoder_outputs.py" in text
    assert not (musubi / "wan" / "cache_image" / "a_wide_0200x0120_wan.safetensors").exists()


def test_a_cache_folder_alone_still_pairs_latents_with_their_text_files(musubi: Path) -> None:
    (musubi / "zi" / "cache" / "b_tall_zi_te.safetensors").unlink()
    assert scan(musubi, "zi/cache") == [("missing-entry", "zi/cache/b_tall_zi_te.safetensors")]


def test_latent_templates_are_never_text_files_of_the_same_folder(musubi: Path) -> None:
    """The reported case: both kinds share one folder and suffix; the template must be a latent."""
    from cachedoctor.layouts import LAYOUTS, Expected, TemplateFinder

    cache = musubi / "zi" / "cache"
    layout = LAYOUTS["musubi"]
    entry = Expected(str(cache / "a_wide_0200x0120_zi.safetensors"), str(musubi / "zi/images/a_wide.png"))
    template = TemplateFinder(set()).for_entry(entry.path, entry, layout)
    assert template is not None and not template.path.endswith("_te.safetensors")
    assert all(not p.endswith("_te.safetensors") for p in template.peers)


def test_an_image_folder_that_is_not_there_stops_in_one_line(musubi: Path) -> None:
    """A typo or an unmounted disk: every cache file would look orphaned, and repair would move
    the whole cache out. One line, exit 2, nothing planned."""
    (musubi / "typo.toml").write_text((musubi / "zi.toml").read_text().replace("zi/images", "zi/imagez"))
    for command in (("scan",), ("repair", "--dry-run")):
        code, out, err = cli(*command, "--config", "typo.toml", cwd=str(musubi))
        assert code == 2 and out == "", out
        assert err.strip().endswith(
            "image_directory " + str(musubi / "zi" / "imagez") + " is no folder; check the path (is its disk mounted?)"
        )
        assert len(err.strip().splitlines()) == 1


def test_quarantine_list_and_restore_find_the_runs_by_config(musubi: Path) -> None:
    stray = musubi / "zi" / "cache" / "gone_0200x0120_zi.safetensors"
    shutil.copy(musubi / "zi" / "cache" / "a_wide_0200x0120_zi.safetensors", stray)  # an orphan: quarantined
    code, out, err = cli("repair", "--config", "zi.toml", "--yes", cwd=str(musubi))
    assert code == 0 and not stray.exists(), out
    run = out.split("cachedoctor quarantine restore ")[1].split()[0]
    code, out, err = cli("quarantine", "list", "--all", "--config", "zi.toml", cwd=str(musubi))
    assert code == 0 and run in out and "gone_0200x0120_zi.safetensors  [quarantine: orphan-entry]" in out, out
    code, out, err = cli("quarantine", "restore", run, "--config", "zi.toml", "--yes", cwd=str(musubi))
    assert code == 0 and stray.exists(), out + err
