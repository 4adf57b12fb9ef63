"""Deep reads learn an archive layout from the first file of a cache and check the next files of
that layout in a few calls (``formats/_deep_members.py``). Each test reads a clean file first, so
that its layout is known, then one file of the same layout with one defect planted, and asserts
the finding is exactly the full walk's (the memo cleared): a damaged file is never judged by
what its clean peer taught."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import torch
from factories import save_pt

from cachedoctor.formats import ReadError, read_file
from cachedoctor.formats import _deep_members as members
from cachedoctor.formats._channel_stats import channel_stats
from cachedoctor.formats._deep import nonfinite_and_bound


def _pair(tmp_path: Path, npz: bool = False) -> tuple[Path, bytearray]:
    """A clean file and the bytes of another file of the same layout (other values)."""
    if npz:
        import numpy as np

        paths = []
        for i in range(2):
            p = tmp_path / f"{i}_1024x1024_sdxl.npz"
            np.savez(p, latents=np.full((4, 8, 8), i + 1.0, np.float32), original_size=np.array([64, 64]))
            paths.append(p)
        return paths[0], bytearray(paths[1].read_bytes())
    clean = save_pt(tmp_path / "a.pt", torch.ones(4, 8, 8))
    other = save_pt(tmp_path / "b.pt", torch.full((4, 8, 8), 2.0))
    return clean, bytearray(other.read_bytes())


def _both_ways(tmp_path: Path, clean: Path, data: bytearray, expect_layout: bool = True) -> tuple[object, object]:
    """The finding (or the error) for ``data``: once after the clean file taught the layout,
    once with nothing learned."""
    path = tmp_path / ("c" + clean.suffix)
    path.write_bytes(bytes(data))
    out = []
    for learned in (True, False):
        members._layouts.clear()
        if learned:
            read_file(str(clean), deep=True)
            assert bool(members._layouts) == expect_layout
        try:
            meta = read_file(str(path), deep=True)
            assert meta is not None
            out.append((meta.crc_mismatches, meta.ambiguous, [(t.key, t.nonfinite, t.stats) for t in meta.tensors]))
        except ReadError as exc:
            out.append((exc.problem, exc.message))
    members._layouts.clear()
    return out[0], out[1]


def _member_at(data: bytearray, name: bytes) -> int:
    at = 0  # torch.save and np.savez both start with a local header
    while True:
        nlen, xlen = struct.unpack_from("<HH", data, at + 26)
        if data[at + 30 : at + 30 + nlen] == name:
            return at
        at = data.index(b"PK\x03\x04", at + 30 + nlen + xlen)


@pytest.mark.parametrize("npz", [False, True])
def test_a_clean_file_of_a_known_layout_reads_as_the_full_walk(tmp_path: Path, npz: bool) -> None:
    clean, data = _pair(tmp_path, npz)
    learned, full = _both_ways(tmp_path, clean, data)
    assert learned == full and learned[0] == ()  # type: ignore[index]


def test_a_flipped_data_byte_fails_its_crc_as_in_the_full_walk(tmp_path: Path) -> None:
    clean, data = _pair(tmp_path)
    at = _member_at(data, b"archive/data/0")
    data[at + 200] ^= 0x01  # inside the tensor's data (the header and its padding are under 200 bytes)
    learned, full = _both_ways(tmp_path, clean, data)
    assert learned == full
    assert [c.name for c in learned[0]] == ["archive/data/0"]  # type: ignore[index]


def test_a_renamed_local_header_is_found_as_in_the_full_walk(tmp_path: Path) -> None:
    clean, data = _pair(tmp_path)
    at = _member_at(data, b"archive/version")
    data[at + 30 + len(b"archive/")] = ord("V")  # the local header now names archive/Version
    learned, full = _both_ways(tmp_path, clean, data)
    assert learned == full
    assert "archive/version" in learned[1]  # type: ignore[index]


def test_a_damaged_local_signature_is_an_error_as_in_the_full_walk(tmp_path: Path) -> None:
    clean, data = _pair(tmp_path)
    at = _member_at(data, b"archive/byteorder")
    data[at + 3] = 0x05
    learned, full = _both_ways(tmp_path, clean, data)
    assert learned == full == ("bad-zip", "local header of archive/byteorder is damaged")


def test_a_longer_extra_field_moves_the_data_as_in_the_full_walk(tmp_path: Path) -> None:
    """Same central directory, but one local header claims a longer extra field: its data
    starts elsewhere, so the learned starts must not be used."""
    clean, data = _pair(tmp_path)
    at = _member_at(data, b"archive/data/0")
    (xlen,) = struct.unpack_from("<H", data, at + 28)
    struct.pack_into("<H", data, at + 28, xlen + 4)
    learned, full = _both_ways(tmp_path, clean, data)
    assert learned == full


def test_an_archive_of_many_members_is_walked_in_full_every_time(tmp_path: Path) -> None:
    import numpy as np

    arrays = {f"a{i}": np.full(3, float(i), np.float32) for i in range(members._MAX_MEMBERS + 1)}
    paths = [tmp_path / "0.npz", tmp_path / "1.npz"]
    for p in paths:
        np.savez(p, **arrays)
    data = bytearray(paths[1].read_bytes())
    data[data.index(struct.pack("<3f", 7.0, 7.0, 7.0))] ^= 0x01  # a value of a7 (each member holds its own)
    learned, full = _both_ways(tmp_path, paths[0], data, expect_layout=False)
    assert learned == full
    assert [c.name for c in learned[0]] == ["a7.npy"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("dtype", "value", "bounded"),
    [
        (torch.float32, 1.0, True),
        (torch.float32, -(2.0**56), False),
        (torch.float32, 2.0**56, False),
        (torch.float32, 2.0**55, True),
        (torch.bfloat16, -(2.0**56), False),
        (torch.bfloat16, -(2.0**55), True),
        (torch.float16, 1.0, False),  # no bound kept: fp16 cannot reach it anyway
    ],
)
def test_the_finite_check_bounds_values_only_within_2_to_56(dtype: torch.dtype, value: float, bounded: bool) -> None:
    t = torch.ones(4, 16, 16, dtype=dtype)
    t[3, 15, 15] = value  # the last element: both maxima must see it
    raw = memoryview(t.view(torch.uint8).numpy().tobytes())
    name = str(dtype).removeprefix("torch.")
    assert nonfinite_and_bound(raw, name, t.numel(), 0, tuple(t.shape), None) == (0, bounded)


def test_a_known_bound_gives_the_same_statistics_as_checking_it(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(3)
    t = torch.randn(4, 64, 64, generator=g) * 1e30  # squares overflow float32 unless bounded: they are not
    raw = memoryview(t.numpy().tobytes())
    shape = tuple(t.shape)
    assert nonfinite_and_bound(raw, "float32", t.numel(), 0, shape, None) == (0, False)
    small = memoryview((t / 1e30).numpy().tobytes())
    assert nonfinite_and_bound(small, "float32", t.numel(), 0, shape, None) == (0, True)
    checked = channel_stats("latents", small, "float32", 0, shape, None)
    assert checked is not None and channel_stats("latents", small, "float32", 0, shape, None, bounded=True) == checked


def _central_at(data: bytearray, name: bytes) -> int:
    at = data.index(b"PK\x01\x02")
    while True:
        nlen, xlen, clen = struct.unpack_from("<HHH", data, at + 28)
        if data[at + 46 : at + 46 + nlen] == name:
            return at
        at += 46 + nlen + xlen + clen


@pytest.mark.parametrize("local", [False, True])
def test_a_member_renamed_in_the_directory_is_not_read_by_its_peer_layout(tmp_path: Path, local: bool) -> None:
    """Same size, same directory offset, same count: only the directory's bytes tell the two
    archives apart (the layout's key does not hold the names)."""
    clean, data = _pair(tmp_path)
    heads = [_central_at(data, b"archive/version")] + ([_member_at(data, b"archive/version")] if local else [])
    for at in heads:
        base = at + (30 if data[at + 2] == 3 else 46)
        data[base + len(b"archive/")] = ord("w")  # archive/wersion
    learned, full = _both_ways(tmp_path, clean, data)
    assert learned == full
    assert learned[1] == (() if local else ("archive/wersion",))  # type: ignore[index]


def test_a_directory_crc_that_disagrees_is_found_as_in_the_full_walk(tmp_path: Path) -> None:
    clean, data = _pair(tmp_path)
    at = _central_at(data, b"archive/byteorder")
    data[at + 16] ^= 0x01  # the recorded CRC, not the data
    learned, full = _both_ways(tmp_path, clean, data)
    assert learned == full
    assert [c.name for c in learned[0]] == ["archive/byteorder"]  # type: ignore[index]


def test_npz_files_written_at_other_times_share_one_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """np.savez stamps each header with the time of writing: the times are no part of a layout."""
    clean, data = _pair(tmp_path, npz=True)
    for at in (_member_at(data, b"latents.npy"), _central_at(data, b"latents.npy")):
        base = at + (10 if data[at + 2] == 3 else 12)
        struct.pack_into("<HH", data, base, 0x1234, 0x5678)  # another time and date
    other = tmp_path / ("c" + clean.suffix)
    other.write_bytes(bytes(data))
    members._layouts.clear()
    read_file(str(clean), deep=True)
    walks: list[str] = []
    real = members.Members._walk

    def counted(self: members.Members, *args: object) -> None:
        walks.append("walk")
        real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(members.Members, "_walk", counted)
    meta = read_file(str(other), deep=True)
    members._layouts.clear()
    assert meta is not None and meta.crc_mismatches == () and walks == []


@pytest.mark.parametrize("tail", [b"\0" * 7, b"trailing bytes"])
def test_bytes_after_the_end_record_keep_no_layout(tmp_path: Path, tail: bytes) -> None:
    """A reader may parse such an archive from bytes outside the directory: no layout is kept."""
    clean, data = _pair(tmp_path)
    odd = tmp_path / "odd.pt"
    odd.write_bytes(clean.read_bytes() + tail)
    learned, full = _both_ways(tmp_path, odd, bytearray(odd.read_bytes()), expect_layout=False)
    assert learned == full
