"""Destructive commands never act unasked (issue 28): without a terminal on stdin and without
``--yes``, ``repair``, ``recover --apply``, ``quarantine restore`` and ``quarantine purge`` stop
before changing anything, with one line naming what to add, exit 2. Reported: ``cachedoctor
repair CACHE </dev/null`` quarantined 3 files and rewrote 1.

Each case is run in process (``cli_run.cli``: stdin is no terminal) and once as a real process
with stdin from ``/dev/null``; the whole tree, the quarantine and the state database included,
must be byte for byte what it was.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from cli_run import cli
from factories import latent, leaked_view, peers, pt_bytes, save_pt, saved_on
from s3_repair_helpers import Bucket

from cachedoctor.cli import run
from cachedoctor.cli.environment import Environment

REPO = Path(__file__).resolve().parents[2]


def tree(root: Path) -> dict[str, str]:
    """Every file and folder under ``root`` (``.cachedoctor`` too) -> its bytes' digest."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


def damaged(root: Path) -> Path:
    """Six healthy peers, one device-tagged file and one batch leak: repair would rewrite two."""
    peers(root, 6)
    with saved_on("cuda:0"):
        save_pt(root / "gpu.pt", latent(seed=9))
    save_pt(root / "leak.pt", leaked_view(torch.randn(7, 4, 8, 8).to(torch.bfloat16), 2))
    return root


def quarantined_run(root: Path) -> str:
    """A repair's quarantine run in ``root`` (repaired with ``--yes``), its id."""
    damaged(root)
    assert cli("repair", str(root), "--yes")[0] == 0
    (run_dir,) = (root / ".cachedoctor" / "quarantine").iterdir()
    return run_dir.name


def refusal(doing: str, where: str, how: str) -> str:
    return f"cachedoctor: error: not {doing} {where}: no terminal to ask on; {how}\n"


def repair_case(root: Path) -> tuple[list[str], str]:
    damaged(root)
    assert cli("scan", str(root))[0] == 1  # scan's state database, which repair would write
    assert (root / ".cachedoctor" / "state.sqlite").is_file()
    return ["repair", str(root)], refusal("repairing", str(root), "add --yes to repair, or --dry-run for the plan")


def recover_case(root: Path) -> tuple[list[str], str]:
    damaged(root)
    (root / "x.pt.tmp").write_bytes(pt_bytes(latent(seed=4))[:200])  # a write cut short
    return ["recover", str(root), "--apply"], refusal(
        "recovering", str(root), "add --yes to apply, or leave out --apply for the survey"
    )


def restore_case(root: Path) -> tuple[list[str], str]:
    run_id = quarantined_run(root)
    return ["quarantine", "restore", run_id, str(root)], refusal(
        "restoring", f"{run_id} in {root}", "add --yes to restore"
    )


def purge_case(root: Path) -> tuple[list[str], str]:
    run_id = quarantined_run(root)
    return ["quarantine", "purge", run_id, str(root)], refusal(
        "purging", f"{run_id} in {root}", "add --yes to delete it for good"
    )


CASES = {"repair": repair_case, "recover --apply": recover_case, "restore": restore_case, "purge": purge_case}


@pytest.mark.parametrize("command", CASES)
def test_no_terminal_and_no_yes_changes_nothing(tmp_path: Path, command: str) -> None:
    argv, line = CASES[command](tmp_path)
    before = tree(tmp_path)
    code, out, err = cli(*argv)
    assert (code, out, err) == (2, "", line)
    assert tree(tmp_path) == before


@pytest.mark.parametrize("command", CASES)
def test_a_real_process_with_stdin_from_dev_null_changes_nothing(tmp_path: Path, command: str) -> None:
    argv, line = CASES[command](tmp_path)
    before = tree(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEDOCTOR_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-m", "cachedoctor", *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", line)
    assert tree(tmp_path) == before


@pytest.mark.parametrize("command", CASES)
def test_yes_goes_ahead(tmp_path: Path, command: str) -> None:
    argv, _ = CASES[command](tmp_path)
    before = tree(tmp_path)
    code, _, err = cli(*argv, "--yes")
    assert code == 0, err
    assert tree(tmp_path) != before


def tty(*argv: str, answer: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(
        stdout=out, stderr=err, stdin=io.StringIO(answer), stdout_isatty=False, stderr_isatty=False, stdin_isatty=True
    )
    return run(list(argv), env), out.getvalue(), err.getvalue()


def test_restore_asks_on_a_terminal(tmp_path: Path) -> None:
    run_id = quarantined_run(tmp_path)
    before = tree(tmp_path)
    code, out, err = tty("quarantine", "restore", run_id, str(tmp_path), answer="n\n")
    assert code == 2 and out == "Put 2 file(s) back (what is there now is quarantined first)? [y/N] "
    assert err == f"cachedoctor: error: {tmp_path}: not restored; pass --yes to restore without asking\n"
    assert tree(tmp_path) == before
    code, out, _ = tty("quarantine", "restore", run_id, str(tmp_path), answer="y\n")
    assert code == 0 and f"restored 2 file(s) from {run_id} in 1 cache root(s)" in out


def test_json_repair_keeps_its_own_refusal(tmp_path: Path) -> None:
    """``--format json`` never asks, terminal or not: its line (docs/repair-json.md) comes first."""
    damaged(tmp_path)
    before = tree(tmp_path)
    code, out, err = cli("repair", str(tmp_path), "--format", "json")
    assert (code, out) == (2, "")
    assert err == (
        "cachedoctor: error: --format json never asks before changing files: "
        "add --yes to repair, or --dry-run for the plan alone\n"
    )
    assert tree(tmp_path) == before


def test_a_dry_run_and_a_survey_need_no_yes(tmp_path: Path) -> None:
    damaged(tmp_path)
    before = tree(tmp_path)
    assert cli("repair", str(tmp_path), "--dry-run")[0] == 1
    assert cli("recover", str(tmp_path), "--no-state")[0] == 0
    assert tree(tmp_path) == before


# --- s3:// prefixes: the same rule (one quarantine command over every store) -----------------


@pytest.fixture
def bucket(s3_server: Any, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Bucket:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))  # journal and scan state
    return Bucket(s3_server.client(), s3_bucket)


def objects(bucket: Bucket) -> dict[str, bytes | None]:
    """Every object under the cache prefix, the quarantine included -> its bytes."""
    listed = bucket.keys()
    return {key: bucket.get(bucket.url(key)) for key in listed}


@pytest.mark.parametrize(
    ("verb", "doing", "how"),
    [("restore", "restoring", "add --yes to restore"), ("purge", "purging", "add --yes to delete it for good")],
)
def test_a_remote_quarantine_is_not_touched_unasked(bucket: Bucket, verb: str, doing: str, how: str) -> None:
    with saved_on("cuda:0"):
        bucket.put("a.pt", pt_bytes(latent(seed=1)))
    url = bucket.url()
    code, out, _ = cli("repair", "--yes", url, columns=400)
    assert code == 0
    run_id = next(line.split()[4] for line in out.splitlines() if line.startswith("undo: "))
    before = objects(bucket)
    code, out, err = cli("quarantine", verb, run_id, url, columns=400)
    assert (code, out, err) == (2, "", refusal(doing, f"{run_id} in {url}", how))
    assert objects(bucket) == before
