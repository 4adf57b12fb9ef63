"""``repair`` and ``recover --apply`` on a read-only cache: one line that names the cache folder
and says what to do (make it writable, or copy it), exit 2, nothing changed. It used to fail at
the journal and say to run the same `cachedoctor repair` again, which cannot help.

The cache is on a real tmpfs remounted read-only (``faults_harness.tmpfs``): the tests run as
root, which a chmod does not stop, but a read-only file system stops everyone. Where mounting is
not allowed, the test skips and says why.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest
import torch
from cli_run import cli
from factories import peers, save_pt
from faults_harness import tmpfs


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("command", [["repair"], ["recover", "--apply"]], ids=" ".join)
def test_a_read_only_cache_is_named_with_what_to_do(tmp_path: Path, command: list[str]) -> None:
    with tmpfs(tmp_path / "disk", 8192) as disk:
        cache = disk / "cache"
        peers(cache, dtype=torch.float32)
        save_pt(cache / "leak.pt", torch.randn(7, 4, 8, 8)[1])  # batch-leak: a rewrite
        (cache / "tmpAbCdEfGh").write_bytes(b"half a latent")  # partial-write: a quarantine
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        before = _tree(cache)
        code, out, err = cli(*command, str(cache), "--yes", "--no-state")
        assert code == 2, out + err
        assert err == (
            f"cachedoctor: error: {cache}: the cache folder is on a read-only file system, so nothing can be "
            "repaired in place and nothing was changed; make it writable (remount it read-write), or copy the "
            "cache to a writable disk and run the same command on the copy\n"
        )
        assert "cachedoctor repair` again" not in out + err
        assert _tree(cache) == before


def _files(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("blocked", [".cachedoctor", ".cachedoctor/quarantine"])
def test_a_file_where_the_quarantine_goes_is_named_with_what_to_do(tmp_path: Path, blocked: str) -> None:
    """A regular file where repair keeps what it replaces (a stray file, a botched copy): one
    line naming it, exit 2, nothing changed. Before, each item failed with "Not a directory",
    exit 1, naming no path (found by an adversarial review, rebuilt here first)."""
    cache = tmp_path / "cache"
    peers(cache, dtype=torch.float32)
    save_pt(cache / "leak.pt", torch.randn(7, 4, 8, 8)[1])  # batch-leak: a rewrite
    (cache / blocked).parent.mkdir(parents=True, exist_ok=True)
    (cache / blocked).write_bytes(b"not a folder")
    before = _files(cache)
    code, out, err = cli("repair", str(cache), "--yes", "--no-state")
    assert code == 2, out + err
    assert err == (
        f"cachedoctor: error: {cache / blocked}: is not a folder, and repair keeps what it replaces there; "
        "nothing was changed. Move it aside, then run the same command again\n"
    )
    assert _files(cache) == before
