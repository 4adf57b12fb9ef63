"""A local scan, as a fresh ``python -m cachedoctor`` process, imports only what it uses.

Start-up is most of a small scan's time (issue 31): pydantic (Typer's coercion, ``cli/coercion.py``),
asyncio and ssl (the S3 store, ``stores/s3_settings.py``), rich (a report's lines and its
findings table without colour, ``report/table.py`` and ``report/plain_table.py``) and the repair planner (a scan with nothing to repair) are imported only
by the runs that need them; a rescan that reads nothing starts no reader process, so it imports
neither multiprocessing nor the readers; a folder no layout claims imports the layouts' claims,
not their rules, config readers or samplers; nor does a local rescan import what only remote
targets, shards, baselines or multi-GPU runs use (hashlib, socket, ctypes). The modules are read from ``sys.modules`` at exit, in the
process that ran the command, and the output is the one the scan always gave.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEALTHY = ROOT / "fixtures" / "caches" / "healthy" / "kohya"

# ``python -m cachedoctor ARGS`` with the interpreter's modules written at exit (a forked reader
# leaves through os._exit: its atexit hooks do not run, so the file is the parent's).
_RUN = """
import atexit, json, os, runpy, sys
out = os.environ.pop("CACHEDOCTOR_TEST_MODULES")
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv = ["cachedoctor", *sys.argv[1:]]
runpy.run_module("cachedoctor", run_name="__main__", alter_sys=True)
"""
_NEVER = ("pydantic", "asyncio", "ssl", "rich", "cachedoctor.stores.s3", "cachedoctor.repair.planner")
_NOT_WITHOUT_READS = ("multiprocessing", "concurrent.futures", "cachedoctor.scan.pool", "cachedoctor.formats")
# what only a remote target, a shard of several, a baseline, a multi-GPU run or a reader process
# needs: OpenSSL's hashes, sockets, ctypes, the sampler models, the baseline file
_NOT_IN_A_LOCAL_RESCAN = (
    "hashlib", "_hashlib", "socket", "ctypes", "cachedoctor.baseline",
    "cachedoctor.layouts.samplers.interface", "cachedoctor.layouts.samplers.registry",
)  # fmt: skip
# what ``--layout auto`` needs only once it gives a folder to a layout: the layouts' rules,
# config readers, bucket models and samplers (their claims are all a folder no layout claims needs)
_NOT_WITHOUT_A_LAYOUT = tuple(
    f"cachedoctor.layouts.{name}"
    for name in (
        "_aitoolkit_rules", "_musubi_rules", "_musubi_buckets", "_kohya_config", "_kohya_buckets",
        "_simpletuner_config", "_simpletuner_aws", "_simpletuner_hazards", "_simpletuner_buckets",
        "_manifest_remote", "samplers.from_config",
    )
)  # fmt: skip


def _run(tmp_path: Path, *argv: str) -> tuple[int, str, str, list[str]]:
    modules = tmp_path / "modules.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEDOCTOR_")}
    env["CACHEDOCTOR_TEST_MODULES"] = str(modules)
    done = subprocess.run(
        [sys.executable, "-c", _RUN, *argv], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120
    )
    return done.returncode, done.stdout, done.stderr, json.loads(modules.read_text())


def _loaded(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return [m for m in modules if m in names or m.startswith(tuple(f"{n}." for n in names))]


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A small healthy kohya cache (six latents beside no images: a plain cache scan)."""
    shutil.copytree(HEALTHY, tmp_path / "cache")
    return tmp_path / "cache"


def test_a_quick_local_scan_with_one_reader_imports_no_pydantic_asyncio_ssl_rich_or_planner(
    cache: Path, tmp_path: Path
) -> None:
    code, out, err, modules = _run(tmp_path, "scan", str(cache), "--no-state", "-q", "-j1")
    assert (code, out, err) == (0, "No findings.\n", "")
    assert _loaded(modules, _NEVER) == []
    assert "cachedoctor.scan.pool" in modules  # its one reader process: no file is read by the parent


def test_a_rescan_that_reads_nothing_starts_no_reader_and_imports_none(cache: Path, tmp_path: Path) -> None:
    first = _run(tmp_path, "scan", str(cache), "-q")
    code, out, err, modules = _run(tmp_path, "scan", str(cache), "-q")
    assert first[:3] == (code, out, err) == (0, "No findings.\n", "")
    assert _loaded(modules, _NEVER + _NOT_WITHOUT_READS + _NOT_WITHOUT_A_LAYOUT + _NOT_IN_A_LOCAL_RESCAN) == []
    assert "cachedoctor.scan.state.store" in modules  # it did go through the state database
    assert "cachedoctor.layouts.musubi" in modules  # every layout's claims were asked


def test_a_scan_with_findings_writes_its_plain_table_without_rich_and_a_coloured_one_with_it(tmp_path: Path) -> None:
    """The lazy imports are lazy, not gone: a finding loads the repair preview's planner; the
    findings table is written without rich when the output has no colour, with it in colour."""
    shutil.copytree(HEALTHY, tmp_path / "cache")
    victim = next(iter(sorted((tmp_path / "cache").iterdir())))
    victim.write_bytes(victim.read_bytes()[:100])  # truncated
    code, out, err, modules = _run(tmp_path, "scan", str(tmp_path / "cache"), "--no-state", "-q", "-j1")
    assert code == 1 and victim.name in out and "Findings by kind" in out and "┃ severity ┃" in out
    assert "cachedoctor.repair.planner" in modules
    assert _loaded(modules, ("pydantic", "asyncio", "ssl", "rich")) == []
    code, out, err, modules = _run(
        tmp_path, "scan", str(tmp_path / "cache"), "--no-state", "-q", "-j1", "--color", "always"
    )
    assert code == 1 and victim.name in out and "\x1b[" in out and "┃" in out
    assert {"rich.console", "rich.table", "cachedoctor.repair.planner"} <= set(modules)
