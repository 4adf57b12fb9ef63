"""The container readers' tolerances, caps and damage rules, each on one planted defect:
streamed inflate that stops at its cap, zip end records and prepended bytes read as zipfile
and miniz read them, npy headers of any length numpy parses, and a damaged data.pkl told
from a hostile one."""

from __future__ import annotations

import io
import os
import zipfile
import zlib
from pathlib import Path

import pytest
from exploits import Reduce, npy_bytes, npz_of, payloads, plain
from exploits_parsers import padded_npy, with_end_record
from factories import latent, pt_bytes

from cachedoctor.formats import read_file
from cachedoctor.formats._inflate import BZIP2, DEFLATED, LZMA, STORED, CapPassed, bomb_reason, gunzip
from cachedoctor.formats._source import BufferSource
from cachedoctor.formats._zip import directory_of, read_member
from cachedoctor.formats.interface import ReadError
from cachedoctor.formats.npy import MAX_HEADER, _drop_py2_longs, parse_header

_ZERO = bytes(1 << 20)


def _member(method: int, data: bytes) -> tuple[BufferSource, zipfile.ZipInfo]:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as z:
        z.writestr("m.npy", data)
    src = BufferSource(buf.getvalue())
    return src, zipfile.ZipFile(io.BytesIO(buf.getvalue())).getinfo("m.npy")


@pytest.mark.parametrize("method", [STORED, DEFLATED, BZIP2, LZMA])
def test_member_stream_reads_every_method_and_stops_at_its_cap(method: int) -> None:
    src, info = _member(method, _ZERO * 4)
    member = directory_of(src).members["m.npy"]
    from cachedoctor.formats._zip import member_stream

    assert member_stream(src, member, 8 << 20).read(8 << 20) == _ZERO * 4
    stream = member_stream(src, member, 1 << 20)
    with pytest.raises(CapPassed) as caught:
        stream.read(8 << 20)
    assert caught.value.produced <= (1 << 20) + (1 << 20)  # at most one piece past the cap


def test_gunzip_counts_without_holding_and_stops_at_the_cap() -> None:
    import gzip

    data = gzip.compress(_ZERO * 8)
    assert bytes(gunzip(data, 16 << 20)) == _ZERO * 8
    with pytest.raises(CapPassed):
        gunzip(data, 4 << 20, keep=False)


def test_bomb_needs_both_size_and_ratio() -> None:
    assert bomb_reason("m", 2 << 30, 2 << 20) is not None  # 2 GiB from 2 MB
    assert bomb_reason("m", 2 << 30, 1 << 30) is None  # a large array stored plainly
    assert bomb_reason("m", 64 << 20, 60 << 10) is None  # savez_compressed of zeros: huge ratio, small size


def test_end_record_tolerances_and_prepended_bytes() -> None:
    archive = pt_bytes({"latent": latent()})
    for variant in (
        archive + b"J" * 128,
        with_end_record(archive, disk=1, cd_disk=1),
        with_end_record(archive, comment=200),
    ):
        d = directory_of(BufferSource(variant))
        assert d.concat == 0 and any(n.endswith("data.pkl") for n in d.members)
    npz = npz_of({"a.npy": npy_bytes("'<f4'", "(2,)", bytes(8))})
    shifted = directory_of(BufferSource(b"PK\x05\x06" + bytes(18) + npz))
    assert shifted.concat == 22
    member = shifted.members["a.npy"]
    assert read_member(BufferSource(b"PK\x05\x06" + bytes(18) + npz), member, limit=1 << 20)[:6] == b"\x93NUMPY"


def test_truncated_zip_is_still_truncated() -> None:
    archive = pt_bytes({"latent": latent()})
    with pytest.raises(ReadError) as caught:
        directory_of(BufferSource(archive[: len(archive) - 40]))
    assert caught.value.problem in ("truncated", "bad-zip")


def test_npy_header_rules() -> None:
    body = b"\x80\x02N."
    assert parse_header(npy_bytes("'|O'", "(True,)", body), "x").is_object
    assert parse_header(npy_bytes("'|O'", "(-1,)", body), "x").is_object
    assert parse_header(npy_bytes("'|O'", "(1L,)", body), "x").shape == (1,)
    assert "L" not in _drop_py2_longs("{'shape': (1L, 2L), }")
    assert parse_header(padded_npy(body, 70_000, (2, 0)), "x").is_object
    with pytest.raises(ReadError):
        parse_header(npy_bytes("'<f4'", "(-1,)", body), "x")  # not an object array: a bad shape is damage


def test_npy_header_past_the_parsed_length_cannot_be_shown_safe(tmp_path: Path) -> None:
    path = tmp_path / "latent.npy"
    path.write_bytes(padded_npy(b"\x80\x02N.", MAX_HEADER + 64, (2, 0)))
    meta = read_file(str(path))
    assert meta is not None and "cannot be shown safe" in meta.foreign_globals[0]


def test_structured_dtype_past_4k_reads(tmp_path: Path) -> None:
    from exploits_parsers import structured_npz

    path = tmp_path / "latent.npz"
    path.write_bytes(structured_npz())
    meta = read_file(str(path))
    assert meta is not None and not meta.foreign_globals and meta.tensors[0].dtype == "numpy:structured"


def _flip_tensor_name(archive: bytes) -> bytes:
    """data.pkl's dict key renamed by one byte: CRC fails, content still clean."""
    out = bytearray(archive)
    at = out.find(b"latent", out.find(b"\x80\x02"))
    out[at] ^= 0x20
    return bytes(out)


def test_damaged_clean_pickle_is_a_crc_failure_in_quick_mode(tmp_path: Path) -> None:
    path = tmp_path / "latent.pt"
    path.write_bytes(_flip_tensor_name(pt_bytes({"latent": latent()})))
    meta = read_file(str(path))
    assert meta is not None and [b.name for b in meta.crc_mismatches] == ["archive/data.pkl"]
    assert not meta.foreign_globals


def test_damaged_pickle_that_names_code_stays_unsafe(tmp_path: Path) -> None:
    """torch.load skips CRCs: a pickle that names os.system runs, damaged or not."""
    path = tmp_path / "latent.pt"
    marker = tmp_path / "never"
    buf = io.BytesIO()
    import torch

    torch.save({"latent": latent(), "x": Reduce(os.system, f"touch {marker}")}, buf)
    path.write_bytes(_flip_tensor_name(buf.getvalue()))
    meta = read_file(str(path))
    assert meta is not None and "system" in " ".join(meta.foreign_globals)
    assert [b.name for b in meta.crc_mismatches] == ["archive/data.pkl"]
    assert not marker.exists()


def test_lzma_object_member_of_a_torch_zip_is_named(tmp_path: Path) -> None:
    pickle_body = plain(payloads(tmp_path / "never")["os-system"])
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", zipfile.ZipFile(io.BytesIO(pt_bytes({"x": 1}))).read("archive/data.pkl"))
        z.writestr("archive/extra", npy_bytes("'|O'", "(1,)", pickle_body), compress_type=zipfile.ZIP_LZMA)
    path = tmp_path / "latent.pt"
    path.write_bytes(buf.getvalue())
    meta = read_file(str(path))
    assert meta is not None and "np.load(allow_pickle=True)" in meta.loaders
    assert any("os.system" in g for g in meta.foreign_globals)


def test_deflate_member_lying_about_its_size_is_damage() -> None:
    data = zlib.compress(_ZERO)
    src, _ = _member(DEFLATED, _ZERO)
    member = directory_of(src).members["m.npy"]
    lying = member._replace(size=1000)
    with pytest.raises(ReadError):
        read_member(src, lying, limit=1 << 20)
    assert len(data) < len(_ZERO)


def test_one_allocation_budget_for_all_the_pickles_of_an_archive(tmp_path: Path) -> None:
    """Two ``.pkl`` members that each call ``bytearray(40 MiB)``: each is under the per-file
    call budget alone, but a file is judged with one budget for all its pickles (a loader that
    picks either, or both, is bounded by the file, not by the member)."""
    from exploits import glob, write_zip
    from exploits_gadgets import REDUCE, TUPLE1, long1

    grab = plain(glob("builtins", "bytearray") + long1(40 << 20) + TUPLE1 + REDUCE)
    one = tmp_path / "one.pt"
    one.write_bytes(write_zip([("archive/data.pkl", grab), ("archive/version", b"3\n")]))
    two = tmp_path / "two.pt"
    two.write_bytes(write_zip([("archive/data.pkl", grab), ("archive/extra.pkl", grab), ("archive/version", b"3\n")]))
    with pytest.raises(ReadError) as raised:
        read_file(str(two))
    assert raised.value.problem == "resource-bomb"
    try:
        read_file(str(one))
    except ReadError as exc:  # a lone 40 MiB bytearray is no tensor: anything but a bomb
        assert exc.problem != "resource-bomb"


@pytest.mark.parametrize("size", [(1 << 20) + 128, (5 << 20) + 128, 3 << 20])
def test_a_highly_compressed_member_streams_to_its_last_byte(size: int) -> None:
    """zlib can hold output back once a call fills its output limit, with no input left: the
    stream must ask again rather than call the member ended (a real savez_compressed of zeros
    larger than the deep cap was a false CRC failure, 128 bytes short)."""
    data = bytes(size)
    src, info = _member(DEFLATED, data)
    from cachedoctor.formats._inflate import MemberStream

    start = 30 + len(info.filename.encode()) + len(info.extra)
    stream = MemberStream(src, start, DEFLATED, info.compress_size, info.filename, size)
    total = 0
    while piece := stream.read(1 << 20):
        total += len(piece)
    assert total == size
