"""Configs and side files the run-level checks read are untrusted input: each hostile one is one
line and exit 2 (a file the user named) or a note (a file found beside the cache), never a
traceback, a hang or a per-rank table of 10**20 entries."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_run import cli, scan_json

REPO = Path(__file__).resolve().parents[3]
HEALTHY = REPO / "fixtures" / "datasets" / "simpletuner-healthy"
KOHYA_CACHE = REPO / "fixtures" / "caches" / "kohya"
NESTED = "[" * 100_000 + "]" * 100_000


@pytest.fixture
def st(tmp_path: Path) -> Path:
    root = tmp_path / "st"
    shutil.copytree(HEALTHY, root)
    return root


def one_line_exit_2(argv: list[str], path: Path, says: str, cwd: str = "/") -> None:
    code, out, err = cli(*argv, cwd=cwd)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and str(path) in err and says in err, err


@pytest.mark.parametrize(
    ("name", "option", "says"),
    [
        ("multidatabackend.json", "--config", "JSON nested too deeply to read"),
        ("items.jsonl", "--manifest", "line 1: JSON nested too deeply to read"),
        ("dataset.toml", "--kohya-config", "TOML nested too deeply to read"),
        ("baseline.json", "--baseline", "not a baseline"),
    ],
)
def test_a_nested_file_the_user_names_is_one_line(tmp_path: Path, name: str, option: str, says: str) -> None:
    path = tmp_path / name
    path.write_text(("a = " + NESTED + "\n") if name.endswith(".toml") else NESTED + "\n")
    cache = tmp_path / "cache"
    shutil.copytree(KOHYA_CACHE, cache)
    argv = ["scan", str(cache), option, str(path), "--no-state"]
    if option == "--kohya-config":
        argv += ["--layout", "kohya"]
    one_line_exit_2(argv, path, says)


def test_a_nested_settings_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "cachedoctor.toml").write_text("a = " + NESTED + "\n")
    one_line_exit_2(
        ["scan", str(KOHYA_CACHE), "--no-state"], tmp_path / "cachedoctor.toml", "TOML nested too deeply", str(tmp_path)
    )


def test_nested_bucket_files_beside_the_cache_are_passed_over(st: Path) -> None:
    for index in st.rglob("aspect_ratio_bucket_*.json"):
        index.write_text(NESTED)
    code, _, err = cli("scan", "--config", str(st / "config" / "multidatabackend.json"), "--no-state")
    assert err == "" and code in (0, 1)


def test_a_world_size_beyond_any_cluster_is_refused_or_noted(st: Path) -> None:
    config = st / "config" / "multidatabackend.json"
    code, out, err = cli("scan", "--config", str(config), "--world-size", str(10**20), "--batch-size", "1")
    assert (code, out) == (2, "") and "--world-size: must be between 1 and 131072" in err
    settings = st / "config" / "config.json"
    data = json.loads(settings.read_text())
    data["num_processes"] = 10**20  # a trainer's config is untrusted too: a note, not a table of 10**20 ranks
    settings.write_text(json.dumps(data))
    doc = scan_json("--config", str(config), "--batch-size", "1", "--no-state")
    assert not [f for f in doc["findings"] if f["kind"] in ("rank-imbalance", "dropped-bucket")]
    assert any(f"a world size of {10**20} is outside 1..131072" in n for n in doc["summary"]["notes"])


def test_a_kohya_batch_size_that_is_no_number_is_not_known(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(KOHYA_CACHE, cache)
    toml = tmp_path / "dataset.toml"
    toml.write_text(
        f'[[datasets]]\nresolution = 128\nbatch_size = "four"\n[[datasets.subsets]]\nimage_dir = "{cache}"\n'
    )
    code, _, err = cli("scan", str(cache), "--layout", "kohya", "--kohya-config", str(toml), "--world-size", "2")
    assert err == "" and code in (0, 1)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_named_like_a_onetrainer_config_does_not_block_the_scan(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(REPO / "fixtures" / "trainers" / "onetrainer" / "cache", cache)
    os.mkfifo(cache / "x.json")  # opened for reading, it would wait for a writer forever
    (cache / "zero.json").symlink_to("/dev/zero")
    code = (
        "import sys; from tests.cli_run import cli; "
        f"print(cli('scan', {str(cache)!r}, '--layout', 'onetrainer', '--no-state', '--batch-size', '2')[0])"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() in ("0", "1"), done.stderr


@pytest.mark.parametrize(
    ("name", "option", "text"),
    [
        ("multidatabackend.json", "--config", '[{"id": "x", "type": "local", "repeats": %s}]'),
        ("items.jsonl", "--manifest", '{"path": "a.pt", "source": "a.png", "size": %s}\n'),
        ("dataset.toml", "--kohya-config", "[[datasets]]\nbatch_size = %s\n"),
    ],
)
def test_an_integer_too_long_to_convert_is_one_line(tmp_path: Path, name: str, option: str, text: str) -> None:
    """Python refuses to convert integers of more than 4300 digits (a plain ValueError)."""
    path = tmp_path / name
    path.write_text(text % ("1" + "0" * 5000))
    cache = tmp_path / "cache"
    shutil.copytree(KOHYA_CACHE, cache)
    argv = ["scan", str(cache), option, str(path), "--no-state"]
    if option == "--kohya-config":
        argv += ["--layout", "kohya"]
    one_line_exit_2(argv, path, "not ")


def test_a_fifo_caption_does_not_block_the_plan(st: Path) -> None:
    caption = next((st / "datasets").rglob("*.txt"))
    caption.unlink()
    os.mkfifo(caption)
    code = (
        "from tests.cli_run import cli; "
        f"print(cli('scan', '--config', {str(st / 'config' / 'multidatabackend.json')!r}, '--no-state')[0])"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() in ("0", "1"), done.stderr


def test_write_baseline_to_a_fifo_is_not_read_back(tmp_path: Path) -> None:
    fifo = tmp_path / "baseline.fifo"
    os.mkfifo(fifo)
    import threading

    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    code, _, err = cli("scan", str(KOHYA_CACHE), "--no-state", "--write-baseline", str(fifo))
    reader.join(timeout=30)
    assert (code, err) == (0, "") and b"cachedoctor.baseline/1" in got[0]
