"""The deep pass over a tensor's values (``formats/_tensor_values.py``): the usual contiguous
float32/float64 tensor is judged by one dot product, everything else by the general bit-pattern
path. Each test plants one kind of value and asserts the answer is the general path's, and
which path gave it: a fast path that never fires, or that answers where it cannot know, fails."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from cachedoctor.formats import _deep
from cachedoctor.formats import _tensor_values as tv


def _answers(a: np.ndarray, key: str = "latents", pad: int = 0) -> tuple[object, object, bool]:
    """``(fast-or-general answer, general answer, whether the general path was needed)``."""
    raw = memoryview(bytes(pad) + a.tobytes())
    offset, numel = pad // a.itemsize, a.size + pad // a.itemsize
    args = (key, raw, str(a.dtype), numel, offset, a.shape, None)
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
