"""A file name can hold a newline, an escape sequence or a carriage return; the human reports
show such characters as ``\\xNN``, so a cache file's name can neither forge a line of the report
("repaired: the rescan is clean") nor drive the terminal (found by an adversarial review of
issue 29, rebuilt here first). JSON keeps the name as it is (it escapes on its own)."""

from __future__ import annotations

import json
from pathlib import Path

from cli_run import cli
from factories import latent, pt_bytes

FORGED = "x\nrepaired: the rescan is clean\x1b[2K\r.pt"


def _cache(tmp_path: Path) -> Path:
    cache = tmp_path / "cache"
    cache.mkdir()
    for i in range(3):
        (cache / f"{i}.pt").write_bytes(pt_bytes({"latents": latent(seed=i)}))
    (cache / FORGED).write_bytes(pt_bytes({"latents": latent(seed=5)})[:300])  # torn: a finding
    return cache


def test_the_scan_table_shows_control_characters_escaped(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    code, out, _ = cli("scan", "--no-state", str(cache), columns=400)
    assert code == 1
    assert "\x1b" not in out and "\r" not in out
    assert not any(line.startswith("repaired:") for line in out.splitlines())
    assert "x\\x0arepaired: the rescan is clean\\x1b[2K\\x0d.pt" in out
    code, out, _ = cli("scan", "--no-state", "--format", "json", str(cache))
    assert [f["path"] for f in json.loads(out)["findings"]] == [str(cache / FORGED)]


def test_the_repair_report_shows_control_characters_escaped(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    code, out, _ = cli("repair", "--yes", "--no-state", "-v", str(cache), columns=400)
    assert "\x1b" not in out and "\r" not in out, out
    forged = ("repaired: the rescan is clean\x1b", "repaired: the rescan is clean\\x1b")  # raw or escaped
    assert not any(line.lstrip().startswith(forged) for line in out.splitlines())
    assert "x\\x0arepaired: the rescan is clean\\x1b[2K\\x0d.pt" in out
