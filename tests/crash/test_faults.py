"""The fault model, end to end: a nearly full disk, a write error at every call site, a cache
that spans file systems. Every run is a real ``python -m cachedoctor`` subprocess on real
files; the full disks are real tmpfs mounts; injected errors come from a ``sitecustomize`` at
the OS/SQLite boundary (``faults_harness.py``). The promise checked each time: exit 0/1 with a
report, or exactly one line and exit 2, and nothing lost (every file's bytes in the cache or in
the quarantine).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from factories import latent, peers, pt_bytes
from faults_harness import Zygote, fill, inject_dir, live_group, lost, one_line_error, quarantined, tmpfs, tree

FREE_KB = (0, 4, 8, 16, 32, 64, 128, 256, 1024)
TIMEOUT_S = 120


_ZYGOTE: Zygote | None = None


@pytest.fixture(scope="module", autouse=True)
def _zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One fork server for the module (``faults_harness.Zygote``): a run without an injection
    is forked from an interpreter that has imported the CLI, not started from nothing."""
    global _ZYGOTE
    _ZYGOTE = Zygote(tmp_path_factory.mktemp("zygote"), preload=("cachedoctor.cli",))
    yield
    _ZYGOTE.close()
    _ZYGOTE = None


def cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m cachedoctor ARGS``: forked when nothing needs a fresh interpreter, a new one
    when ``PYTHONPATH`` brings the injecting ``sitecustomize`` (loaded at start-up only)."""
    child = {k: v for k, v in os.environ.items() if not k.startswith("CACHEDOCTOR_")}
    child.update(env, PYTHONDONTWRITEBYTECODE="1", CACHEDOCTOR_PROGRESS="none")  # stderr is judged line by line
    if _ZYGOTE is not None and "PYTHONPATH" not in env:
        return _ZYGOTE.run([sys.executable, "-m", "cachedoctor", *args], Path.cwd(), child, TIMEOUT_S)
    return subprocess.run(
        [sys.executable, "-m", "cachedoctor", *args], capture_output=True, text=True, env=child, timeout=TIMEOUT_S
    )


def make_cache(root: Path, strays: int = 2) -> None:
    """Two folders of peers, one truncated latent (a finding repair cannot fix without a
    dataset) and ``strays`` abandoned temp files (partial-write: repair quarantines them)."""
    root.mkdir(parents=True, exist_ok=True)
    peers(root)
    peers(root / "sub")
    (root / "cut.pt").write_bytes(pt_bytes(latent())[:300])
    for i in range(strays):
        folder = root if i % 2 == 0 else root / "sub"
        (folder / f"tmpStray{i:03d}").write_bytes(os.urandom(3000 + i))


def findings(proc: subprocess.CompletedProcess[str]) -> list[tuple[str, str]] | None:
    try:
        return sorted((f["kind"], f["path"]) for f in json.loads(proc.stdout)["findings"])
    except (ValueError, KeyError, TypeError):
        return None


def temps(root: Path) -> list[str]:
    """cachedoctor's temp files anywhere under ``root``, symlinked folders included."""
    return sorted(
        os.path.join(d, n)
        for d, _, names in os.walk(root, followlinks=True)
        for n in names
        if n.startswith(".cachedoctor-") and n.endswith(".tmp")
    )


def judge_stop(proc: subprocess.CompletedProcess[str], root: Path) -> list[str]:
    """Exit 2 must be one line naming a path in the cache and saying what to do."""
    line = one_line_error(proc.stderr)
    if line is None:
        return [f"exit 2 without one clean line: {proc.stderr[-2000:]!r}"]
    if not line.startswith(str(root)):
        return [f"the line does not name a path in the cache: {line}"]
    if "then" not in line and "--fresh" not in line:
        return [f"the line does not say what to do: {line}"]
    return []


# --- a real, nearly full disk ------------------------------------------------------------------


@pytest.mark.slow
def test_scan_on_a_nearly_full_disk_always_reports(tmp_path: Path) -> None:
    """Scan and scan --deep with 0 KiB to 1 MiB free on the cache's disk, the state database
    created from nothing each time: the report is always there with the findings of a scan
    without state (exit 1), whatever became of the state, and no file changes."""
    problems: list[str] = []
    with tmpfs(tmp_path / "fs", 2048) as fs:
        cache = fs / "cache"
        make_cache(cache)
        before = tree(cache)
        expected = findings(cli("scan", str(cache), "--no-state", "--format", "json"))
        assert expected and ("corrupt-archive", str(cache / "cut.pt")) in expected
        for deep in ((), ("--deep",)):
            for kb in FREE_KB:
                shutil.rmtree(cache / ".cachedoctor", ignore_errors=True)
                filler = fill(fs, kb)
                proc = cli("scan", str(cache), "--format", "json", *deep)
                filler.unlink()
                label = f"scan {' '.join(deep)} with {kb} KiB free"
                if proc.returncode != 1 or findings(proc) != expected or "Traceback" in proc.stderr:
                    problems.append(f"{label}: exit {proc.returncode}, {proc.stdout[-300:]!r} {proc.stderr[-1500:]!r}")
                if tree(cache) != before:
                    problems.append(f"{label}: the cache changed")
    assert problems == [], "\n".join(problems)


@pytest.mark.slow
def test_repair_on_a_nearly_full_disk_stops_in_one_line_or_finishes(tmp_path: Path) -> None:
    """Repair with 0 KiB to 1 MiB free (the journal, the quarantine and its records all on that
    disk): it finishes (exit 1: the truncated latent has no source) or stops with one line and
    exit 2; nothing is lost, no temp file stays, and once space is back the same command finishes."""
    pristine = tmp_path / "pristine"
    make_cache(pristine)
    before = tree(pristine)
    problems: list[str] = []
    with tmpfs(tmp_path / "fs", 2048) as fs:
        cache = fs / "cache"
        for kb in FREE_KB:
            shutil.rmtree(cache, ignore_errors=True)
            shutil.copytree(pristine, cache)
            filler = fill(fs, kb)
            proc = cli("repair", str(cache), "--keep-blocked", "--yes")
            filler.unlink()
            label = f"repair with {kb} KiB free"
            if proc.returncode == 2:
                problems += [f"{label}: {p}" for p in judge_stop(proc, cache)]
                proc = cli("repair", str(cache), "--keep-blocked", "--yes")
            if proc.returncode != 1 or "done:" not in proc.stdout or "Traceback" in proc.stderr:
                problems.append(f"{label}: exit {proc.returncode} {proc.stdout[-500:]!r} {proc.stderr[-1500:]!r}")
            problems += [f"{label}: lost {r}" for r in lost(before, cache)]
            problems += [f"{label}: temp file left {t}" for t in temps(cache)]
    assert problems == [], "\n".join(problems)


@pytest.mark.slow
def test_restore_on_a_nearly_full_disk_stops_in_one_line_or_finishes(tmp_path: Path) -> None:
    """``quarantine restore`` with 0 KiB to 1 MiB free, one restored path taken again by a new
    file (which must itself be kept aside): it restores everything or stops in one line; the
    same restore then finishes; every version of every file is somewhere."""
    pristine = tmp_path / "pristine"
    problems: list[str] = []
    with tmpfs(tmp_path / "fs", 2048) as fs:
        cache = fs / "cache"  # built and repaired in place: the quarantine records absolute paths
        make_cache(cache, strays=4)
        originals = tree(cache)
        assert cli("repair", str(cache), "--keep-blocked", "--yes").returncode == 1
        (run_id,) = os.listdir(cache / ".cachedoctor" / "quarantine")
        (cache / "tmpStray000").write_bytes(b"a new file where a quarantined one was")
        every = {**originals, "new": b"a new file where a quarantined one was"}
        shutil.copytree(cache, pristine)
        for kb in FREE_KB:
            shutil.rmtree(cache, ignore_errors=True)
            shutil.copytree(pristine, cache, symlinks=True)
            filler = fill(fs, kb)
            proc = cli("quarantine", "restore", run_id, str(cache), "--yes")
            filler.unlink()
            label = f"restore with {kb} KiB free"
            if proc.returncode == 2:
                problems += [f"{label}: {p}" for p in judge_stop(proc, cache)]
                proc = cli("quarantine", "restore", run_id, str(cache), "--yes")
            if proc.returncode != 0 or "restored" not in proc.stdout:
                problems.append(f"{label}: exit {proc.returncode} {proc.stdout[-500:]!r} {proc.stderr[-1500:]!r}")
            now, kept = tree(cache), quarantined(cache)
            missing = [r for r, data in every.items() if data not in now.values() and data not in kept]
            problems += [f"{label}: lost {r}" for r in missing]
            problems += [f"{label}: temp file left {t}" for t in temps(cache)]
    assert problems == [], "\n".join(problems)


# --- an injected error at every write call site ------------------------------------------------


def _sites(tmp_path: Path, cache: Path, args: tuple[str, ...]) -> dict[int, str]:
    """The first call (1-based) of each distinct write call site of a run, and the site."""
    count = tmp_path / "count"
    proc = cli(
        *args,
        PYTHONPATH=str(inject_dir(tmp_path)),
        CACHEDOCTOR_FAULT_ROOT=str(cache),
        CACHEDOCTOR_FAULT_COUNT=str(count),
    )
    assert proc.returncode in (0, 1), proc.stderr
    first: dict[str, int] = {}
    for i, site in enumerate(count.read_text().splitlines(), 1):
        first.setdefault(site, i)
    return {i: site for site, i in first.items()}


@pytest.mark.slow
@pytest.mark.parametrize("command", ["scan", "repair", "restore"])
def test_a_write_error_at_every_call_site(tmp_path: Path, command: str) -> None:
    """ENOSPC and EIO alternately at the first call of every write call site of a run (file
    opens, writes, renames, links, fsyncs, SQLite statements; a site is a line of cachedoctor
    that makes the call, found by a counting run first). Scan must
    report its findings all the same (exit 1); repair and restore finish or stop with one line
    and exit 2; nothing is lost and no temp file stays."""
    cache, pristine = tmp_path / "cache", tmp_path / "pristine"
    make_cache(cache, strays=2)
    before = tree(cache)
    run_id = ""
    if command == "restore":
        assert cli("repair", str(cache), "--keep-blocked", "--yes").returncode == 1
        (run_id,) = os.listdir(cache / ".cachedoctor" / "quarantine")
        (cache / "tmpStray000").write_bytes(b"replaced since")
        before["new"] = b"replaced since"
    shutil.copytree(cache, pristine)
    args = {
        "scan": ("scan", str(cache), "--format", "json"),
        "repair": ("repair", str(cache), "--keep-blocked", "--yes"),
        "restore": ("quarantine", "restore", run_id, str(cache), "--yes"),
    }[command]
    expected = findings(cli("scan", str(cache), "--no-state", "--format", "json"))
    sites = _sites(tmp_path, cache, args)
    assert len(sites) >= 3, sites
    problems: list[str] = []
    for k, (at, site) in enumerate(sorted(sites.items())):
        shutil.rmtree(cache)
        shutil.copytree(pristine, cache)
        code = "ENOSPC" if k % 2 == 0 else "EIO"
        proc = cli(
            *args,
            PYTHONPATH=str(inject_dir(tmp_path)),
            CACHEDOCTOR_FAULT_ROOT=str(cache),
            CACHEDOCTOR_FAULT_AT=str(at),
            CACHEDOCTOR_FAULT_ERRNO=code,
        )
        label = f"{command}, {code} at write call {at} ({site})"
        if "Traceback" in proc.stderr:
            problems.append(f"{label}: traceback {proc.stderr[-1500:]}")
        elif command == "scan":
            if proc.returncode != 1 or findings(proc) != expected:
                problems.append(f"{label}: exit {proc.returncode} {proc.stdout[-300:]!r} {proc.stderr[-800:]!r}")
        elif proc.returncode == 2:
            problems += [f"{label}: {p}" for p in judge_stop(proc, cache)]
        elif proc.returncode not in (0, 1):
            problems.append(f"{label}: exit {proc.returncode} {proc.stderr[-800:]!r}")
        now, kept = tree(cache), quarantined(cache)
        problems += [
            f"{label}: lost {r}" for r, data in before.items() if data not in now.values() and data not in kept
        ]
        problems += [f"{label}: temp file left {t}" for t in temps(cache)]
    assert problems == [], "\n".join(problems)


def test_the_injection_fails_exactly_the_chosen_call(tmp_path: Path) -> None:
    """The harness itself: call 2 fails with the planted errno (an OSError for a file, a SQLite
    error with SQLite's code for a database), calls 1 and 3 succeed, paths outside the root
    are never counted."""
    root = tmp_path / "root"
    root.mkdir()
    code = f"""
import errno, os, sqlite3
open({str(tmp_path / "outside")!r}, "w").write("x")
open({str(root / "one")!r}, "w").close()
try:
    open({str(root / "two")!r}, "w")
except OSError as exc:
    assert exc.errno == errno.EIO, exc
else:
    raise SystemExit("no error at call 2")
db = sqlite3.connect({str(root / "db")!r})
try:
    db.execute("CREATE TABLE t (x)")
except sqlite3.OperationalError as exc:
    assert exc.sqlite_errorcode == 10, exc
    raise SystemExit("the database was call 3, which must succeed")
"""
    env = {
        **os.environ,
        "PYTHONPATH": str(inject_dir(tmp_path)),
        "CACHEDOCTOR_FAULT_ROOT": str(root),
        "CACHEDOCTOR_FAULT_AT": "2",
        "CACHEDOCTOR_FAULT_ERRNO": "EIO",
    }
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr


# --- a cache that spans file systems -----------------------------------------------------------


def spanning(tmp_path: Path) -> tuple[Path, Path]:
    """A cache on the test's disk whose ``sub`` folder is a symlink to a tmpfs (another file
    system), with the strays in ``sub``: every quarantine move and restore crosses devices."""
    cache = tmp_path / "cache"
    make_cache(cache, strays=0)
    other = tmp_path / "other"
    shutil.move(str(cache / "sub"), str(tmp_path / "sub-files"))
    return cache, other


def fill_other_mount(tmp_path: Path, cache: Path, other: Path) -> dict[str, bytes]:
    """Put ``sub``'s files and three strays on the mounted ``other`` and link it in as ``sub``;
    return the cache's tree as it is then."""
    shutil.copytree(tmp_path / "sub-files", other, dirs_exist_ok=True)
    for i in range(3):
        (other / f"tmpStray{i:03d}").write_bytes(os.urandom(5000 + i))
    (cache / "sub").symlink_to(other)
    return tree(cache)


@pytest.mark.slow
def test_repair_and_restore_across_file_systems(tmp_path: Path) -> None:
    """Strays in a symlinked folder on another mount are copied into the quarantine (the
    rename would fail with EXDEV) and copied back by restore: every byte survives both ways."""
    cache, other = spanning(tmp_path)
    with tmpfs(other, 4096):
        before = fill_other_mount(tmp_path, cache, other)
        assert "sub/tmpStray002" in before
        repaired = cli("repair", str(cache), "--keep-blocked", "--yes")
        assert repaired.returncode == 1 and "done: 3 verified" in repaired.stdout, repaired.stdout + repaired.stderr
        assert not list(other.glob("tmpStray*")) and lost(before, cache) == []
        (run_id,) = os.listdir(cache / ".cachedoctor" / "quarantine")
        restored = cli("quarantine", "restore", run_id, str(cache), "--yes")
        assert restored.returncode == 0 and "restored 3 file(s)" in restored.stdout, restored.stderr
        assert tree(cache) == before and temps(cache) == []


@pytest.mark.slow
def test_kills_during_cross_device_copies(tmp_path: Path) -> None:
    """SIGKILL in the middle of the copy into the quarantine, then in the middle of a restore's
    copy back. After the first, ``quarantine list`` shows no half copy and the next repair
    resumes, drops it and finishes; after the second, the same restore finishes. Nothing is
    lost, no temp file stays, and no process of a killed run outlives it."""
    cache, other = spanning(tmp_path)
    with tmpfs(other, 4096):
        before = fill_other_mount(tmp_path, cache, other)

        killed = cli("repair", str(cache), "--keep-blocked", "--yes", CACHEDOCTOR_TEST_KILL_IN_COPY="2")
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        assert lost(before, cache) == []
        listing = cli("quarantine", "list", "--all", str(cache))
        assert listing.returncode == 0 and "unknown" not in listing.stdout and ".tmp" not in listing.stdout, (
            listing.stdout
        )
        again = cli("repair", str(cache), "--keep-blocked", "--yes")
        assert again.returncode == 1 and "resuming interrupted run" in again.stdout, again.stdout + again.stderr
        assert temps(cache) == [] and lost(before, cache) == []
        (run_id,) = os.listdir(cache / ".cachedoctor" / "quarantine")

        proc = subprocess.Popen(
            [sys.executable, "-m", "cachedoctor", "quarantine", "restore", run_id, str(cache), "--yes"],
            env={**os.environ, "CACHEDOCTOR_TEST_KILL_IN_COPY": "2"},
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        proc.communicate(timeout=TIMEOUT_S)
        assert proc.returncode == -signal.SIGKILL
        assert live_group(proc.pid) == []
        assert lost(before, cache) == []
        finished = cli("quarantine", "restore", run_id, str(cache), "--yes")
        assert finished.returncode == 0, finished.stderr
        assert tree(cache) == before and temps(cache) == []
