"""NaN/Inf are counted on bit patterns for every float dtype (no float arithmetic, no torch):
each rule must judge every pattern as torch.isfinite judges it, whole tensors and strided views."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from cachedoctor.formats._deep import count_nonfinite  # noqa: E402

ONE_BYTE = ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"]


def _count(t: torch.Tensor, dtype: str) -> int | None:
    raw = t.contiguous().view(torch.uint8).numpy().tobytes()
    return count_nonfinite(memoryview(raw), dtype, t.numel(), 0, tuple(t.shape), None)


def _expected(t: torch.Tensor) -> int:
    if t.dtype == torch.float8_e8m0fnu:  # torch.isfinite is not implemented for it: 0xFF is its only NaN
        return int((t.view(torch.uint8) == 0xFF).sum())
    return int((~torch.isfinite(t.float() if t.dtype.itemsize == 1 else t)).sum())


@pytest.mark.parametrize("name", ONE_BYTE)
def test_every_float8_pattern(name: str) -> None:
    t = torch.arange(256, dtype=torch.uint8).view(getattr(torch, name))
    expected = _expected(t)
    assert expected > 0
    assert _count(t, name) == expected


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_every_half_pattern(name: str) -> None:
    t = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(getattr(torch, name))
    expected = _expected(t)
    assert expected == (2048 if name == "float16" else 2 * 128)
    assert _count(t, name) == expected


@pytest.mark.parametrize("name", ["float32", "float64"])
def test_wide_floats_on_their_edges(name: str) -> None:
    dtype = getattr(torch, name)
    info = torch.finfo(dtype)
    values = [0.0, -0.0, info.max, -info.max, info.tiny, info.tiny / 4, float("inf"), float("-inf"), float("nan")]
    t = torch.tensor(values, dtype=dtype)
    t = torch.cat(
        [t, -t.nan_to_num(nan=1.0), t.view(torch.int32 if name == "float32" else torch.int64).neg().view(dtype)]
    )
    assert _count(t, name) == _expected(t) > 0


def test_a_large_tensor_is_counted_across_slices() -> None:
    """Past one scratch slice (256 Ki elements): a NaN at the very end, an Inf at the start of
    the second slice."""
    t = torch.zeros(300_000, dtype=torch.float32)
    t[262_144] = float("inf")
    t[-1] = float("nan")
    assert _count(t, "float32") == 2


def test_complex_elements_count_once() -> None:
    t = torch.tensor(
        [complex(1, 2), complex(float("nan"), float("inf")), complex(3, float("nan"))], dtype=torch.complex64
    )
    assert _count(t, "complex64") == 2


def test_a_strided_view_counts_only_its_elements() -> None:
    storage = torch.zeros(4, 6, dtype=torch.float16)
    storage[:, 1] = float("nan")  # outside the view below
    storage[2, 4] = float("inf")  # inside it
    raw = memoryview(storage.view(torch.uint8).numpy().tobytes())
    view = storage[:, ::2]  # columns 0, 2, 4
    assert count_nonfinite(raw, "float16", storage.numel(), 0, tuple(view.shape), view.stride()) == 1
    assert count_nonfinite(raw, "float16", storage.numel(), 1, (4,), (6,)) == 4  # column 1 only


def test_a_view_past_its_storage_is_not_counted() -> None:
    raw = memoryview(torch.zeros(8, dtype=torch.float32).numpy().tobytes())
    assert count_nonfinite(raw, "float32", 8, 4, (8,), None) is None
    assert count_nonfinite(raw, "int32", 8, 0, (8,), None) is None


def test_reads_placed_for_alignment_count_the_same(tmp_path: Path) -> None:
    """Deep reads put each file where the last file's misaligned tensor would have been
    aligned (an npz member starts wherever its zip header ends): counts and CRCs do not depend
    on where a file lands, for the npz that moved the placement and for a torch file after it."""
    import numpy as np

    from cachedoctor.formats import _deep, read_file

    latents = np.zeros((4, 64, 64), dtype=np.float32)
    latents[1, 2, 3] = np.nan
    npz = tmp_path / "a.npz"
    np.savez(npz, latents=latents, original_size=np.array([512, 512]))
    pt = tmp_path / "b.pt"
    t = torch.zeros(4, 64, 64, dtype=torch.float16)
    t[0, 0, :3] = float("inf")
    torch.save(t, pt)
    seen = []
    for path in (npz, npz, pt, npz, pt):
        before = _deep.placement
        meta = read_file(str(path), deep=True)
        assert meta is not None and not meta.crc_mismatches
        seen.append((path.suffix, before, [(x.key, x.nonfinite) for x in meta.tensors if x.nonfinite is not None]))
    assert {s[1] for s in seen} != {0}  # the npz moved the placement: the later reads landed elsewhere
    for suffix, _, counts in seen:
        assert counts == ([("latents", 1)] if suffix == ".npz" else [("", 3)])


@pytest.mark.parametrize("name", ["float16", "bfloat16", *ONE_BYTE])
def test_tiny_views_judge_every_pattern_alike(name: str) -> None:
    """Views of a few words (kohya's ``crop_ltrb``, SDXL's ``time_ids``) are counted word by word
    in Python instead of numpy: every bit pattern as torch judges it, eight words at a time."""
    bits = torch.arange(256, dtype=torch.uint8) if name in ONE_BYTE else torch.arange(-32768, 32768).to(torch.int16)
    t = bits.view(getattr(torch, name))
    assert sum(_count(t[i : i + 8], name) or 0 for i in range(0, t.numel(), 8)) == _expected(t) > 0


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32", "float64"])
def test_negative_nan_and_inf_alone_are_found_in_any_slice(name: str) -> None:
    """The probe reads the words as unsigned (a negative NaN or -Inf is among the largest) and as
    signed (a positive one is): here only negative ones, in the first and in a later slice."""
    dtype = getattr(torch, name)
    t = torch.ones(300_000, dtype=dtype)
    t[7] = float("-inf")
    negative_nan = {"float16": 0xFE00, "bfloat16": 0xFFC0, "float32": 0xFFC0_0000, "float64": 0xFFF8 << 48}[name]
    bits = 8 * t.element_size()
    t.view({16: torch.int16, 32: torch.int32, 64: torch.int64}[bits])[280_000] = negative_nan - (1 << bits)
    assert t[280_000].isnan()
    assert _count(t, name) == _expected(t) == 2
