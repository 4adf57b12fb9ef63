"""``repair --posterior trainer|mode|sample`` (issues 14, 26): by default what the entry's trainer
caches (SimpleTuner: a sample, drawn with a seed per entry, so reproducibly); the mean or a sample
on request."""

from __future__ import annotations

from pathlib import Path

import torch
from cli_run import cli
from repair_factories import simpletuner
from tiny_models import build_tiny_vae

from cachedoctor.repair.posterior import Models, chosen, draw, item_seed


def test_item_seed_depends_on_the_seed_and_the_path_inside_its_root() -> None:
    assert item_seed(0, "/a/cache/x.pt", "/a/cache") == item_seed(0, "/b/cache/x.pt", "/b/cache")
    assert item_seed(0, "/a/cache/x.pt", "/a/cache") != item_seed(1, "/a/cache/x.pt", "/a/cache")
    assert item_seed(0, "/a/cache/x.pt", "/a/cache") != item_seed(0, "/a/cache/y.pt", "/a/cache")


def test_mode_is_the_mean_and_sample_is_mean_plus_std_noise() -> None:
    mean, std = torch.zeros(4, 3, 3), torch.full((4, 3, 3), 2.0)
    assert torch.equal(draw(Models((), "mode"), mean, std, "/c/x.pt", "/c"), mean)
    one = draw(Models((), "sample", 7), mean, std, "/c/x.pt", "/c")
    assert torch.equal(one, draw(Models((), "sample", 7), mean, std, "/c/x.pt", "/c"))
    expected = 2.0 * torch.randn(4, 3, 3, generator=torch.Generator().manual_seed(item_seed(7, "/c/x.pt", "/c")))
    assert torch.equal(one, expected)


def test_trainer_follows_the_layouts_rule_and_draws_only_with_a_std() -> None:
    mean, std = torch.zeros(2, 2), torch.ones(2, 2)
    trainer = Models(())
    assert [chosen(trainer, rule, True) for rule in ("mode", "sample", "")] == ["mode", "sample", "mode"]
    assert chosen(trainer, "sample", False) == "mode"  # an encoder with no std: the mean, never a guess at noise
    assert [chosen(Models((), p), "sample", True) for p in ("mode", "sample")] == ["mode", "sample"]
    assert torch.equal(draw(trainer, mean, std, "/c/x.pt", "/c", "mode"), mean)
    assert torch.equal(
        draw(trainer, mean, std, "/c/x.pt", "/c", "sample"), draw(Models((), "sample"), mean, std, "/c/x.pt", "/c")
    )


def _repair_one(tmp_path: Path, *extra: str) -> torch.Tensor:
    vae = build_tiny_vae(tmp_path / "vae")
    spec = f"diffusers-vae:{vae}"
    ds = simpletuner(tmp_path / "st", 3, encoder=spec, size=(64, 48), target=(64, 48), dtype="float32")
    victim = ds.latent_path(ds.images[1])
    victim.unlink()
    code, out, err = cli("repair", "--config", str(ds.config), "--encoder", spec, "--yes", *extra)
    assert (code, err) == (0, ""), out
    return torch.load(victim, weights_only=True)


def test_simpletuner_gets_a_seeded_sample_by_default_and_the_mean_on_request(tmp_path: Path) -> None:
    default = _repair_one(tmp_path / "a")  # SimpleTuner caches latent_dist.sample()
    sample = _repair_one(tmp_path / "b", "--posterior", "sample", "--seed", "0")
    mode = _repair_one(tmp_path / "c", "--posterior", "mode")
    assert torch.equal(default, sample)  # the same seed and path: the same bytes on every run
    assert not torch.allclose(sample, mode, atol=1e-3)


def test_sample_with_an_encoder_without_std_stops_in_one_line(tmp_path: Path) -> None:
    ds = simpletuner(tmp_path / "st", 3)
    ds.latent_path(ds.images[1]).unlink()
    pool = "cachedoctor.encoders.example_adapter:factory:8"
    code, out, err = cli("repair", "--config", str(ds.config), "--encoder", pool, "--posterior", "sample", "--yes")
    assert code == 2 and "--posterior sample needs an encoder that reports its posterior's std" in err, (out, err)
    assert len(err.strip().splitlines()) == 1
