"""Lossless rewrites without torch (``repair/torch_rewrite.py``) write exactly the bytes the torch
path writes (``torch.save`` of what ``torch.load`` read, moved to the cpu or cloned), and leave
to torch every file they cannot vouch for."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
from factories import gzipped, rezip, save_pt, saved_on

from cachedoctor.repair.lossless import transform
from cachedoctor.repair.torch_rewrite import VERIFIED_TORCH, rewrite_zip

REPO = Path(__file__).resolve().parents[3]


def _saved(obj: object, location: str = "cuda:0") -> bytes:
    buf = io.BytesIO()
    with saved_on(location):
        torch.save(obj, buf)
    return buf.getvalue()


def _torch_path(raw: bytes, clone: bool) -> bytes:
    buf = io.BytesIO()
    torch.save(transform(torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True), clone), buf)
    return buf.getvalue()


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(7)


COVERED = {
    "bf16 latent": lambda: torch.randn(16, 64, 64, generator=_gen()).to(torch.bfloat16),
    "0-d": lambda: torch.tensor(3.5),
    "1-d int64": lambda: torch.arange(7),
    "5-d with ones": lambda: torch.randn(2, 1, 3, 1, 2, generator=_gen()),
    "dims past 65535": lambda: torch.zeros(70000, 2, dtype=torch.uint8),
    "leaked view": lambda: torch.randn(7, 4, 8, generator=_gen())[3],
    "dict": lambda: {"latents": torch.randn(4, 8, 8, generator=_gen()), "pooled": torch.randn(32).half()},
    "dict of one": lambda: {"latent": torch.randn(4, 8, 8, generator=_gen())},
    "OrderedDict": lambda: OrderedDict(first=torch.ones(3), second=torch.zeros(2, dtype=torch.bool)),
    "views of one storage": lambda: (lambda t: {"whole": t, "tail": t[1:]})(torch.randn(5, generator=_gen())),
    "every plain dtype": lambda: {
        str(d).removeprefix("torch."): torch.ones(3, dtype=d)
        for d in (torch.int8, torch.int16, torch.int32, torch.float64, torch.complex64, torch.complex128)
    },
    "requires_grad": lambda: torch.randn(3, requires_grad=True),
    # 40 tensors: memo indices past 255 (LONG_BINPUT, LONG_BINGET)
    "40 tensors": lambda: {f"k{i:03d}": torch.full((2,), float(i)) for i in range(40)},
}


@pytest.mark.parametrize("location", ["cuda:0", "cpu"])
@pytest.mark.parametrize("clone", [False, True])
@pytest.mark.parametrize("case", sorted(COVERED))
def test_the_bytes_are_the_torch_paths(case: str, clone: bool, location: str) -> None:
    raw = _saved(COVERED[case](), location)
    written = rewrite_zip(raw, clone)
    assert written is not None
    assert written == _torch_path(raw, clone)


@pytest.mark.parametrize("storages", [1, 7, 8, 23, 24, 53, 54, 121, 122, 251, 256])
def test_the_serialization_id_is_torchs_at_every_size(storages: int) -> None:
    """The id hashes the record names in the order of a libstdc++ hash set, which changes as
    the set grows past 13, 29, 59, 127 and 257 records (a storage is a record; torch adds 6)."""
    raw = _saved({f"t{i:04d}": torch.tensor([float(i)]) for i in range(storages)})
    assert rewrite_zip(raw, False) == _torch_path(raw, False)


def test_an_archive_python_wrote_is_rewritten_to_torchs_layout() -> None:
    raw = rezip(_saved(torch.randn(4, 8, 8, generator=_gen())))  # zipfile's layout: no alignment
    assert rewrite_zip(raw, False) == _torch_path(raw, False)


LEFT_TO_TORCH = {
    "a clone of a transposed view": (lambda: torch.randn(3, 5, generator=_gen()).t(), True),
    "a clone of a strided view": (lambda: torch.randn(6, 6, generator=_gen())[:, ::2], True),
    "a parameter": (lambda: torch.nn.Parameter(torch.randn(3)), False),
    "a list": (lambda: [torch.ones(2), torch.zeros(2)], False),
    "a nested dict": (lambda: {"inner": {"x": torch.ones(2)}}, False),
    "a dict with a number": (lambda: {"latent": torch.ones(2), "steps": 3}, False),
    "a one-letter key": (lambda: {"a": torch.ones(2), "bb": torch.ones(2)}, False),
    "an empty tensor": (lambda: torch.zeros(0, 3), False),
    "a float8 tensor": (lambda: torch.zeros(4, dtype=torch.float8_e4m3fn), False),
    "257 storages": (lambda: {f"t{i:04d}": torch.tensor([float(i)]) for i in range(257)}, False),
}


@pytest.mark.parametrize("case", sorted(LEFT_TO_TORCH))
def test_what_it_does_not_follow_is_left_to_torch(case: str) -> None:
    make, clone = LEFT_TO_TORCH[case]
    assert rewrite_zip(_saved(make()), clone) is None


def _rezipped(
    raw: bytes, *, compression: int = 0, comment: bytes = b"", extra: tuple[str, bytes] | None = None
) -> bytes:
    """``raw``'s members written again by Python's zipfile (its own layout, which torch reads)."""
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(raw)) as zin, zipfile.ZipFile(out, "w", compression) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info.filename))
        if extra is not None:
            zout.writestr(*extra)
        zout.comment = comment
    return out.getvalue()


def test_archives_a_loader_might_read_otherwise_are_left_to_torch() -> None:
    raw = _saved(torch.randn(4, 8, 8, generator=_gen()))
    damaged = bytearray(raw)
    damaged[raw.index(b"archive/data/0") + 200] ^= 0xFF  # tensor bytes under a CRC that no longer holds
    cases = {
        "a CRC that fails": bytes(damaged),
        "deflated members": _rezipped(raw, compression=8),
        "bytes before the archive": b"\0" * 64 + raw,
        "a comment after it": _rezipped(raw, comment=b"hello"),
        "a name twice": _rezipped(raw, extra=("archive/DATA.PKL", b"\x80\x02K\x01.")),
        "big-endian data": rezip(raw, replace={"byteorder": b"big"}),
        "another format version": rezip(raw, replace={"version": b"9\n"}),
        "gzip around it": gzipped(raw),
    }
    assert rewrite_zip(_rezipped(raw), False) is not None  # what each case changes is what refuses it
    assert {case: rewrite_zip(data, False) for case, data in cases.items()} == dict.fromkeys(cases)


def test_this_torch_is_one_the_bytes_were_held_to() -> None:
    """A new torch may write other bytes: the cases above must pass with it before it is added
    to VERIFIED_TORCH (until then every rewrite goes through torch, as before)."""
    major, minor = (int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    assert (major, minor) in VERIFIED_TORCH, f"run these tests with torch {torch.__version__}, then add it"


def test_a_repair_of_device_tagged_latents_never_imports_torch(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    originals = {}
    for i in range(3):
        path = save_pt(cache / f"latent_{i}.pt", torch.randn(4, 8, 8, generator=_gen()).to(torch.bfloat16))
        with saved_on("cuda:0"):
            save_pt(path, torch.load(path, weights_only=True))
        originals[path.name] = path.read_bytes()
    script = (
        "import sys\n"
        "from cachedoctor.__main__ import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
        "print('torch imported' if 'torch' in sys.modules else 'no torch', code)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", script, "repair", str(cache), "--yes", "-q"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.stdout.splitlines()[-1] == "no torch 0", proc.stdout + proc.stderr
    for name, raw in originals.items():
        assert (cache / name).read_bytes() == _torch_path(raw, False)
