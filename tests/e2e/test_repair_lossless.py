"""repair's lossless actions, quarantine and undo: one planted defect per test, exact outcome.

Every test checks three things: the file is now healthy (the deep scan says nothing), its
tensors are bitwise what they were (or what the view held), and the original bytes are in the
quarantine, from where ``quarantine restore`` brings them back.
"""

from __future__ import annotations

import gzip
import io
import json
import pickle
from pathlib import Path

import pytest
import torch
from factories import Payload, findings_of, latent, malicious_torch_zip, peers, pt_bytes, save_pt, saved_on

from cachedoctor.cli import run
from cachedoctor.cli.environment import Environment
from cachedoctor.formats import read_file


def cli(*argv: str, stdin_tty: bool = False) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdout_isatty=False, stderr_isatty=False, stdin_isatty=stdin_tty, cwd="/")
    return run(list(argv), env), out.getvalue(), err.getvalue()


def quarantined(root: Path) -> dict[str, bytes]:
    """Path relative to the cache root -> bytes, for every file in every quarantine run."""
    base = root / ".cachedoctor" / "quarantine"
    return {
        str(Path(*p.relative_to(base).parts[1:])): p.read_bytes()
        for p in base.rglob("*")
        if p.is_file() and p.name != ".records.jsonl"
    }


def run_id(root: Path) -> str:
    runs = sorted(p.name for p in (root / ".cachedoctor" / "quarantine").iterdir())
    assert len(runs) == 1
    return runs[0]


def test_device_tagged_is_rewritten_on_cpu_bitwise(tmp_path: Path) -> None:
    peers(tmp_path)
    original = latent(seed=7)
    with saved_on("cuda:3"):
        save_pt(tmp_path / "gpu.pt", original)
    old = (tmp_path / "gpu.pt").read_bytes()
    code, out, err = cli("repair", str(tmp_path), "--yes")
    assert (code, err) == (0, ""), out
    assert "rewrite-cpu    1 file(s)" in out and "done: 1 verified, 0 skipped, 0 blocked, 0 failed" in out
    meta = read_file(str(tmp_path / "gpu.pt"), deep=True)
    assert [t.location for t in meta.tensors] == ["cpu"]
    loaded = torch.load(tmp_path / "gpu.pt", weights_only=True)  # no map_location needed any more
    assert loaded.dtype == torch.bfloat16 and torch.equal(loaded.view(torch.int16), original.view(torch.int16))
    assert quarantined(tmp_path) == {"gpu.pt": old}
    assert findings_of(tmp_path, deep=True) == []


def test_batch_leak_view_is_cloned_losslessly(tmp_path: Path) -> None:
    peers(tmp_path)
    batch = torch.randn(7, 4, 8, 8).to(torch.bfloat16)
    save_pt(tmp_path / "leak.pt", batch[5])
    before = (tmp_path / "leak.pt").stat().st_size
    code, out, _ = cli("repair", str(tmp_path), "--yes")
    assert code == 0 and "clone-storage  1 file(s)" in out
    meta = read_file(str(tmp_path / "leak.pt"), deep=False)
    (t,) = meta.tensors
    assert (t.shape, t.stride, t.offset, t.storage_numel) == ((4, 8, 8), (64, 8, 1), 0, 256)
    assert (tmp_path / "leak.pt").stat().st_size < before - 5 * 256 * 2
    assert torch.equal(torch.load(tmp_path / "leak.pt", weights_only=True), batch[5])
    assert findings_of(tmp_path, deep=True) == []


def test_gzip_dict_stays_gzip_dict_with_key_order(tmp_path: Path) -> None:
    """SimpleTuner --compress_disk_cache, a dict with its keys in their order, on cuda:0."""
    for i in range(4):
        (tmp_path / f"peer{i}.pt").write_bytes(
            gzip.compress(pt_bytes({"latents": latent(seed=i), "aux": torch.ones(3)}))
        )
    obj = {"latents": latent(seed=9), "aux": torch.arange(3.0)}
    with saved_on("cuda:0"):
        (tmp_path / "gpu.pt").write_bytes(gzip.compress(pt_bytes(obj)))
    assert cli("repair", str(tmp_path), "--yes")[0] == 0
    raw = (tmp_path / "gpu.pt").read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    again = torch.load(io.BytesIO(gzip.decompress(raw)), weights_only=True)
    assert list(again) == ["latents", "aux"] and all(torch.equal(again[k], obj[k]) for k in obj)
    assert findings_of(tmp_path, deep=True) == []


def test_legacy_torch_file_stays_legacy(tmp_path: Path) -> None:
    peers(tmp_path)
    with saved_on("cuda:1"), open(tmp_path / "old.pt", "wb") as out:
        torch.save(latent(seed=3), out, _use_new_zipfile_serialization=False)
    assert cli("repair", str(tmp_path), "--yes")[0] == 0
    meta = read_file(str(tmp_path / "old.pt"), deep=False)
    assert meta.format == "torch-legacy" and [t.location for t in meta.tensors] == ["cpu"]
    assert torch.equal(torch.load(tmp_path / "old.pt", weights_only=True), latent(seed=3))


def test_unsafe_pickle_is_quarantined_never_loaded(tmp_path: Path, marker: Path) -> None:
    peers(tmp_path)
    evil = malicious_torch_zip(marker)
    (tmp_path / "evil.pt").write_bytes(evil)
    (tmp_path / "plain.pt").write_bytes(pickle.dumps(Payload(marker)))
    code, out, _ = cli("repair", str(tmp_path), "--yes")
    assert code == 0 and "quarantine     2 file(s)" in out
    assert not (tmp_path / "evil.pt").exists() and not (tmp_path / "plain.pt").exists()
    assert quarantined(tmp_path)["evil.pt"] == evil
    records = [
        json.loads(line)
        for line in next((tmp_path / ".cachedoctor" / "quarantine").glob("*/.records.jsonl")).read_text().splitlines()
    ]
    assert sorted((r["path"], r["reasons"], r["action"]) for r in records) == [
        ("evil.pt", ["unsafe-pickle"], "quarantine"),
        ("plain.pt", ["unsafe-pickle"], "quarantine"),
    ]


def test_temp_files_foreign_quarantined_own_deleted(tmp_path: Path) -> None:
    peers(tmp_path)
    (tmp_path / "tmpAbCdEfGh").write_bytes(b"half of somebody's latent")
    own = tmp_path / ".cachedoctor-peer0.pt-k3j4h5g6.tmp"
    own.write_bytes(b"half of ours")
    code, out, _ = cli("repair", str(tmp_path), "--yes")
    assert code == 0 and "cleanup        1 file(s)" in out and "quarantine     1 file(s)" in out
    assert not own.exists() and not (tmp_path / "tmpAbCdEfGh").exists()
    assert quarantined(tmp_path) == {"tmpAbCdEfGh": b"half of somebody's latent"}


def test_dry_run_and_only_change_nothing_outside_their_scope(tmp_path: Path) -> None:
    peers(tmp_path)
    save_pt(tmp_path / "leak.pt", torch.randn(7, 4, 8, 8).to(torch.bfloat16)[1])
    with saved_on("cuda:1"):
        save_pt(tmp_path / "gpu.pt", latent(seed=5))
    snapshot = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    code, out, _ = cli("repair", str(tmp_path), "--dry-run")
    assert code == 1 and "dry run: nothing was changed" in out
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == snapshot
    code, out, _ = cli("repair", str(tmp_path), "--only", "device-tagged", "--yes")
    assert code == 0 and "clone-storage" not in out
    assert (tmp_path / "leak.pt").read_bytes() == snapshot["leak.pt"]
    assert (tmp_path / "gpu.pt").read_bytes() != snapshot["gpu.pt"]


def test_tty_asks_and_no_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    peers(tmp_path)
    with saved_on("cuda:1"):
        save_pt(tmp_path / "gpu.pt", latent(seed=5))
    old = (tmp_path / "gpu.pt").read_bytes()
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    code, out, err = cli("repair", str(tmp_path), stdin_tty=True)
    assert (code, err) == (1, "") and "Go ahead? [y/N] nothing was changed" in out
    assert (tmp_path / "gpu.pt").read_bytes() == old and not (tmp_path / ".cachedoctor").exists()


def test_restore_and_purge(tmp_path: Path) -> None:
    peers(tmp_path)
    with saved_on("cuda:2"):
        save_pt(tmp_path / "gpu.pt", latent(seed=5))
    old = (tmp_path / "gpu.pt").read_bytes()
    assert cli("repair", str(tmp_path), "--yes")[0] == 0
    repaired = (tmp_path / "gpu.pt").read_bytes()
    run = run_id(tmp_path)
    code, out, _ = cli("quarantine", "list", "--all", str(tmp_path))
    assert code == 0 and f"{run}: 1 file(s)" in out and "gpu.pt  [rewrite-cpu: device-tagged]" in out
    code, out, _ = cli("quarantine", "restore", run, str(tmp_path), "--yes")
    assert code == 0 and (tmp_path / "gpu.pt").read_bytes() == old
    (aside,) = [p for p in (tmp_path / ".cachedoctor" / "quarantine").iterdir()]
    assert aside.name.startswith("restore-") and (aside / "gpu.pt").read_bytes() == repaired
    code, _, err = cli("quarantine", "purge", aside.name, str(tmp_path))
    assert code == 2 and "add --yes to delete it for good" in err and aside.exists()
    code, out, _ = cli("quarantine", "purge", aside.name, str(tmp_path), "--yes")
    assert code == 0 and not aside.exists()
    assert cli("quarantine", "restore", "nope", str(tmp_path))[0] == 2


def test_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    peers(tmp_path)
    for argv, needle in [
        (("repair", str(tmp_path / "nope")), "no such file or folder"),
        (("repair", str(tmp_path), "--gpus", "2", "--yes"), "GPU(s) are visible here"),
        (("repair", str(tmp_path), "--encoder", f"diffusers-vae:{tmp_path / 'novae'}", "--yes"), "novae"),
        (("repair", str(tmp_path), "--only", "nonsense"), "unknown kind"),
        (("repair", str(tmp_path), "--device", "cuda", "--yes"), "no GPU is visible here"),
    ]:
        code, out, err = cli(*argv)
        assert code == 2, (argv, out, err)
        assert err.count("\n") == 1 and needle in err and "Traceback" not in err
    assert not (tmp_path / ".cachedoctor").exists()


def test_journal_records_the_run_and_each_item(tmp_path: Path) -> None:
    """The SQLite journal holds the run (done) and one row per action with its final state."""
    import sqlite3

    peers(tmp_path)
    with saved_on("cuda:1"):
        save_pt(tmp_path / "gpu.pt", latent(seed=5))
    (tmp_path / "tmpAbCdEfGh").write_bytes(b"x")
    (tmp_path / "bad.pt").write_bytes(b"PK\x03\x04 not really")
    assert cli("repair", str(tmp_path), "--keep-blocked", "--yes")[0] == 1  # bad.pt has no known source: blocked
    db = sqlite3.connect(tmp_path / ".cachedoctor" / "journal.sqlite")
    ((run, status),) = db.execute("SELECT run_id, status FROM runs").fetchall()
    assert status == "done" and run == run_id(tmp_path)
    rows = {Path(p).name: (json.loads(a)["kind"], s) for p, a, s in db.execute("SELECT path, action, state FROM items")}
    assert rows == {
        "gpu.pt": ("rewrite-cpu", "verified"),
        "tmpAbCdEfGh": ("quarantine", "verified"),
        "bad.pt": ("recompute", "blocked"),
    }
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_a_file_gone_between_listing_and_reading_is_skipped_not_an_error(tmp_path: Path) -> None:
    """A concurrent writer (or repair) may rename or remove a file after the walk listed it; the
    scan counts it as skipped instead of failing with exit 2, and repair leaves it alone."""
    from cachedoctor.repair.model import Action, ActionKind, ItemState
    from cachedoctor.repair.quarantine import Quarantine
    from cachedoctor.repair.replace import run_action
    from cachedoctor.scan.worker import inspect_path

    gone = inspect_path(str(tmp_path / "vanished.pt"), deep=False)
    temp = inspect_path(str(tmp_path / "tmpAbCdEfGh"), deep=False)
    assert (gone.status, gone.findings, temp.status, temp.findings) == ("skipped", (), "skipped", ())
    action = Action(ActionKind.QUARANTINE, str(tmp_path / "tmpAbCdEfGh"), str(tmp_path), ("partial-write",))
    result = run_action(action, Quarantine(str(tmp_path), "run"))
    assert result.state is ItemState.SKIPPED and not (tmp_path / ".cachedoctor").exists()


def test_quarantine_list_of_a_missing_path_is_exit_2(tmp_path: Path) -> None:
    code, out, err = cli("quarantine", "list", str(tmp_path / "nope"))
    assert code == 2 and out == "" and f"{tmp_path / 'nope'}: no such file or folder; check the path" in err
    # a file is a target as in scan and repair (issue 15): its quarantine is in its folder
    (tmp_path / "f.pt").write_bytes(b"x")
    code, out, _ = cli("quarantine", "list", str(tmp_path / "f.pt"))
    assert code == 0 and out == f"no quarantine at or below {tmp_path}\n"
    code, out, _ = cli("quarantine", "list", str(tmp_path))  # a folder no repair ran on: nothing, exit 0
    assert code == 0 and out == f"no quarantine at or below {tmp_path}\n"
