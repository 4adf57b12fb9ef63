"""``--config FILE``: one option for every trainer's config, told by its content, not its name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import cli

from cachedoctor.layouts import LayoutError, LayoutOptions
from cachedoctor.layouts.configs import identify, routed

GOLDEN = Path(__file__).resolve().parents[3] / "fixtures" / "trainers"
KOHYA = """[general]
resolution = 128
[[datasets]]
  [[datasets.subsets]]
  image_dir = "img"
"""
MUSUBI = """[general]
resolution = 128
caption_extension = ".txt"
[[datasets]]
image_directory = "img"
cache_directory = "cache"
"""
DPIPE = """resolutions = [256]
[[directory]]
path = "img"
"""
DPIPE_TRAIN = """dataset = "dataset.toml"
[model]
type = "flux"
"""
AITK = """job: extension
config:
  name: run
  process:
    - type: sd_trainer
      datasets:
        - folder_path: img
"""
SIMPLETUNER = json.dumps([{"id": "photos", "type": "local", "instance_data_dir": "img", "cache_dir_vae": "vae"}])


@pytest.mark.parametrize(
    ("name", "text", "layout"),
    [
        ("config.toml", KOHYA, "kohya"),
        ("config.toml", MUSUBI, "musubi"),
        ("config.toml", DPIPE, "diffusion-pipe"),
        ("train.toml", DPIPE_TRAIN, "diffusion-pipe"),
        ("job.yaml", AITK, "ai-toolkit"),
        (
            "job.json",
            json.dumps({"job": "extension", "config": {"name": "r", "process": [{"datasets": []}]}}),
            "ai-toolkit",
        ),
        ("multidatabackend.json", SIMPLETUNER, "simpletuner"),
        ("dataset.cfg", MUSUBI, "musubi"),  # no known suffix: the content decides
        ("weird.yaml", "general:\n  resolution: 128\nfoo: bar\n", None),  # valid YAML, no trainer's
    ],
)
def test_each_trainers_config_is_told_by_its_content(tmp_path: Path, name: str, text: str, layout: str | None) -> None:
    path = tmp_path / name
    path.write_text(text)
    if layout is None:
        with pytest.raises(LayoutError, match="not a trainer config cachedoctor knows"):
            identify(str(path))
    else:
        assert identify(str(path))[0] == layout


def test_the_golden_configs_are_recognised() -> None:
    for config, layout in [
        ("musubi/zi.toml", "musubi"),
        ("musubi/wan.toml", "musubi"),
        ("aitoolkit/sd15.yaml", "ai-toolkit"),
        ("diffusion_pipe/dataset.toml", "diffusion-pipe"),
        ("diffusion_pipe/train.toml", "diffusion-pipe"),
        ("kohya/sdxl.toml", "kohya"),
    ]:
        assert identify(str(GOLDEN / config))[0] == layout, config


def test_routing_puts_each_config_where_its_layout_reads_it(tmp_path: Path) -> None:
    for text, field, value in [(KOHYA, "kohya_config", None), (MUSUBI, "trainer_config", "musubi")]:
        path = tmp_path / "c.toml"
        path.write_text(text)
        options = routed(LayoutOptions(config=str(path)))
        assert options.config is None and options.config_sign
        if field == "kohya_config":
            assert options.kohya_config == str(path)
        else:
            assert options.trainer_config == (value, str(path))
    path = tmp_path / "multidatabackend.json"
    path.write_text(SIMPLETUNER)
    assert routed(LayoutOptions(config=str(path))).config == str(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file; check the --config path"),
        (b"\xff\xfe\x00binary", "is not text (not UTF-8)"),
        (b"a = [unclosed", "is neither JSON, TOML nor YAML"),
        (b"just: yaml\n", "not a trainer config cachedoctor knows"),
        # a job config is a few KB; parsing megabytes of YAML took a minute and half a GB
        (b"job: extension\nconfig:\n  name: x\n" + b"# padding\n" * 110_000, "is over 1 MiB: not a trainer config"),
        # an unquoted date: ai-toolkit json-dumps the job and fails on it, so does this read
        (
            b"job: extension\nconfig:\n  name: 2024-01-01\n  process:\n    - type: sd_trainer\n      datasets:\n"
            b"        - folder_path: imgs\n",
            "which YAML reads as a date and ai-toolkit cannot handle",
        ),
    ],
)
def test_a_config_that_is_no_config_is_one_line_exit_2(tmp_path: Path, content: bytes | None, message: str) -> None:
    path = tmp_path / "x.toml"
    if content is not None:
        path.write_bytes(content)
    code, out, err = cli("scan", "--config", str(path))
    assert (code, out) == (2, "") and err.count("\n") == 1 and message in err, err


def test_a_folder_named_as_config_is_one_line(tmp_path: Path) -> None:
    code, out, err = cli("scan", "--config", str(tmp_path))
    assert code == 2 and "is a folder; --config takes the trainer's config file" in err


def test_config_and_kohya_config_naming_two_files_contradict(tmp_path: Path) -> None:
    one, two = tmp_path / "a.toml", tmp_path / "b.toml"
    one.write_text(KOHYA)
    two.write_text(KOHYA)
    code, out, err = cli("scan", "--config", str(one), "--kohya-config", str(two))
    assert code == 2 and "--config and --kohya-config name two sd-scripts dataset configs" in err
