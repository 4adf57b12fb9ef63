"""Hostile bytes: every reader returns metadata, ``None`` or a typed ReadError, never another
exception, and never runs anything. Truncations, XOR bit flips, random bytes and splices of
valid files in every format."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from factories import gzipped, latent, pt_bytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save

from cachedoctor.formats import ReadError, UnreadableFile, read_file
from cachedoctor.scan.worker import inspect_path


def _npz() -> bytes:
    buf = io.BytesIO()
    np.savez(buf, latents_8x8=np.ones((4, 8, 8), np.float32), original_size=np.array([64, 64]))
    return buf.getvalue()


def _legacy() -> bytes:
    buf = io.BytesIO()
    torch.save({"x": torch.ones(3)}, buf, _use_new_zipfile_serialization=False)
    return buf.getvalue()


VALID = {
    "torch": pt_bytes({"latent_image": latent(), "res": (64, 64)}),
    "view": pt_bytes(torch.randn(3, 4, 4)[1]),
    "gzip": gzipped(pt_bytes(latent())),
    "legacy": _legacy(),
    "npz": _npz(),
    "safetensors": save({"latents": torch.ones(4, 8, 8)}),
}

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _read_all_ways(path: Path) -> None:
    for deep in (False, True):
        try:
            meta = read_file(str(path), deep=deep)
        except UnreadableFile:
            raise
        except ReadError as exc:
            assert exc.problem and exc.message
            continue
        assert meta is None or meta.path == str(path)
    outcome = inspect_path(str(path), deep=True)
    assert outcome.status in ("read", "skipped"), outcome.error


@pytest.mark.parametrize("name", sorted(VALID))
@SETTINGS
@given(data=st.data())
def test_truncation(tmp_path: Path, name: str, data: st.DataObject) -> None:
    blob = VALID[name]
    cut = data.draw(st.integers(0, len(blob) - 1))
    path = tmp_path / "f.pt"
    path.write_bytes(blob[:cut])
    _read_all_ways(path)


@pytest.mark.parametrize("name", sorted(VALID))
@SETTINGS
@given(data=st.data())
def test_bit_flips(tmp_path: Path, name: str, data: st.DataObject) -> None:
    blob = bytearray(VALID[name])
    for _ in range(data.draw(st.integers(1, 4))):
        blob[data.draw(st.integers(0, len(blob) - 1))] ^= data.draw(st.integers(1, 255))
    path = tmp_path / "f.pt"
    path.write_bytes(bytes(blob))
    _read_all_ways(path)


@SETTINGS
@given(
    blob=st.binary(min_size=0, max_size=2048),
    prefix=st.sampled_from(
        [b"", b"PK\x03\x04", b"\x1f\x8b", b"\x80\x02", b"\x93NUMPY\x01\x00", b"\x10\x00\x00\x00\x00\x00\x00\x00{"]
    ),
)
def test_random_bytes_behind_every_magic(tmp_path: Path, blob: bytes, prefix: bytes) -> None:
    path = tmp_path / "f.pt"
    path.write_bytes(prefix + blob)
    _read_all_ways(path)


@SETTINGS
@given(a=st.sampled_from(sorted(VALID)), b=st.sampled_from(sorted(VALID)), data=st.data())
def test_splices_of_two_valid_files(tmp_path: Path, a: str, b: str, data: st.DataObject) -> None:
    left, right = VALID[a], VALID[b]
    i = data.draw(st.integers(0, len(left)))
    j = data.draw(st.integers(0, len(right)))
    path = tmp_path / "f.pt"
    path.write_bytes(left[:i] + right[j:])
    _read_all_ways(path)


def test_length_field_bomb_in_a_legacy_pickle_is_cheap(tmp_path: Path) -> None:
    """A 4 GB length in a BINBYTES opcode must not make the reader allocate 4 GB."""
    head = VALID["legacy"][:15]  # the magic-number pickle
    path = tmp_path / "bomb.pt"
    path.write_bytes(head + b"\x80\x02B\xff\xff\xff\xff" + b"x" * 100)
    with pytest.raises(ReadError):
        read_file(str(path), deep=False)


@pytest.mark.parametrize("container", ["torch-zip", "plain"])
def test_memo_index_bomb_is_refused_cheaply(tmp_path: Path, container: str) -> None:
    """``LONG_BINPUT 2**31-1`` would make CPython's unpickler allocate a 16 GB memo table."""
    from factories import rezip

    bomb = b"\x80\x02}r\xff\xff\xff\x7f."  # EMPTY_DICT, LONG_BINPUT 2147483647, STOP
    path = tmp_path / "bomb.pt"
    path.write_bytes(rezip(VALID["torch"], replace={"data.pkl": bomb}) if container == "torch-zip" else bomb)
    with pytest.raises(ReadError) as info:
        read_file(str(path))
    # A resource bomb in either container, whatever else is wrong with the file (issue 11).
    assert info.value.problem == "resource-bomb"
    assert "memo index 2147483647" in info.value.message
