"""``cachedoctor recover`` after real crashes: a SimpleTuner-like writer and a repair, each
SIGKILLed mid-write, then ``recover`` (report), ``recover --apply``, and a clean deep scan."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from factories import flip_data_byte, latent, peers, save_pt, settle
from filelock import FileLock
from repair_factories import POOL, simpletuner

from cachedoctor.cli import run
from cachedoctor.cli.environment import Environment

#: Writes latents as SimpleTuner does: torch.save to memory, the bytes to ``tmp`` + 8 random
#: characters in the cache folder (slowly, in chunks, so a kill lands mid-write), then rename.
#: With ``direct`` it writes straight to the final name instead, as ``np.savez(path)`` and
#: ``torch.save(obj, path)`` do: a kill leaves a torn file under its real name and no temp.
WRITER = textwrap.dedent("""
    import io, os, random, sys, time
    import torch
    folder, n, direct = sys.argv[1], int(sys.argv[2]), sys.argv[3:] == ["direct"]
    for i in range(n):
        buf = io.BytesIO()
        torch.save(torch.randn(4, 16, 16).to(torch.bfloat16), buf)
        data = buf.getvalue()
        final = os.path.join(folder, f"{i:04d}.pt")
        tmp = final if direct else os.path.join(
            folder, "tmp" + "".join(random.choices("abcdefghijklmnopqrstuvwxyz0123456789_", k=8)))
        with open(tmp, "wb") as out:
            for k in range(0, len(data), 256):
                out.write(data[k:k + 256]); out.flush(); time.sleep(0.01 if direct else 0.003)
        if not direct:
            os.rename(tmp, final)
        print(i, flush=True)
""")


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdout_isatty=False, stderr_isatty=False, stdin_isatty=False, cwd="/")
    return run(list(argv), env), out.getvalue(), err.getvalue()


def deep_findings(*argv: str) -> list[dict]:
    code, out, _ = cli("scan", "--deep", "--format", "json", *argv)
    return json.loads(out)["findings"]


def kill_writer_mid_write(folder: Path, tmp_path: Path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    proc = subprocess.Popen([sys.executable, str(script), str(folder), "1000"], stdout=subprocess.PIPE, text=True)
    try:
        for _ in range(5):
            assert proc.stdout is not None and proc.stdout.readline()
        deadline = time.monotonic() + 30
        while not any(p.name.startswith("tmp") for p in folder.iterdir()):
            assert time.monotonic() < deadline
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def test_writer_killed_mid_write(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    kill_writer_mid_write(cache, tmp_path)
    temps = [p for p in cache.iterdir() if p.name.startswith("tmp")]
    assert len(temps) == 1
    partial = temps[0].read_bytes()
    code, out, _ = cli("recover", str(cache))
    assert code == 1 and "temp files of interrupted writes: 1" in out and temps[0].name in out
    assert "recover --apply" in out and temps[0].exists()
    code, out, err = cli("recover", str(cache), "--apply", "--yes")
    assert (code, err) == (0, ""), out
    assert not temps[0].exists()
    (kept,) = (cache / ".cachedoctor" / "quarantine").glob(f"*/{temps[0].name}")
    assert kept.read_bytes() == partial
    assert deep_findings(str(cache)) == []
    assert cli("recover", str(cache))[0] == 0


def test_trainer_crash_after_a_scan_reads_deep_only_what_was_written_since(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    old = peers(cache, 4, h=16, w=16)
    settle(cache)
    assert cli("scan", str(cache))[0] == 0  # the state database: the last healthy checkpoint
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(cache), "1000", "direct"], stdout=subprocess.PIPE, text=True
    )
    try:
        for _ in range(4):
            assert proc.stdout is not None and proc.stdout.readline()
        deadline = time.monotonic() + 30
        while not (cache / "0004.pt").exists():  # the fifth file is being written
            assert time.monotonic() < deadline
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    written = sorted(cache.glob("0*.pt"))
    torn = written[-1]
    flip_data_byte(written[1])  # pages that never reached the disk: the zip is whole, its data is not
    code, out, _ = cli("recover", str(cache))
    flat = " ".join(out.split())  # lines are wrapped at 80 columns
    assert code == 1
    assert (
        f"written since the last scan (its state database): {len(written)} file(s) read deep, 2 of them damaged:"
        in flat
    )
    assert f"{os.path.relpath(written[1], '/')}: corrupt-archive" in flat
    assert f"{os.path.relpath(torn, '/')}: corrupt-archive" in flat
    assert "recorded as damaged" not in out  # the checkpoint was healthy
    assert not any(p.name in out for p in old)  # unchanged since the scan: not read again
    assert "temp files" not in out


def test_interrupted_repair_is_resumed_with_its_own_encoder(tmp_path: Path) -> None:
    ds = simpletuner(tmp_path, 6)
    for image in ds.images[:3]:
        ds.latent_path(image).unlink()
    killed = subprocess.run(
        [sys.executable, "-m", "cachedoctor", "repair", "--config", str(ds.config), "--encoder", POOL, "--yes"],
        env={**os.environ, "CACHEDOCTOR_TEST_KILL_AT": "5"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL
    code, out, _ = cli("recover", "--config", str(ds.config))
    assert code == 1 and "interrupted repair in" in out and f"encoder(s): {POOL}" in " ".join(out.split())
    code, out, err = cli("recover", "--config", str(ds.config), "--apply", "--yes")  # no --encoder: the journal's
    assert (code, err) == (0, ""), out
    assert "resuming interrupted run" in out
    assert deep_findings("--config", str(ds.config)) == []


def test_held_lock_stops_apply(tmp_path: Path) -> None:
    peers(tmp_path)
    save_pt(tmp_path / "x.pt", latent())
    (tmp_path / "tmpAbCdEfGh").write_bytes(b"half")
    with FileLock(str(tmp_path / ".x.pt.lock")):
        code, out, _ = cli("recover", str(tmp_path))
        assert code == 1 and "lock held by a live process (a writer is active)" in out
        code, _, err = cli("recover", str(tmp_path), "--apply", "--yes")
        assert code == 2 and "a running process holds this lock" in err
        assert (tmp_path / "tmpAbCdEfGh").exists()
    assert cli("recover", str(tmp_path), "--apply", "--yes")[0] == 0


@pytest.mark.parametrize("argv", [("recover",), ("recover", "/nope/cache")])
def test_recover_bad_input(argv: tuple[str, ...]) -> None:
    code, _, err = cli(*argv)
    assert code == 2 and err.count("\n") == 1
