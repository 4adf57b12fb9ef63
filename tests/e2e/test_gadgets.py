"""Gadgets from allowed names and Python-2 names at the wrong protocol (``exploits_gadgets.py``):
each is first proven against its real loader in a throwaway subprocess (out of memory, out of
time, a crash through a pointer, a planted module imported), then judged by the scan: a bomb is
``unsafe-pickle``/``resource-bomb``, a call that cannot be shown safe ``unsafe-pickle``/``code``,
and the benign look-alikes get no finding. The reader stays small while it judges them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from exploits import REPO, Case, judge_in_subprocess, write_case
from exploits_gadgets import PLANTED, PROOFS, build_cases, shared_key_tensors
from factories import PWNED_MARKER

from cachedoctor.scan import ScanOptions, scan

CASES = build_cases(Path("/nonexistent") / PWNED_MARKER)

#: What the unsafe-pickle finding of each ``unsafe`` case names.
NAMED = {
    "storage-allocator-zip": "torch.UntypedStorage called with keyword arguments allocator",
    "storage-allocator-plain": "torch.UntypedStorage called with keyword arguments allocator",
    "tensor-cdata-plain": "torch.Tensor called with keyword arguments cdata",
    "tensor-cdata-zip": "torch.Tensor called with keyword arguments cdata",
    "codec-punycode": "_codecs.encode with codec 'punycode'",
    "py2-userdict-proto3-plain": "UserDict.OrderedDict",
    "py2-builtin-proto4-plain": "__builtin__.set",
    "py2-userdict-proto3-zip": "UserDict.OrderedDict",
}
#: What the resource-bomb finding of each ``bomb`` case says passed its limit.
LIMIT = {
    "bytearray-6g-plain": "would allocate 6,000,000,000 bytes",
    "bytearray-6g-zip": "would allocate 6,000,000,000 bytes",
    "bytearray-250x4m": "with the calls before it",
    "encode-250x4m": "with the calls before it",
    "bytearray-100k-copies": "with the calls before it",
    "bytearray-100k-copies-zip": "with the calls before it",
    "shared-key-100k-tensors-zip": "an object graph of more than 200,000",
    "hash-flood-plain": "keys with one hash (0)",
    "hash-flood-zip": "keys with one hash (0)",
}


def cases(*expects: str) -> list:
    return [pytest.param(c, id=c.id) for c in CASES if c.expect in expects]


def findings(folder: Path, path: Path) -> dict[str, list]:
    found = {}
    for mode, deep in (("quick", False), ("deep", True)):
        result = scan([str(folder)], ScanOptions(deep=deep, workers=1))
        assert result.errors == [], f"{mode} scan incomplete: {result.errors}"
        found[mode] = [f for f in result.findings if f.path == str(path)]
    return found


def test_every_case_has_its_check() -> None:
    assert {c.id for c in CASES if c.expect == "unsafe"} == set(NAMED)
    assert {c.id for c in CASES if c.expect == "bomb"} == set(LIMIT)
    assert set(PROOFS) == set(NAMED) | set(LIMIT)


@pytest.mark.parametrize("case", cases("unsafe"))
def test_unsafe_gadget_is_named(case: Case, tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    path = write_case(case, folder)
    for mode, found in findings(folder, path).items():
        assert [(f.kind, f.details.get("problem")) for f in found] == [("unsafe-pickle", "code")], (mode, found)
        assert any(NAMED[case.id] in name for name in found[0].details["globals"]), (mode, found[0].details)


@pytest.mark.parametrize("case", cases("bomb"))
def test_gadget_bomb_is_reported(case: Case, tmp_path: Path) -> None:
    """Judged in a child under CPU and memory limits: a reader that sets one off fails here."""
    path = write_case(case, tmp_path / "cache")
    verdict = judge_in_subprocess(path, cpu_s=20, mem_bytes=1 << 30)
    assert verdict.returncode == 0, verdict.stderr
    assert verdict.report is not None
    for mode in ("quick", "deep"):
        assert verdict.kinds(mode) == [("unsafe-pickle", "resource-bomb")], (mode, verdict.report)
        assert LIMIT[case.id] in verdict.report[mode]["findings"][0]["details"]["limit"], verdict.report[mode]


@pytest.mark.parametrize("case", cases("clean"))
def test_benign_look_alike_passes(case: Case, tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    path = write_case(case, folder)
    assert findings(folder, path) == {"quick": [], "deep": []}


# --- the reader stays small -------------------------------------------------------------------

#: Peak resident memory of a process that reads one file quick and deep. VmHWM, not ru_maxrss:
#: the latter survives exec and would carry the test process's own peak.
_MEASURE = r"""
import sys, time
from cachedoctor.formats import ReadError, read_file
problems = []
start = time.perf_counter()
for deep in (False, True):
    try:
        read_file(sys.argv[1], deep=deep)
        problems.append(None)
    except ReadError as exc:
        problems.append(exc.problem)
seconds = time.perf_counter() - start
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(__import__("json").dumps({"problems": problems, "peak_kib": hwm, "seconds": seconds}))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
@pytest.mark.parametrize(
    "case_id",
    [
        "bytearray-100k-copies",
        "bytearray-100k-copies-zip",
        "shared-key-100k-tensors-zip",
        "shared-key-60k",
        "hash-flood-zip",
        "bytearray-250x4m",
        "encode-250x4m",
    ],
)
def test_reader_stays_small(case_id: str, tmp_path: Path) -> None:
    """The loader would spend 1 to 3.5 GB or minutes on these (or shares what a naive reader
    copies 60,000 times); the reader stays under 100 MiB and judges a bomb as one, quick and deep
    (how fast is bench/safety_bench.py's goal)."""
    if case_id == "shared-key-60k":  # under the node cap: judged in full, each key path cut short
        case = Case(case_id, "shared.pt", shared_key_tensors(60_000), "clean", "torch_unsafe", "60,000 tensors")
    else:
        case = next(c for c in CASES if c.id == case_id)
    path = write_case(case, tmp_path)
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["problems"] == (["resource-bomb"] * 2 if case.expect == "bomb" else [None, None])
    assert out["peak_kib"] < 100 * 1024, out  # (its time is bench/safety_bench.py's goal, not a test's)


# --- the corpus is honest: each technique proven against its real loader -----------------------

_PROOF = r"""
import os, resource, sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, sys.argv[4])
from exploits import load_with  # imports torch and numpy: limits are set after
kind, loader, path = sys.argv[1], sys.argv[2], sys.argv[3]
if kind == "memory":
    vm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmSize:")) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + (768 << 20), vm + (768 << 20)))
if kind == "time":
    used = int(resource.getrusage(resource.RUSAGE_SELF).ru_utime) + 3  # a healthy cache loads in ms
    resource.setrlimit(resource.RLIMIT_CPU, (used, used + 30))
try:
    load_with(loader, path)
    print("loaded")
except MemoryError:
    print("MemoryError")
except BaseException as exc:
    print("error", type(exc).__name__, str(exc)[:200])
"""


def _planted(folder: Path, marker: Path) -> None:
    for name in PLANTED:
        (folder / f"{name}.py").write_text(
            f"open({str(marker)!r}, 'w').close()\nfrom collections import OrderedDict\nset = set\n"
        )


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmSize from /proc")
@pytest.mark.parametrize("case", cases("unsafe", "bomb", "clean"))
def test_gadget_is_real(case: Case, tmp_path: Path) -> None:
    """Each dangerous case does what it claims under its loader; each look-alike loads cleanly,
    with the planted modules in place (it imports none of them)."""
    cwd, marker = tmp_path / "cwd", tmp_path / PWNED_MARKER
    cwd.mkdir()
    _planted(cwd, marker)
    path = write_case(case, tmp_path / "files")
    kind = PROOFS.get(case.id, "clean")
    assert case.loader is not None
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROOF, kind, case.loader, str(path), str(Path(__file__).resolve().parents[1])],
            capture_output=True,
            text=True,
            cwd=cwd,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case.id}: the proof itself ran past 120 s")
    out = proc.stdout.strip()
    if kind == "marker":
        assert marker.exists(), (out, proc.stderr[-1000:])
    elif kind == "memory":
        assert out == "MemoryError" or proc.returncode == -signal.SIGKILL, (proc.returncode, out, proc.stderr[-1000:])
    elif kind == "time":
        assert proc.returncode == -signal.SIGXCPU, (proc.returncode, out, proc.stderr[-1000:])
    elif kind == "crash":
        assert proc.returncode == -signal.SIGSEGV, (proc.returncode, out, proc.stderr[-1000:])
    else:  # clean, or a bomb only against a scanner: the loader loads it
        assert (proc.returncode, out, marker.exists()) == (0, "loaded", False), proc.stderr[-1000:]
