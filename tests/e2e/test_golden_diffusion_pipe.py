"""tdrussell/diffusion-pipe golden caches (``fixtures/trainers/diffusion_pipe``, written by
diffusion-pipe 8f83dbf's own caching; see its README): every item of every shard judged, a
finding names its shard and item, and a damaged item is repaired the trainer's way (its index cut
before it, so the trainer re-caches from there), after which the trainer's loader reads every item.

Uses only committed files, never diffusion-pipe. The trainer's loader is re-implemented from
reading ``utils/cache.py`` (``Cache.__getitem__``: ``size`` bytes at ``offset``, ``torch.load`` with
``map_location='cpu'``) and its resume rule (``init``/``_map_and_cache``: caching resumes at
``len(items)`` in a new shard numbered one past the last listed, whose table must not exist).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
import torch
from cli_run import cli

GOLD = Path(__file__).resolve().parents[2] / "fixtures" / "trainers" / "diffusion_pipe"
CACHE = "images/cache/flux"
SQUARE = f"{CACHE}/cache_1.000x128x128x1/latents"  # items 0, 1 in shard_0 (a, d), item 2 in shard_1 (e)
TALL = f"{CACHE}/cache_0.500x64x128x1/latents"  # items 0, 1 in shard_0 (f, b)


@pytest.fixture
def dpipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "dpipe"
    shutil.copytree(GOLD, root, ignore=shutil.ignore_patterns("make_golden.py", "*.json"))
    monkeypatch.chdir(root)  # the dataset config's path = 'images' is relative
    return root


def scan(*args: str) -> list[tuple[str, str]]:
    code, out, err = cli("scan", "--deep", "--no-state", "--format", "json", *args)
    assert err == "", err
    return sorted((f["kind"], os.path.relpath(f["path"])) for f in json.loads(out)["findings"])


def spans(folder: str, shard: int) -> list[tuple[int, int]]:
    with sqlite3.connect(f"{folder}/metadata.db") as con:
        return con.execute(f"SELECT offset, size FROM shard_{shard} ORDER BY rowid").fetchall()


def load_items(folder: str) -> list[dict]:
    """diffusion-pipe's ``Cache``: each listed item read as its loader reads it."""
    with sqlite3.connect(f"{folder}/metadata.db") as con:
        items = con.execute("SELECT shard, shard_index FROM items ORDER BY rowid").fetchall()
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    out = []
    for shard, place in items:
        offset, size = spans(folder, shard)[place]
        with open(f"{folder}/shard_{shard}.bin", "rb") as handle:
            handle.seek(offset)
            out.append(torch.load(io.BytesIO(handle.read(size)), map_location="cpu"))
    following = max((s for s, _ in items), default=-1) + 1  # the shard a resumed run writes
    assert f"shard_{following}" not in tables, "a resumed run would stop on CREATE TABLE"
    return out


def rewrite_item(folder: str, shard: int, place: int, change) -> None:  # type: ignore[no-untyped-def]
    """Save item ``place`` of ``shard`` again, changed, as diffusion-pipe writes a shard: its
    archive in its place, the items after it moved, the shard's table updated to match."""
    rows = spans(folder, shard)
    offset, size = rows[place]
    path = Path(folder) / f"shard_{shard}.bin"
    data = path.read_bytes()
    item = torch.load(io.BytesIO(data[offset : offset + size]), weights_only=True)
    change(item)
    buf = io.BytesIO()
    torch.save(item, buf)
    new = buf.getvalue()
    path.write_bytes(data[:offset] + new + data[offset + size :])
    with sqlite3.connect(f"{folder}/metadata.db") as con:
        moved = len(new) - size
        for rowid, (start, _length) in enumerate(rows, 1):
            if rowid - 1 == place:
                con.execute(f"UPDATE shard_{shard} SET size = ? WHERE rowid = ?", (len(new), rowid))
            elif rowid - 1 > place:
                con.execute(f"UPDATE shard_{shard} SET offset = ? WHERE rowid = ?", (start + moved, rowid))


@pytest.mark.parametrize("args", [["--config", "dataset.toml"], ["--config", "train.toml"], [CACHE], ["images"]])
def test_pristine_cache_has_no_finding_and_names_the_layout(dpipe: Path, args: list[str]) -> None:
    code, out, err = cli("scan", "--deep", "--no-state", *args)
    assert (code, err) == (0, ""), out
    assert "layout: diffusion-pipe (" in out, out
    assert "No findings" in out


def _nan(item: dict) -> None:
    item["latents"][0, 0, 0] = float("nan")


def _plant(defect: str) -> list[tuple[str, str]]:
    if defect == "nan":
        rewrite_item(SQUARE, 0, 1, _nan)
        return [("non-finite", f"{SQUARE}/shard_0.bin")]
    if defect == "flipped":  # 4 bytes inside item 2's tensor data: loads silently, only its CRC says so
        offset, size = spans(SQUARE, 1)[0]
        path = Path(SQUARE) / "shard_1.bin"
        data = bytearray(path.read_bytes())
        at = data.find(b"archive/data/0", offset) + 200
        data[at : at + 4] = bytes(b ^ 0xFF for b in data[at : at + 4])
        path.write_bytes(bytes(data))
        return [("corrupt-archive", f"{SQUARE}/shard_1.bin")]
    if defect == "truncated":
        path = Path(SQUARE) / "shard_0.bin"
        path.write_bytes(path.read_bytes()[:-500])
        return [("corrupt-archive", f"{SQUARE}/shard_0.bin")]
    if defect == "other-size":  # item 0 of the 128x128 bucket holds a 12x12 latent
        rewrite_item(SQUARE, 0, 0, lambda item: item.update(latents=item["latents"][:, :12, :12].clone()))
        return [("shape-mismatch", f"{SQUARE}/shard_0.bin")]
    if defect == "stale-image":
        later = time.time() + 3600
        os.utime("images/d.png", (later, later))
        return [
            ("stale-entry", f"{SQUARE}/shard_0.bin"),
            ("stale-entry", f"{CACHE}/cache_1.000x96x96x1/latents/shard_0.bin"),
        ]
    if defect == "image-gone":
        os.remove("images/b.png")
        return [
            ("stale-entry", f"{TALL}/shard_0.bin"),
            ("stale-entry", f"{CACHE}/cache_0.500x96x176x1/latents/shard_0.bin"),
        ]
    if defect == "image-added":  # a square image the indexes predate: both square buckets, both text encoders
        shutil.copy("images/d.png", "images/g.png")
        shutil.copy("images/d.txt", "images/g.txt")
        return [
            ("missing-entry", f"{SQUARE}/metadata.db"),
            ("missing-entry", f"{CACHE}/cache_1.000x96x96x1/latents/metadata.db"),
            ("missing-entry", f"{CACHE}/ar_frames_1.000_1/text_embeddings_1/metadata.db"),
            ("missing-entry", f"{CACHE}/ar_frames_1.000_1/text_embeddings_2/metadata.db"),
        ]
    if defect == "orphan-shard":
        shutil.copy(f"{SQUARE}/shard_0.bin", f"{SQUARE}/shard_7.bin")
        return [("orphan-entry", f"{SQUARE}/shard_7.bin")]
    raise AssertionError(defect)


DEFECTS = ("nan", "flipped", "truncated", "other-size", "stale-image", "image-gone", "image-added", "orphan-shard")


@pytest.mark.parametrize("defect", DEFECTS)
def test_each_planted_defect_is_found_and_names_its_shard_and_item(dpipe: Path, defect: str) -> None:
    want = _plant(defect)
    assert sorted(set(scan("--config", "dataset.toml"))) == sorted(want)


def test_a_finding_names_the_item(dpipe: Path) -> None:
    rewrite_item(SQUARE, 0, 1, _nan)
    code, out, err = cli("scan", "--deep", "--no-state", "--format", "json", "--config", "dataset.toml")
    [finding] = json.loads(out)["findings"]
    assert finding["message"] == "1 NaN/Inf value(s) in item 1/latents"


@pytest.mark.parametrize("defects", [("nan", "image-gone"), ("flipped", "stale-image"), ("truncated",)])
def test_a_damaged_item_is_dropped_and_the_trainer_reads_every_item_left(dpipe: Path, defects: tuple[str, ...]) -> None:
    originals = {p: p.read_bytes() for p in Path(CACHE).rglob("*") if p.is_file()}
    for defect in defects:
        _plant(defect)
    planted = {p: p.read_bytes() for p in originals if p.exists()}
    code, out, err = cli("repair", "--deep", "--config", "dataset.toml", "--yes")
    assert code == 1 and err == "", out  # the dropped items are the trainer's to re-cache: not clean yet
    assert "drop-items" in out and "the trainer re-caches the dropped items when it next runs" in " ".join(out.split())
    kinds = {k for k, _ in scan("--config", "dataset.toml")}
    assert kinds <= {"missing-entry"}, kinds  # what is left: items the index no longer lists
    for folder in (SQUARE, f"{CACHE}/cache_1.000x96x96x1/latents", TALL):
        for item in load_items(folder):
            assert torch.isfinite(item["latents"]).all()
    run = out.split("cachedoctor quarantine restore ")[1].split()[0]
    code, out, err = cli("quarantine", "restore", run, CACHE, "--yes")
    assert code == 0, out
    assert {p: p.read_bytes() for p in planted if p.exists()} == planted  # undone byte for byte


def test_a_writer_that_died_mid_transaction_is_left_to_sqlite(dpipe: Path) -> None:
    rewrite_item(SQUARE, 0, 1, _nan)
    Path(f"{SQUARE}/metadata.db-journal").write_bytes(b"hot")
    before = Path(f"{SQUARE}/metadata.db").read_bytes()
    code, out, err = cli("repair", "--deep", "--config", "dataset.toml", "--yes")
    assert code == 1 and "metadata.db-journal (it died mid-transaction)" in " ".join(out.split())
    assert Path(f"{SQUARE}/metadata.db").read_bytes() == before


def test_an_index_a_writer_died_in_is_read_as_sqlite_will_roll_it_back(dpipe: Path) -> None:
    """A trainer killed mid-caching leaves a hot rollback journal: the index is read from a rolled
    back copy (never in the cache), so no shard is taken for an orphan or moved."""
    import subprocess
    import sys

    script = (
        "import os, sqlite3, sys\n"
        "con = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "con.execute('PRAGMA cache_size = 1')\n"
        "con.execute('BEGIN')\n"
        "con.execute('CREATE TABLE shard_9(offset, size)')\n"
        "for i in range(2000):\n"
        "    con.execute('INSERT INTO items VALUES (9, ?)', (i,))\n"
        "os._exit(0)\n"  # killed before COMMIT: the journal stays, hot
    )
    subprocess.run([sys.executable, "-c", script, f"{SQUARE}/metadata.db"], check=True)
    assert Path(f"{SQUARE}/metadata.db-journal").stat().st_size > 0
    before = {p: p.read_bytes() for p in Path(SQUARE).iterdir()}
    assert scan("--config", "dataset.toml") == []
    assert {p: p.read_bytes() for p in Path(SQUARE).iterdir()} == before


def test_an_index_that_does_not_read_is_set_aside_with_its_shards(dpipe: Path) -> None:
    """diffusion-pipe stops on an index SQLite cannot read; with no index it caches the folder
    from the start. So the index and every shard go to the quarantine, and come back on restore."""
    index = Path(f"{TALL}/metadata.db")
    damaged = b"\0" * 16 + index.read_bytes()[16:]
    index.write_bytes(damaged)
    shard = Path(f"{TALL}/shard_0.bin").read_bytes()
    assert scan("--config", "dataset.toml") == [("corrupt-archive", f"{TALL}/shard_0.bin")]
    code, out, err = cli("repair", "--deep", "--config", "dataset.toml", "--yes")
    text = " ".join(out.split())
    assert err == "" and "its index does not read: it and its shards go to the quarantine" in text, out
    assert [n for n in os.listdir(TALL) if not n.endswith(".lock")] == []  # (repair's own lock file stays)
    assert {k for k, _ in scan("--config", "dataset.toml")} <= {"missing-entry"}  # the trainer's to re-cache
    run = out.split("cachedoctor quarantine restore ")[1].split()[0]
    code, out, err = cli("quarantine", "restore", run, "--config", "dataset.toml", "--yes")
    assert code == 0, out + err
    assert (index.read_bytes(), Path(f"{TALL}/shard_0.bin").read_bytes()) == (damaged, shard)


def test_an_item_of_another_size_is_dropped(dpipe: Path) -> None:
    folder = f"{CACHE}/cache_1.000x96x96x1/latents"
    rewrite_item(folder, 0, 1, lambda item: item.update(latents=item["latents"][:, :10, :].clone()))
    assert scan("--config", "dataset.toml") == [("shape-mismatch", f"{folder}/shard_0.bin")]
    code, out, err = cli("repair", "--deep", "--config", "dataset.toml", "--yes")
    assert err == "" and "done: 1 verified, 0 skipped" in out, out
    assert len(load_items(folder)) == 1  # items 1 and 2 dropped: the trainer re-caches them
    assert {k for k, _ in scan("--config", "dataset.toml")} == {"missing-entry"}


def test_a_finding_about_one_item_names_its_image(dpipe: Path) -> None:
    rewrite_item(SQUARE, 0, 1, _nan)  # item 1 of the square bucket is d.png
    code, out, err = cli("scan", "--deep", "--no-state", "--format", "json", "--config", "dataset.toml")
    [finding] = json.loads(out)["findings"]
    assert finding["source"] == str(Path("images/d.png").resolve())


def test_cachedoctors_own_folder_and_an_empty_folder_are_no_model(dpipe: Path) -> None:
    code, out, err = cli("scan", "--deep", "images/cache")  # writes images/cache/.cachedoctor (its state)
    assert code == 0 and Path("images/cache/.cachedoctor").is_dir(), out
    Path("images/cache/old").mkdir()
    assert scan("--config", "dataset.toml") == []


def test_a_dropped_text_embedding_is_missing_until_the_trainer_caches_it_again(dpipe: Path) -> None:
    folder = f"{CACHE}/ar_frames_1.000_1/text_embeddings_1"  # items e, d, a

    def nan(item: dict) -> None:
        item["clip_embed"][0] = float("nan")

    rewrite_item(folder, 0, 2, nan)
    assert scan("--config", "dataset.toml") == [("non-finite", f"{folder}/shard_0.bin")]
    code, out, err = cli("repair", "--deep", "--config", "dataset.toml", "--yes")
    assert err == "" and "done: 1 verified, 0 skipped" in out, out
    assert len(load_items(folder)) == 2  # item 2 dropped
    assert scan("--config", "dataset.toml") == [("missing-entry", f"{folder}/metadata.db")]
