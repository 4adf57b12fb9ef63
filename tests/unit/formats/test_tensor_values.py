"""The deep pass over a tensor's values (``formats/_tensor_values.py``): the usual contiguous
float32/float64 tensor is judged by one dot product, fp16/bf16/fp8 by two maxima from a plan kept
per layout, everything else by the general bit-pattern path. Each test plants one kind of value and asserts the answer is the general path's, and
which path gave it: a fast path that never fires, or that answers where it cannot know, fails."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from cachedoctor.formats import _channel_stats as stats_of
from cachedoctor.formats import _deep
from cachedoctor.formats import _tensor_values as tv


def _answers(a: np.ndarray | torch.Tensor, key: str = "latents", pad: int = 0) -> tuple[object, object, bool]:
    """``(fast-or-general answer, general answer, whether the general path was needed)``."""
    if isinstance(a, torch.Tensor):
        data, dtype, itemsize = (
            a.view(torch.uint8).numpy().tobytes(),
            str(a.dtype).removeprefix("torch."),
            a.element_size(),
        )
    else:
        data, dtype, itemsize = a.tobytes(), str(a.dtype), a.itemsize
    raw = memoryview(bytes(pad) + data)
    offset, numel = pad // itemsize, a.numel() if isinstance(a, torch.Tensor) else a.size
    args = (key, raw, dtype, numel + offset, offset, tuple(a.shape), None)
    calls: list[int] = []
    real = tv._general

    def counted(*args: object) -> object:
        calls.append(1)
        return real(*args)  # type: ignore[arg-type]

    tv._general = counted  # type: ignore[assignment]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # numpy's overflow warnings would reach the user's terminal
            answer = tv.tensor_values(*args)
    finally:
        tv._general = real
    return answer, real(*args), bool(calls)


def _latent(dtype: str = "float32", scale: float = 1.0) -> np.ndarray:
    with np.errstate(over="ignore"):
        return (np.random.default_rng(5).standard_normal((4, 32, 32)) * scale).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_finite_latent_takes_one_dot_product_and_gets_the_general_answer(dtype: str) -> None:
    fast, general, fell_back = _answers(_latent(dtype))
    assert fast == general and fast[0] == 0 and fast[1] is not None and not fell_back  # type: ignore[index]


_BITS = [torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2]


@pytest.mark.parametrize("dtype", _BITS)
def test_a_finite_latent_of_a_narrow_float_takes_two_maxima_and_gets_the_general_answer(dtype: torch.dtype) -> None:
    fast, general, fell_back = _answers(torch.from_numpy(_latent()).to(dtype))
    assert fast == general and fast[0] == 0 and fast[1] is not None and not fell_back  # type: ignore[index]


@pytest.mark.parametrize("dtype", _BITS)
@pytest.mark.parametrize("value", [float("nan"), float("-inf")])
def test_a_non_finite_narrow_float_is_counted_by_the_general_path(dtype: torch.dtype, value: float) -> None:
    t = torch.from_numpy(_latent()).to(dtype)
    t[1, 0, 5] = value  # float8_e4m3fn has no Inf: -inf saturates to -448, finite
    expected = int((~torch.isfinite(t.float())).sum())
    fast, general, fell_back = _answers(t)
    assert fast == general and fast[0] == expected and fell_back is (expected == 1)  # type: ignore[index]


@pytest.mark.parametrize(("largest", "general_stats"), [(2.0**55, False), (2.0**60, True)])
def test_bfloat16_beyond_2_to_56_gets_the_overflow_checked_statistics(largest: float, general_stats: bool) -> None:
    t = torch.ones(4, 32, 32, dtype=torch.bfloat16)
    t[3, 0, 0] = largest  # on the sampled grid (every step-th row and column from the first)
    calls: list[int] = []
    real = stats_of.channel_stats

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    stats_of.channel_stats = counted  # type: ignore[assignment]
    try:
        fast = tv.tensor_values(
            "latents", memoryview(t.view(torch.uint8).numpy().tobytes()), "bfloat16", t.numel(), 0, (4, 32, 32), None
        )
    finally:
        stats_of.channel_stats = real
    fast2, general, fell_back = _answers(t)
    assert fast == fast2 == general and not fell_back and bool(calls) is general_stats


def test_a_text_embedding_gets_no_statistics_on_the_fast_path() -> None:
    fast, general, fell_back = _answers(_latent(), key="prompt_embeds")
    assert fast == general == (0, None) and not fell_back


@pytest.mark.parametrize(("value", "count"), [(np.nan, 1), (-np.inf, 1), (np.inf, 1)])
def test_a_non_finite_value_is_counted_by_the_general_path(value: float, count: int) -> None:
    a = _latent()
    a[2, 31, 0] = value
    fast, general, fell_back = _answers(a)
    assert fast == general == (count, None) and fell_back


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_values_whose_squares_overflow_fall_back_without_a_warning(dtype: str) -> None:
    """1e20 squared overflows float32 (and 1e200 float64): the dot product says nothing, the
    general path answers (finite values, statistics clamped), and no numpy warning is printed."""
    a = _latent(dtype, 1e20 if dtype == "float32" else 1e200)
    fast, general, fell_back = _answers(a)
    assert fast == general and fast[0] == 0 and fell_back  # type: ignore[index]


@pytest.mark.parametrize(("largest", "fast_path"), [(2.0**53, True), (2.0**56, False)])
def test_the_dot_product_bounds_values_within_2_to_56(largest: float, fast_path: bool) -> None:
    a = np.ones((4, 32, 32), np.float32)
    a[3, 31, 31] = largest
    fast, general, fell_back = _answers(a)
    assert fast == general and fell_back is not fast_path


def test_a_misaligned_tensor_takes_the_general_path_and_aligns_the_next_read(monkeypatch: pytest.MonkeyPatch) -> None:
    a = _latent()  # 16 KB: worth aligning the next read for (_deep._ALIGN_FROM)
    raw = memoryview(bytes(2) + a.tobytes())[2:]  # the data two bytes past an item boundary
    general = tv._general("latents", raw, "float32", a.size, 0, a.shape, None)
    calls: list[int] = []

    def counted(*args: object) -> object:
        calls.append(1)
        return general

    monkeypatch.setattr(tv, "_general", counted)
    monkeypatch.setattr(_deep, "placement", 0)
    assert tv.tensor_values("latents", raw, "float32", a.size, 0, a.shape, None) == general and calls == [1]
    monkeypatch.setattr(tv, "_general", lambda *args: _deep._count_flat(np, np.frombuffer(raw, "<u4"), _plan(a)))
    tv.tensor_values("latents", raw, "float32", a.size, 0, a.shape, None)
    assert _deep.placement != 0  # the general path moved the next file's start


def _plan(a: np.ndarray) -> _deep._Plan:
    plan = _deep._plan("float32", a.size, 0, a.shape, None)
    assert plan is not None
    return plan
