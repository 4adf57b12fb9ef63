"""The deep pass's per-channel statistics: the same numbers whatever the float format, none for
text embeddings or tensors with NaN, and they survive the state database's codec."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from factories import save_pt

from cachedoctor.formats import read_file
from cachedoctor.formats._channel_stats import decode_stats
from cachedoctor.scan.state.codec import outcome_from_text, outcome_to_text
from cachedoctor.scan.worker import inspect_path

GAINS = torch.tensor([1.0, 2.0, 3.0, 4.0])[:, None, None]


def latent() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randn(4, 64, 64, generator=g) * GAINS + 1.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.float8_e4m3fn])
def test_every_float_format_gives_the_float32_statistics(tmp_path: Path, dtype: torch.dtype) -> None:
    x = latent()
    (t,) = read_file(str(save_pt(tmp_path / "a.pt", x.to(dtype))), deep=True).tensors
    means, stds = decode_stats(t.stats or b"")
    reference = x.to(dtype).float()[:, ::4, ::4]  # the grid the sample takes: every 4th row and column of 64
    assert means == pytest.approx(reference.mean(dim=(1, 2)).tolist(), abs=1e-3)
    assert stds == pytest.approx(reference.std(dim=(1, 2), correction=0).tolist(), rel=1e-3)


def test_text_embeddings_and_tensors_with_nan_get_none(tmp_path: Path) -> None:
    bad = latent()
    bad[0, 0, 0] = float("nan")
    path = save_pt(tmp_path / "e.pt", {"prompt_embeds": torch.randn(1, 77, 64), "latents": bad})
    assert [(t.key, t.stats) for t in read_file(str(path), deep=True).tensors] == [
        ("prompt_embeds", None),
        ("latents", None),
    ]


def test_the_statistics_round_trip_through_the_state_codec(tmp_path: Path) -> None:
    path = str(save_pt(tmp_path / "a.pt", latent()))
    outcome = inspect_path(path, deep=True)
    assert outcome.peer is not None and len(outcome.peer.stats[0][1]) == 32
    text = outcome_to_text(outcome)
    again = outcome_from_text(path, outcome.size, 0, text)
    assert again is not None and again.peer == outcome.peer
    assert outcome_from_text(path, outcome.size, 0, text.replace('"st":[["",', '"st":[["","!')) is None
    np.testing.assert_equal(len(decode_stats(outcome.peer.stats[0][1])[0]), 4)
