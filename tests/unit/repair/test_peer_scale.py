"""The write-time scale check and the scan's ``distribution-outlier`` judge by one function
(:meth:`DistributionOutlier.outliers`); what repair says when it could not judge, and when a
kind got worse anyway."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from cachedoctor.checks import PeerGroup
from cachedoctor.checks.distribution_outlier import MIN_PEERS, DistributionOutlier, typical_std
from cachedoctor.cli.environment import Environment
from cachedoctor.repair.model import Action, ActionKind, ItemResult, ItemState, RecomputeSpec, RepairPlan
from cachedoctor.repair.peer_scale import EncoderUsed, judge_scale
from cachedoctor.repair.run import RepairOutcome
from cachedoctor.report.repair_text import RepairReport, print_result
from cachedoctor.scan import ScanOptions, inspect_file, scan
from fixtures.builders.natural_latents import DEFECTS, healthy_set

UNSCALED = 5  # the file planted with SD1.5's factor forgotten


def write(folder: Path, latents: list[np.ndarray]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"img_{i:06d}.npz" for i in range(len(latents))]
    for path, x in zip(paths, latents, strict=True):
        np.savez(path, latents=x)
    return paths


def deep_peer(path: Path):  # type: ignore[no-untyped-def]
    outcome = inspect_file(str(path), deep=True)
    assert outcome.peer is not None and outcome.group is not None
    return outcome


def test_the_scan_and_the_write_time_check_share_one_judgement(tmp_path: Path) -> None:
    latents = healthy_set(0, 24, h=16, w=16)
    latents[UNSCALED] = DEFECTS["unscaled"](latents[UNSCALED], seed=1)
    paths = write(tmp_path, latents)
    entries = tuple(deep_peer(p).peer for p in paths)
    check = DistributionOutlier()
    (finding,) = check.outliers(entries)
    assert finding.path == str(paths[UNSCALED]) and finding.message.endswith("unscaled latents?")
    assert list(check.check_peers(PeerGroup(str(tmp_path), entries))) == [finding]
    assert list(check.outliers(entries[: MIN_PEERS - 1])) == []  # too few: not judged
    stds = [typical_std(dict(e.stats)["latents"]) for e in entries]
    assert stds[UNSCALED] > 3 * float(np.median(stds))


SD15 = EncoderUsed("diffusers-vae:/models/sd15-vae", (0.18215, 0.0))


def _action(path: Path, scaling: tuple[float, float] | None = None) -> Action:
    spec = RecomputeSpec("latent", "/data/cat.png", "kohya-npz", "npz", key="latents", scaling=scaling)
    return Action(ActionKind.RECOMPUTE, str(path), str(path.parent), ("missing-entry",), spec=spec)


def test_a_candidate_off_its_peers_scale_is_refused_in_one_line(tmp_path: Path) -> None:
    latents = healthy_set(0, 22, h=16, w=16)
    *peers, candidate = write(tmp_path / "cache", latents[:-1]) + write(tmp_path / "new", latents[-1:])
    np.savez(candidate, latents=DEFECTS["unscaled"](latents[-1], seed=1))
    target = tmp_path / "cache" / "img_999999.npz"  # the candidate, as the file it would become
    verdict = judge_scale(deep_peer(candidate), _action(target), SD15)
    assert verdict.note is None and verdict.refusal is not None
    assert verdict.refusal.startswith("refused: recomputed latent for cat.png is off its peers' scale (std ")
    assert verdict.refusal.endswith(
        "; unscaled latents?): the encoder diffusers-vae:/models/sd15-vae may be the wrong VAE or scaling "
        "for this cache; nothing replaced"
    )
    np.savez(candidate, latents=DEFECTS["blank"](latents[-1], seed=1))
    blank = judge_scale(deep_peer(candidate), _action(target), SD15).refusal
    assert blank is not None and blank.endswith(
        "; a blank image?): is the image blank? If not, the encoder diffusers-vae:/models/sd15-vae may be the "
        "wrong VAE or scaling for this cache; nothing replaced"
    )
    healthy = judge_scale(deep_peer(write(tmp_path / "ok", latents[-1:])[0]), _action(target), SD15)
    assert (healthy.refusal, healthy.note) == (None, None)


def test_too_few_peers_are_a_note_not_a_refusal(tmp_path: Path) -> None:
    latents = healthy_set(0, 4, h=16, w=16)
    write(tmp_path / "cache", latents[:3])
    (candidate,) = write(tmp_path / "new", [DEFECTS["unscaled"](latents[3], seed=1)])
    target = tmp_path / "cache" / "img_999999.npz"
    verdict = judge_scale(deep_peer(candidate), _action(target), SD15)
    assert verdict.refusal is None
    assert verdict.note == f"not judged against its peers' scale: 3 healthy peer(s) read, {MIN_PEERS - 1} needed"
    same = judge_scale(deep_peer(candidate), _action(target, (0.18215, 0.0)), SD15)  # the layout's factor agrees
    assert same == verdict


def test_too_few_peers_and_another_factor_than_the_layouts_is_said(tmp_path: Path) -> None:
    """Where the layout knows the trainer's factors (a manifest's scaling column: SDXL's
    0.13025), an encoder that reports SD1.5's is named in the note; not refused (a manifest's
    trainer may apply any factor: ``test_a_manifest_scaling_is_applied_as_written``)."""
    latents = healthy_set(0, 2, h=16, w=16)
    write(tmp_path / "cache", latents[:1])
    (candidate,) = write(tmp_path / "new", latents[1:])
    verdict = judge_scale(deep_peer(candidate), _action(tmp_path / "cache" / "x.npz", (0.13025, 0.0)), SD15)
    assert verdict.refusal is None
    assert verdict.note == (
        "not judged against its peers' scale: 1 healthy peer(s) read, 19 needed; the encoder "
        "diffusers-vae:/models/sd15-vae scales by 0.18215 where the layout says the trainer scaled by 0.13025: "
        "is it this cache's VAE?"
    )


def _printed(report: RepairReport) -> str:
    out = io.StringIO()
    env = Environment(stdout=out, stderr=io.StringIO(), stdout_isatty=False, stderr_isatty=False, cwd="/")
    print_result(report, env)
    return " ".join(out.getvalue().split())


def test_a_kind_worse_after_an_unjudged_write_is_not_called_an_internal_error(tmp_path: Path) -> None:
    paths = write(tmp_path, healthy_set(0, 24, h=16, w=16))
    before = scan([str(tmp_path)], ScanOptions(workers=1, deep=True, state=None))
    np.savez(paths[UNSCALED], latents=DEFECTS["unscaled"](np.load(paths[UNSCALED])["latents"], seed=1))
    after = scan([str(tmp_path)], ScanOptions(workers=1, deep=True, state=None))
    note = f"written and checked; not judged against its peers' scale: 3 healthy peer(s) read, {MIN_PEERS - 1} needed"
    written = ItemResult(str(paths[UNSCALED]), ActionKind.RECOMPUTE, ItemState.VERIFIED, note)
    unjudged = RepairReport(RepairOutcome(before, RepairPlan(), None, after=after, results=[written]))
    text = _printed(unjudged)
    assert (
        "worse: distribution-outlier in 1 file(s), 0 before the repair; written where too few healthy peers "
        "were there to judge it: check the --encoder" in text
    )
    assert "please report this" not in text and text.count("not judged:") == 1
    judged = RepairReport(RepairOutcome(before, RepairPlan(), None, after=after))  # nothing explains it
    assert "worse: distribution-outlier in 1 file(s), 0 before the repair; please report this" in _printed(judged)
