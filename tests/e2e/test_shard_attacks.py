"""Adversarial review of issue 30 (sharded scans), through the command line: parts are untrusted
input as cache files are (a hostile or damaged part is one line, exit 2, never a traceback, and
its text cannot drive the terminal); ``cachedoctor merge`` gives the whole scan's report from
any folder; a rank that fails while planning the dataset ends the run with one line naming it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_run import cli

REPO = Path(__file__).resolve().parents[2]
CACHES = REPO / "fixtures" / "caches"
HOST = socket.gethostname()


def without_time(doc: dict) -> dict:
    return {**doc, "summary": {k: v for k, v in doc["summary"].items() if k != "elapsed_s"}}


@pytest.fixture
def parts(tmp_path: Path) -> list[Path]:
    """The two parts of a scan of the shipped caches split in two."""
    cache = tmp_path / "cache"
    shutil.copytree(CACHES / "kohya", cache)
    out = []
    for k in range(2):
        path = tmp_path / f"part-{k}.json"
        assert cli("scan", "--no-state", "--shard", f"{k}/2", "-o", str(path), str(cache)) == (0, "", "")
        out.append(path)
    return out


def edit(path: Path, change: Callable[[dict], Any]) -> None:
    doc = json.loads(path.read_text(encoding="utf-8"))
    change(doc)
    path.write_text(json.dumps(doc), encoding="utf-8")


def put(*keys: str | int, value: Any) -> Callable[[dict], None]:
    def change(doc: dict) -> None:
        for key in keys[:-1]:
            doc = doc[key]
        doc[keys[-1]] = value

    return change


HOSTILE = {
    "a shard count of 1e400": put("shard", value=[0, 1e400]),
    "paired 1e400": put("paired", value=1e400),
    "a latent shape of 1e400": put("shapes", value=[[1e400, 8, 1]]),
    "files_seen a string": put("stats", "files_seen", value="many"),
    "files_read a list": put("stats", "files_read", value=[]),
    "formats a list": put("stats", "formats", value=[1]),
    "inventory rows of 3": put("inventory", value=[[1, 2, 3]]),
    "fail-on unknown": put("settings", "values", "fail_on", value="sometimes"),
    "no recorded values": lambda doc: doc["settings"].pop("values"),
}


@pytest.mark.parametrize("change", list(HOSTILE.values()), ids=list(HOSTILE))
def test_a_hostile_part_is_one_line_naming_it(parts: list[Path], change: Callable[[dict], Any]) -> None:
    edit(parts[0], change)
    code, out, err = cli("merge", *map(str, parts))
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert err.startswith(f"cachedoctor: error: {parts[0]}: ")


def test_a_part_claiming_65536_shards_gets_a_short_line(parts: list[Path]) -> None:
    """Both parts claim shards 0 and 1 of 65536: the line says which are missing without
    listing 65534 numbers."""
    for k, part in enumerate(parts):
        edit(part, put("shard", value=[k, 65536]))
    code, out, err = cli("merge", *map(str, parts))
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "of 65536 is missing" in err and len(err) < 400


FORGED = "\x1b[2K\rforged: the cache is clean"


def test_the_text_of_a_part_cannot_drive_the_terminal(parts: list[Path]) -> None:
    """A finding's message, a note and a problem's path and message come from the part: shown as
    ``\\xNN`` in the table and on stderr, as a file name is (test_control_characters_in_names)."""
    cache = json.loads(parts[0].read_text(encoding="utf-8"))["targets"][0]

    def plant(doc: dict) -> None:
        doc["findings"].append(["corrupt-archive", "error", f"{cache}/z.npz", f"bad\n{FORGED}", "recompute", None, {}])
        doc["notes"].append(f"a note\n{FORGED}")
        doc["errors"].append([f"{cache}/q{FORGED}.npz", f"cannot be read\n{FORGED}"])

    edit(parts[0], plant)
    code, out, err = cli("merge", *map(str, parts), columns=400)
    assert code == 2  # a problem: the scan is incomplete
    for text in (out, err):
        assert "\x1b" not in text and "\r" not in text and "\nforged" not in text


def test_a_part_scanned_with_a_key_name_that_drives_the_terminal_is_shown_escaped(tmp_path: Path) -> None:
    """Not only parts: a tensor's key name is a cache file's text, and a finding's message quotes
    it (``1 NaN/Inf value(s) in <key>``); the table shows it raw."""
    import numpy as np
    from safetensors.numpy import save_file

    cache = tmp_path / "cache"
    cache.mkdir()
    rng = np.random.default_rng(0)
    for i in range(3):
        save_file({"latent": rng.standard_normal((4, 8, 8)).astype("float32")}, str(cache / f"{i}.safetensors"))
    bad = rng.standard_normal((4, 8, 8)).astype("float32")
    bad[0, 0, 0] = np.nan
    save_file({f"lat\n{FORGED}": bad}, str(cache / "x.safetensors"))
    code, out, _ = cli("scan", "--no-state", "--deep", str(cache), columns=400)
    assert code == 1 and "non-finite" in out
    assert "\x1b" not in out and "\r" not in out and "\nforged" not in out


def test_merge_from_another_folder_gives_the_whole_scans_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tasks ran in ``job/`` and named the cache relatively (``scan --shard K/2 cache``); the
    merge runs in another folder (after the array, from the submit folder): it must judge the
    parts as they were scanned, not look for ``cache`` where it runs."""
    job = tmp_path / "job"
    shutil.copytree(CACHES / "kohya", job / "cache")
    monkeypatch.chdir(job)
    whole = cli("scan", "--no-state", "--format", "json", "cache", cwd=str(job))
    for k in range(2):
        assert cli("scan", "--no-state", "--shard", f"{k}/2", "-o", f"part-{k}.json", "cache", cwd=str(job))[0] == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, out, err = cli("merge", "--format", "json", str(job), cwd=str(elsewhere))
    assert (code, err) == (whole[0], "") == (1, "")
    assert without_time(json.loads(out)) == without_time(json.loads(whole[1]))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        ["scan", "--no-state", "--format", "json"],
        ["repair", "--dry-run", "--format", "json"],
        ["recover", "--format", "json"],
    ],
    ids=lambda c: c[0],
)
def test_a_rank_that_cannot_plan_the_dataset_stops_the_run_with_its_line(tmp_path: Path, command: list[str]) -> None:
    """Rank 1 cannot read the manifest (its node lacks the file): the run ends with one line, rank
    0's, naming rank 1 and what it could not do; not rank 1's own line beside rank 0's guess that
    rank 1 was killed or hung (after the heartbeat timeout: 120 s by default, 3 s here)."""
    cache = tmp_path / "cache"
    shutil.copytree(CACHES / "kohya", cache)
    missing = tmp_path / "elsewhere.jsonl"
    port = str(free_port())
    procs = []
    for rank in (0, 1):
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "CACHEDOCTOR_RANK_TIMEOUT": "3",
            "OMP_NUM_THREADS": "1",
        }
        if rank == 1:
            env["CACHEDOCTOR_MANIFEST"] = str(missing)
        argv = [sys.executable, "-m", "cachedoctor", *command, str(cache)]
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    (out0, err0), (out1, err1) = (p.communicate(timeout=120) for p in procs)
    assert [p.returncode for p in procs] == [2, 2]
    assert (out0, out1, err1) == ("", "", "")
    assert err0.count("\n") == 1 and err0.startswith(f"cachedoctor: error: rank 1 on {HOST}: {missing}: ")
