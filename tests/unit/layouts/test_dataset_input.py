"""The dataset side of a scan: SimpleTuner configs, layout detection, manifests, bad input."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from factories import save_pt
from test_layouts import CASES, DATASETS, _touch, cli, found


@pytest.fixture
def copy(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A fresh copy of one fixture case with its recorded mtimes."""

    def make(name: str) -> Path:
        root = tmp_path / "datasets"
        shutil.copytree(DATASETS / name, root / name)
        mtimes = json.loads((DATASETS / "mtimes.json").read_text())
        (root / "mtimes.json").write_text(json.dumps({k: v for k, v in mtimes.items() if k.startswith(name + "/")}))
        _touch().apply(root)
        return root

    return make


def test_simpletuner_config_with_placeholders_disabled_and_remote_datasets(copy) -> None:  # type: ignore[no-untyped-def]
    root = copy("simpletuner-healthy")
    code, out, err = cli(
        "scan", "--config", "simpletuner-healthy/config/multidatabackend.json", "--format", "json", cwd=root
    )
    doc = json.loads(out)
    assert (code, err, doc["findings"]) == (0, "", [])
    dataset = doc["dataset"]
    assert dataset["layout"] == "simpletuner"
    assert sorted(dataset["skipped"]) == sorted(CASES["simpletuner-healthy"]["skipped"])
    notes = "\n".join(dataset["notes"])
    assert "'old-set' skipped: disabled in the config" in notes
    assert "'s3-set' skipped: type 'aws' without aws_endpoint_url (SimpleTuner refuses it too)" in notes
    assert "relative paths in multidatabackend.json resolved against" in notes
    assert dataset["items"] > 0


def test_simpletuner_table_says_which_layout_and_what_it_skipped(copy) -> None:  # type: ignore[no-untyped-def]
    root = copy("simpletuner-healthy")
    code, out, _ = cli("scan", "--config", "simpletuner-healthy/config/multidatabackend.json", cwd=root)
    assert code == 0
    assert "layout: simpletuner (--config)" in out  # the config names the layout; --layout was not given
    assert "note: dataset 'old-set' skipped" in out


def test_simpletuner_config_found_in_a_checkout(copy) -> None:  # type: ignore[no-untyped-def]
    root = copy("simpletuner-healthy")
    code, out, _ = cli("scan", "simpletuner-healthy", "--format", "json", cwd=root)
    doc = json.loads(out)
    assert (code, doc["dataset"]["layout"], doc["findings"]) == (0, "simpletuner", [])


@pytest.mark.parametrize(
    ("case", "target", "layout"),
    [
        ("kohya-healthy", "kohya-healthy/train", "kohya"),
        ("onetrainer-healthy", "onetrainer-healthy/cache", "onetrainer"),
    ],
)
def test_auto_detects_the_layout(copy, case: str, target: str, layout: str) -> None:  # type: ignore[no-untyped-def]
    root = copy(case)
    code, out, _ = cli("scan", target, "--format", "json", cwd=root)
    doc = json.loads(out)
    assert (code, doc["dataset"]["layout"], doc["findings"]) == (0, layout, [])


def test_a_bare_cache_folder_is_compared_with_itself_only(tmp_path: Path) -> None:
    for i in range(3):
        save_pt(tmp_path / f"{i}.pt", torch.zeros(4, 8, 8))
    code, out, _ = cli("scan", str(tmp_path), "--format", "json", cwd=tmp_path)
    assert (code, json.loads(out)["dataset"]) == (0, None)
    code, out, _ = cli("scan", str(tmp_path), cwd=tmp_path)
    assert "layout: none (auto: no trainer layout recognised" in out


def test_kohya_image_whose_size_changed_is_missing_its_new_entry(copy) -> None:  # type: ignore[no-untyped-def]
    root = copy("kohya-healthy")
    folder = root / "kohya-healthy" / "train" / "10_subject"
    npz = sorted(folder.glob("*_0128x0128_sdxl.npz"))[0]
    stem = npz.name[: -len("_0128x0128_sdxl.npz")]
    image = next(p for p in folder.iterdir() if p.stem == stem and p.suffix != ".npz" and p.suffix != ".txt")
    from PIL import Image

    Image.new("RGB", (96, 128)).save(image)
    code, out, _ = cli("scan", "kohya-healthy/train", "--layout", "kohya", "--format", "json", cwd=root)
    rel = os.path.relpath(folder, root)
    assert found(json.loads(out), root) == [
        ("missing-entry", f"{rel}/{stem}_0096x0128_sdxl.npz", f"{rel}/{image.name}", "recompute"),
        ("orphan-entry", f"{rel}/{npz.name}", None, "quarantine"),
    ]
    assert code == 1


def test_manifest_build_then_scan_finds_content_changes_only(copy) -> None:  # type: ignore[no-untyped-def]
    root = copy("kohya-healthy")
    code, out, err = cli("manifest", "build", "kohya-healthy/train", "-o", "items.jsonl", cwd=root)
    assert (code, err) == (0, ""), err
    assert "layout: kohya" in out
    rows = [json.loads(line) for line in (root / "items.jsonl").read_text().splitlines()]
    latent_rows = [r for r in rows if r["role"] == "latent"]
    assert latent_rows and all({"source", "cache", "size", "mtime_ns", "xxh3"} <= r.keys() for r in latent_rows)
    # kohya text-encoder outputs come from captions, not pixels: with no caption file, untracked
    assert all(r["track"] is False and "xxh3" not in r for r in rows if r["role"] == "text")
    clean = cli("scan", "kohya-healthy/train", "--manifest", "items.jsonl", "--format", "json", cwd=root)
    assert (clean[0], json.loads(clean[1])["findings"]) == (0, [])

    touched = root / latent_rows[0]["source"]  # same bytes, new mtime: not stale
    os.utime(touched, ns=(touched.stat().st_atime_ns, touched.stat().st_mtime_ns + 10**12))
    edited = root / latent_rows[1]["source"]  # new bytes, old mtime: stale
    st = edited.stat()
    edited.write_bytes(edited.read_bytes() + b"\0")
    os.utime(edited, ns=(st.st_atime_ns, st.st_mtime_ns))
    code, out, _ = cli("scan", "kohya-healthy/train", "--manifest", "items.jsonl", "--format", "json", cwd=root)
    assert found(json.loads(out), root) == [
        (
            "stale-entry",
            os.path.normpath(latent_rows[1]["cache"]),
            os.path.normpath(latent_rows[1]["source"]),
            "recompute",
        ),
    ]
    assert code == 0  # stale-entry is a warning


def test_copied_dataset_is_not_reported_stale_entry_by_entry(tmp_path: Path) -> None:
    from PIL import Image

    images, cache = tmp_path / "images", tmp_path / "cache"
    images.mkdir()
    cache.mkdir()
    rows = []
    for i in range(30):
        Image.new("RGB", (16, 16)).save(images / f"{i}.png")
        save_pt(cache / f"{i}.pt", torch.zeros(4, 2, 2))
        os.utime(cache / f"{i}.pt", ns=(10**18, 10**18))
        os.utime(images / f"{i}.png", ns=(10**18 + 10**12, 10**18 + 10**12))  # copied after the cache
        rows.append({"source": f"images/{i}.png", "cache": f"cache/{i}.pt"})
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, out, _ = cli("scan", "cache", "--manifest", "m.jsonl", "--format", "json", cwd=tmp_path)
    doc = json.loads(out)
    assert (code, doc["findings"]) == (0, [])
    assert any("looks copied without its file times" in n for n in doc["dataset"]["notes"])


# -- bad input: one line naming the file and the problem, exit 2 ------------------------------


def test_config_that_is_not_json(tmp_path: Path) -> None:
    config = tmp_path / "multidatabackend.json"
    config.write_text('[{"id": "x",,}]')
    code, out, err = cli("scan", "--config", str(config), cwd=tmp_path)
    assert (code, out) == (2, "")
    assert (
        err
        == f"cachedoctor: error: {config}: not valid JSON at line 1; fix the file (SimpleTuner would refuse it too)\n"
    )


def test_config_that_is_json_but_not_a_list(tmp_path: Path) -> None:
    config = tmp_path / "multidatabackend.json"
    config.write_text('{"id": "x"}')
    code, _, err = cli("scan", "--config", str(config), cwd=tmp_path)
    assert code == 2 and err.count("\n") == 1 and str(config) in err and "JSON list" in err


def test_config_whose_dataset_folder_does_not_exist(tmp_path: Path) -> None:
    config = tmp_path / "multidatabackend.json"
    config.write_text(
        json.dumps(
            [
                {
                    "id": "photos",
                    "type": "local",
                    "instance_data_dir": str(tmp_path / "nope"),
                    "cache_dir_vae": str(tmp_path / "vae"),
                }
            ]
        )
    )
    code, _, err = cli("scan", "--config", str(config), cwd=tmp_path)
    assert code == 2
    assert err == (
        f"cachedoctor: error: {tmp_path / 'nope'}: dataset 'photos': instance_data_dir does not exist; "
        "fix the path in the config or mount the dataset\n"
    )


def test_kohya_dataset_folder_that_does_not_exist(tmp_path: Path) -> None:
    code, _, err = cli("scan", str(tmp_path / "missing"), "--layout", "kohya", cwd=tmp_path)
    assert code == 2 and err.count("\n") == 1 and str(tmp_path / "missing") in err and "no such" in err


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("m.jsonl", '{"source": "a.png"}\n', "line 1: no 'cache' column; every row needs source and cache"),
        ("m.jsonl", '{"source": "a.png", "cache": "a.pt"}\n{"cache": "b.pt"}\n', "line 2: no 'source' column"),
        ("m.jsonl", '{"source": "a.png", "cache": "a.pt"}\nnot json\n', "line 2: not JSON"),
        ("m.csv", "source,shape\na.png,4x8x8\n", "line 1: the header has no 'cache' column"),
        ("m.csv", "source,cache\na.png,\n", "line 2: no 'cache' column"),
        ("m.jsonl", '{"source": "a.png", "cache": "a.pt", "shape": "four"}\n', "line 1: 'shape' is"),
    ],
)
def test_bad_manifest_rows(tmp_path: Path, name: str, text: str, problem: str) -> None:
    (tmp_path / name).write_text(text)
    (tmp_path / "cache").mkdir()
    code, out, err = cli("scan", "cache", "--manifest", name, cwd=tmp_path)
    assert (code, out) == (2, "")
    assert err.startswith(f"cachedoctor: error: {tmp_path / name}: {problem}")
    assert err.count("\n") == 1


def test_missing_manifest_file(tmp_path: Path) -> None:
    code, _, err = cli("scan", str(tmp_path), "--manifest", "nope.jsonl", cwd=tmp_path)
    assert code == 2 and "nope.jsonl: cannot open the manifest" in err and err.count("\n") == 1


def test_manifest_build_of_a_folder_with_no_known_layout(tmp_path: Path) -> None:
    code, _, err = cli("manifest", "build", str(tmp_path), "-o", str(tmp_path / "m.jsonl"), cwd=tmp_path)
    assert (
        code == 2
        and "no trainer layout recognised here; pass the trainer's dataset config (--config) or --layout" in err
    )
    assert not (tmp_path / "m.jsonl").exists()


def test_kohya_text_encoder_output_is_stale_when_its_caption_changed(copy) -> None:  # type: ignore[no-untyped-def]
    root = copy("kohya-healthy")
    folder = root / "kohya-healthy" / "train" / "10_subject"
    te = sorted(folder.glob("*_te_outputs.npz"))[0]
    stem = te.name[: -len("_te_outputs.npz")]
    caption = folder / f"{stem}.txt"
    caption.write_text("a new caption")
    os.utime(caption, ns=(te.stat().st_mtime_ns + 10**12, te.stat().st_mtime_ns + 10**12))
    code, out, _ = cli("scan", "kohya-healthy/train", "--layout", "kohya", "--format", "json", cwd=root)
    rel = os.path.relpath(folder, root)
    assert found(json.loads(out), root) == [("stale-entry", f"{rel}/{te.name}", f"{rel}/{stem}.txt", "recompute")]


def _simpletuner(tmp_path: Path, captions: dict[str, str], strategy: str) -> Path:
    """A one-dataset SimpleTuner set-up with every latent and embed in place."""
    import hashlib

    from PIL import Image

    data, vae, text = tmp_path / "data", tmp_path / "vae", tmp_path / "text"
    for folder in (data, vae, text):
        folder.mkdir()
    config = [
        {
            "id": "d",
            "type": "local",
            "instance_data_dir": str(data),
            "cache_dir_vae": str(vae),
            "caption_strategy": strategy,
        },
        {"id": "t", "type": "local", "dataset_type": "text_embeds", "default": True, "cache_dir": str(text)},
    ]
    (tmp_path / "multidatabackend.json").write_text(json.dumps(config))
    embed = {"prompt_embeds": torch.zeros(1, 4, 8), "pooled_prompt_embeds": torch.zeros(8)}
    save_pt(text / f"{hashlib.md5(b'').hexdigest()}-sdxl.pt", embed)
    for name, caption in captions.items():
        Image.new("RGB", (16, 16)).save(data / name)
        save_pt(vae / f"{hashlib.sha256(Path(name).stem.encode()).hexdigest()}.pt", torch.zeros(4, 2, 2))
        if strategy == "textfile":
            (data / f"{Path(name).stem}.txt").write_text(caption)
    return tmp_path


def _embed(tmp_path: Path, caption: str) -> Path:
    import hashlib

    return tmp_path / "text" / f"{hashlib.md5(caption.encode()).hexdigest()}-sdxl.pt"


def test_simpletuner_multi_line_caption_files_need_one_embed_per_line(tmp_path: Path) -> None:
    root = _simpletuner(tmp_path, {"cat.png": "a cat\nA Cat, sitting\n\n"}, "textfile")
    embed = {"prompt_embeds": torch.zeros(1, 4, 8), "pooled_prompt_embeds": torch.zeros(8)}
    save_pt(_embed(root, "a cat"), embed)  # the second line's embed is missing
    code, out, _ = cli(
        "scan", "--config", "multidatabackend.json", "--model-family", "sdxl", "--format", "json", cwd=root
    )
    assert found(json.loads(out), root) == [
        ("missing-entry", os.path.relpath(_embed(root, "A Cat, sitting"), root), "data/cat.txt", "recompute")
    ]
    assert code == 1


def test_simpletuner_filename_captions_replace_underscores(tmp_path: Path) -> None:
    root = _simpletuner(tmp_path, {"a_red_car.png": ""}, "filename")
    embed = {"prompt_embeds": torch.zeros(1, 4, 8), "pooled_prompt_embeds": torch.zeros(8)}
    save_pt(_embed(root, "a_red_car"), embed)  # named after the raw stem: wrong, so missing + orphan
    code, out, _ = cli(
        "scan", "--config", "multidatabackend.json", "--model-family", "sdxl", "--format", "json", cwd=root
    )
    assert found(json.loads(out), root) == [
        ("missing-entry", os.path.relpath(_embed(root, "a red car"), root), "data/a_red_car.png", "recompute"),
        ("orphan-entry", os.path.relpath(_embed(root, "a_red_car"), root), None, "quarantine"),
    ]
    assert code == 1


def test_simpletuner_null_caption_embed_is_not_an_orphan(tmp_path: Path) -> None:
    root = _simpletuner(tmp_path, {"cat.png": "a cat"}, "textfile")
    save_pt(_embed(root, "a cat"), {"prompt_embeds": torch.zeros(1, 4, 8), "pooled_prompt_embeds": torch.zeros(8)})
    code, out, _ = cli("scan", "--config", "multidatabackend.json", "--format", "json", cwd=root)
    assert (code, json.loads(out)["findings"]) == (0, [])


def test_simpletuner_images_with_one_caption_share_one_embed(tmp_path: Path) -> None:
    root = _simpletuner(tmp_path, {"a.png": "a photo of sks dog", "b.png": "a photo of sks dog"}, "textfile")
    save_pt(
        _embed(root, "a photo of sks dog"),
        {"prompt_embeds": torch.zeros(1, 4, 8), "pooled_prompt_embeds": torch.zeros(8)},
    )
    code, out, _ = cli("scan", "--config", "multidatabackend.json", "--format", "json", cwd=root)
    assert (code, json.loads(out)["findings"]) == (0, [])


def test_manifest_build_of_a_simpletuner_config_round_trips(copy) -> None:  # type: ignore[no-untyped-def]
    root = copy("simpletuner-healthy")
    config = "simpletuner-healthy/config/multidatabackend.json"
    code, _, err = cli("manifest", "build", "--config", config, "-o", "st.jsonl", cwd=root)
    assert (code, err) == (0, "")
    rows = [json.loads(line) for line in (root / "st.jsonl").read_text().splitlines()]
    assert {r["role"] for r in rows} == {"latent", "text"}
    assert any("latent_hw" in r for r in rows)
    caches = [r["cache"] for r in rows]
    code, out, _ = cli(
        "scan",
        *sorted({os.path.dirname(c) for c in caches if "/vae/" in c or "/text/" in c}),
        "--manifest",
        "st.jsonl",
        "--format",
        "json",
        cwd=root,
    )
    doc = json.loads(out)
    # the text cache also holds the null-caption embed, which no row names: the only finding
    assert [(f["kind"], os.path.basename(f["path"])) for f in doc["findings"]] == [
        ("orphan-entry", "d41d8cd98f00b204e9800998ecf8427e-sdxl.pt")
    ]
