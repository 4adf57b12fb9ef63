"""Parser differentials (``exploits_parsers.py``) against the scan: each file a real loader
opens despite its damaged-looking container is judged as that loader reads it; each benign
look-alike passes without a word. Decompression bombs are judged within the file timeout with
bounded memory; damage (a failed CRC) is told from intent.
"""

from __future__ import annotations

import atexit
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import pytest
from exploits import Case, judge_in_subprocess, kinds_by_mode, prove, write_case
from exploits_parsers import build_cases
from factories import PWNED_MARKER, latent, peers, pt_bytes

from cachedoctor.scan import ScanOptions, scan

_MARKER_DIR = Path(tempfile.mkdtemp(prefix="cachedoctor-parsers-"))
atexit.register(shutil.rmtree, _MARKER_DIR, True)
MARKER = _MARKER_DIR / PWNED_MARKER
CASES = build_cases(MARKER)


def cases(expect: str) -> list:
    return [pytest.param(c, id=c.id) for c in CASES if c.expect == expect]


@pytest.fixture(autouse=True)
def never_pwned():
    yield
    assert not MARKER.exists(), "a payload ran"


@pytest.mark.slow
def test_differentials_really_run(tmp_path: Path) -> None:
    """Every unsafe case runs its payload under its real loader; every clean one loads without
    error and runs nothing. One subprocess for all."""
    marker = tmp_path / "honesty" / PWNED_MARKER
    marker.parent.mkdir()
    plan = [
        {"id": c.id, "loader": c.loader, "expect": c.expect, "path": str(write_case(c, tmp_path / "files" / c.id))}
        for c in build_cases(marker)
    ]
    results = prove(plan, marker, tmp_path)
    assert {i["id"] for i in plan if i["expect"] == "unsafe" and not results[i["id"]]["ran"]} == set()
    bad = {i["id"] for i in plan if i["expect"] == "clean" and (results[i["id"]]["ran"] or results[i["id"]]["error"])}
    assert bad == set()


@pytest.mark.parametrize("case", cases("unsafe"))
def test_differential_is_named(case: Case, tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    peers(folder, n=2)
    path = write_case(case, folder)
    found = kinds_by_mode(folder, path)
    assert found["quick"] == found["deep"] == [("unsafe-pickle", "code")], (case.technique, found)


@pytest.mark.parametrize("case", cases("clean"))
def test_look_alike_passes(case: Case, tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    path = write_case(case, folder)
    assert kinds_by_mode(folder, path) == {"quick": [], "deep": []}


def _flip_in_pickle(data: bytes) -> bytes:
    """One byte of data.pkl changed (its CRC no longer matches): a BINUNICODE length made huge."""
    out = bytearray(data)
    at = out.find(b"archive/data.pkl")
    start = out.find(b"\x80\x02", at)
    i = out.find(b"X", start + 2)
    out[i + 4] = 0x7F  # the string's length now says ~2 GB: the walk calls it a bomb
    return bytes(out)


def test_flipped_pickle_byte_is_damage_not_attack(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    path = folder / "latent.pt"
    folder.mkdir()
    good = pt_bytes({"latent_image": latent()})
    path.write_bytes(_flip_in_pickle(good))
    assert zlib.crc32(path.read_bytes()) != zlib.crc32(good)
    for deep in (False, True):
        result = scan([str(folder)], ScanOptions(deep=deep, workers=1))
        found = [(f.kind, f.details.get("problem")) for f in result.findings if f.path == str(path)]
        assert found == [("corrupt-archive", "bad-crc")], (deep, found)
        (finding,) = [f for f in result.findings if f.path == str(path)]
        assert "resource-bomb" in finding.details["content"]


def _bomb_npz(path: Path, gib: int = 2) -> None:
    """An npz whose one float32 member inflates to ``gib`` GiB of zeros, written in pieces."""
    import struct

    size = gib << 30
    header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({size // 4},), }}"
    header += " " * (127 - 10 - len(header)) + "\n"
    npy_head = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode()
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    crc, body = zlib.crc32(npy_head), [comp.compress(npy_head)]
    chunk = bytes(64 << 20)
    for _ in range(size // len(chunk)):
        crc = zlib.crc32(chunk, crc)
        body.append(comp.compress(chunk))
    body.append(comp.flush())
    data = b"".join(body)
    name = b"latents.npy"
    usize = len(npy_head) + size
    local = struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, 8, 0, 0, crc, len(data), usize, len(name), 0)
    central = struct.pack(
        "<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0, 8, 0, 0, crc, len(data), usize, len(name), 0, 0, 0, 0, 0, 0
    )
    cd_at = len(local) + len(name) + len(data)
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 1, 1, len(central) + len(name), cd_at, 0)
    path.write_bytes(local + name + data + central + name + end)


def _bomb_gzip(path: Path, gib: int = 2) -> None:
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(64 << 20)
    with path.open("wb") as f:
        for _ in range((gib << 30) // len(chunk)):
            f.write(comp.compress(chunk))
        f.write(comp.flush())


@pytest.mark.slow
@pytest.mark.parametrize("build", [_bomb_npz, _bomb_gzip], ids=["npz-2gib", "gzip-2gib"])
def test_two_gib_bombs_judged_bounded(build, tmp_path: Path) -> None:
    """Judged quick and deep in a child limited to 1 GiB of address space beyond the
    interpreter's and 20 s of CPU: a reader that inflates the bomb fails here."""
    folder = tmp_path / "cache"
    folder.mkdir()
    path = folder / ("latent.npz" if build is _bomb_npz else "latent.pt")
    build(path)
    assert path.stat().st_size < 4 << 20
    verdict = judge_in_subprocess(path, cpu_s=20, mem_bytes=3 << 30, timeout=60)
    assert verdict.returncode == 0, verdict.stderr
    for mode in ("quick", "deep"):
        assert ("unsafe-pickle", "resource-bomb") in verdict.kinds(mode), (mode, verdict.report)


# --- a seeded differential fuzz: mutate containers and headers; whatever a real loader runs,
# --- the readers must name. CACHEDOCTOR_FUZZ_N raises the count (``make fuzz``-style long runs).

_SHAPES = ["(1,)", "(True,)", "(-1,)", "(1L,)", "()", "(0,)", "[1]", "(1.0,)"]
_DESCRS = ["'|O'", "'O'", "'<O'", "[('a', '|O')]", "'|O8'", "'<f4'"]


def _mutant(rng, marker: Path) -> tuple[str, bytes]:
    """``(loader, bytes)`` of one random mutant: an npy/npz of a payload or a torch archive with
    one, through random header, compression and end-record changes."""
    import random as _random
    import zipfile

    from exploits import npy_bytes, npz_of, payloads, plain
    from exploits_parsers import _torch_saved, padded_npy, with_end_record

    assert isinstance(rng, _random.Random)
    body = plain(payloads(marker)["os-system"])
    kind = rng.choice(["npy", "npz", "npz", "torch"])
    if kind == "torch":
        from exploits import Reduce

        data, loader = _torch_saved(Reduce(os.system, f"touch {marker}")), "torch_unsafe"
    else:
        shape, descr = rng.choice(_SHAPES), rng.choice(_DESCRS)
        version = rng.choice([(1, 0), (2, 0), (3, 0)])
        if rng.random() < 0.3:
            npy = padded_npy(
                body, rng.choice([100, 4100, 9000, 12000]), version if version != (3, 0) else (2, 0), shape
            )
        else:
            npy = npy_bytes(descr, shape, body, version)
        if kind == "npy":
            return "numpy", npy
        method = rng.choice([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
        data, loader = npz_of({rng.choice(["latents.npy", "x", "a/b.npy"]): npy}, method), "numpy"
    for _ in range(rng.randint(0, 2)):
        op = rng.choice(["junk", "prepend", "disks", "comment", "count"])
        if op == "junk":
            data += rng.randbytes(rng.randint(1, 300)) if rng.random() < 0.5 else bytes(rng.randint(1, 300))
        elif op == "prepend":
            data = rng.choice([b"PK\x05\x06" + bytes(18), b"PK\x03\x04" + rng.randbytes(rng.randint(0, 80))]) + data
        elif op == "disks":
            data = with_end_record(data, disk=rng.choice([0, 1, 2]), cd_disk=rng.choice([0, 1, 2]))
        elif op == "comment":
            data = with_end_record(data, comment=rng.randint(0, 400))
        else:
            at = data.rfind(b"PK\x05\x06")
            data = data[: at + 8] + bytes([rng.randint(0, 3), 0]) + data[at + 10 :]
    return loader, data


def _judged_unsafe(path: Path) -> bool:
    from cachedoctor.formats import ReadError, read_file

    for deep in (False, True):
        try:
            meta = read_file(str(path), deep=deep)
        except ReadError as exc:
            if exc.problem != "resource-bomb":
                return False
            continue
        if meta is None or not meta.foreign_globals:
            return False
    return True


def test_differential_fuzz(tmp_path: Path) -> None:
    """Seeded mutants loaded by their real loader in one subprocess: each one whose payload ran
    must be named unsafe by a quick and a deep read (mutants no loader opens are not judged)."""
    import random

    rng = random.Random(27)
    marker = tmp_path / "honesty" / PWNED_MARKER
    marker.parent.mkdir()
    plan = []
    for i in range(int(os.environ.get("CACHEDOCTOR_FUZZ_N", "15"))):
        loader, data = _mutant(rng, marker)
        path = tmp_path / "files" / f"m{i:04d}.bin"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
        plan.append({"id": str(i), "loader": loader, "expect": "unsafe", "path": str(path)})
    results = prove(plan, marker, tmp_path, timeout=600, wait=0.3)
    ran = [item for item in plan if results[item["id"]]["ran"]]
    assert len(ran) >= len(plan) // 4, "the mutants should mostly stay loadable"
    missed = [item["id"] for item in ran if not _judged_unsafe(Path(item["path"]))]
    assert missed == [], f"mutants a loader ran but the readers did not name: {missed}"


def test_truncated_pickle_imports_the_module_it_names_before_failing(tmp_path: Path) -> None:
    """A protocol-0 pickle cut off after its GLOBAL line: torch.load and pickle.load both fail
    on it, but only after ``find_class`` imported the module it names (a planted module's code
    runs; proven here in a subprocess). Under a cache name it is unsafe-pickle, quick and deep;
    the same bytes under a caption's name are left alone (no trainer loads a caption)."""
    planted = tmp_path / "plantedmod.py"
    ran = tmp_path / "imported"
    planted.write_text(f"open({str(ran)!r}, 'w').close()\nfn = print\n")
    data = b"cplantedmod\nfn\n(Vtouch cached"
    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / "a.pt").write_bytes(data)
    (folder / "a.txt").write_bytes(data)
    for loader in ("torch.load(p, weights_only=False)", "pickle.load(open(p, 'rb'))"):
        ran.unlink(missing_ok=True)
        code = f"import pickle, torch, sys; p = sys.argv[1]\ntry:\n    {loader}\nexcept Exception as e:\n    print(type(e).__name__)"
        out = subprocess.run(
            [sys.executable, "-c", code, str(folder / "a.pt")],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.stdout.strip(), f"{loader} did not fail: {out.stdout} {out.stderr[-300:]}"
        assert ran.exists(), f"{loader} did not import the planted module"
    found = kinds_by_mode(folder, folder / "a.pt")
    assert found == {"quick": [("unsafe-pickle", "code")], "deep": [("unsafe-pickle", "code")]}
    assert kinds_by_mode(folder, folder / "a.txt") == {"quick": [], "deep": []}
    # gzip'd, as SimpleTuner's compressed caches are: gunzip, then torch.load imports it the same way
    (folder / "b.pt").write_bytes(gzip.compress(data))
    ran.unlink()
    code = "import gzip, io, torch, sys\ntry:\n    torch.load(io.BytesIO(gzip.decompress(open(sys.argv[1], 'rb').read())), weights_only=False)\nexcept Exception as e:\n    print(type(e).__name__)"
    out = subprocess.run(
        [sys.executable, "-c", code, str(folder / "b.pt")], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert out.stdout.strip() and ran.exists(), (out.stdout, out.stderr[-300:])
    found = kinds_by_mode(folder, folder / "b.pt")
    assert found == {"quick": [("unsafe-pickle", "code")], "deep": [("unsafe-pickle", "code")]}


def test_damage_after_the_payload_is_still_an_attack(tmp_path: Path) -> None:
    """A data.pkl that calls ``os.system`` and then, past the call, holds a string length
    damaged to 128 MiB (its CRC fails): torch.load runs the payload before it reaches the
    damage, so the damage excuses nothing: unsafe-pickle, never the recomputable bad-crc."""
    import struct as _struct

    from exploits import call, glob, proto, uni, zip_with_data_pkl

    marker = tmp_path / "ran"
    tail = b"X" + _struct.pack("<I", 7) + b"abcdefg"
    evil = proto(2) + call(glob("os", "system"), uni(f"touch {marker}")) + b"0" + tail + b"."
    archive = zip_with_data_pkl(evil)
    at = archive.index(tail)
    damaged = archive[:at] + b"X" + _struct.pack("<I", 0x08000007) + archive[at + 5 :]
    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / "a.pt").write_bytes(damaged)
    code = "import torch, sys\ntry:\n    torch.load(sys.argv[1], weights_only=False)\nexcept Exception as e:\n    print(type(e).__name__)"
    out = subprocess.run(
        [sys.executable, "-c", code, str(folder / "a.pt")], capture_output=True, text=True, timeout=120
    )
    assert out.stdout.strip() and marker.exists(), (out.stdout, out.stderr[-300:])  # ran, then failed
    found = kinds_by_mode(folder, folder / "a.pt")
    assert found == {"quick": [("unsafe-pickle", "resource-bomb")], "deep": [("unsafe-pickle", "resource-bomb")]}
