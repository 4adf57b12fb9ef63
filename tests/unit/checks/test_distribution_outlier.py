"""``distribution-outlier``: one wrong latent among healthy, varied peers is named; a healthy
varied cache, a folder of too few peers and a folder of identical files are not; the finding
survives a rescan through the state database and plans a recompute."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from cachedoctor.checks.distribution_outlier import MIN_PEERS
from cachedoctor.findings import Finding, Fix
from cachedoctor.repair.model import ActionKind
from cachedoctor.repair.planner import plan_repair
from cachedoctor.scan import ScanOptions, scan
from fixtures.builders.natural_latents import DEFECTS, healthy_set, natural_latent
from tests.factories import settle

KIND = "distribution-outlier"
PEERS = 30
PLANTED = "img_000007.npz"  # seed 0: the image whose std is nearest the median of the 31


def write_cache(folder: Path, latents: list[np.ndarray]) -> Path:
    """kohya-style npz files, ``latents`` as the key (no torch needed)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, x in enumerate(latents):
        np.savez(folder / f"img_{i:06d}.npz", latents=x)
    return folder


def healthy(n: int = PEERS + 1) -> list[np.ndarray]:
    return healthy_set(0, n, h=16, w=16)


def outliers(folder: Path, **options: object) -> list[Finding]:
    report = scan([str(folder)], ScanOptions(deep=True, workers=1, state=None, **options))  # type: ignore[arg-type]
    return [f for f in report.findings if f.kind == KIND]


@pytest.mark.parametrize(
    ("defect", "message"),
    [
        ("unscaled", r"latents: std \d+\.\dx its peers \(\d+ robust deviations from 30 peers\): unscaled latents\?"),
        ("blank", r"latents: std 0\.0\d+x its peers \(\d+ robust deviations from 30 peers\): a blank image\?"),
        (
            "other-vae",
            r"latents: channel \d (mean [+-]\d+\.\d\d std|std \d+\.\d\dx) off its peers \(\d+ robust deviations "
            r"from 30 peers\) while the others agree: another VAE\?",
        ),
    ],
)
def test_a_planted_wrong_latent_is_the_one_finding(tmp_path: Path, defect: str, message: str) -> None:
    latents = healthy()
    latents[7] = DEFECTS[defect](latents[7], seed=1)
    folder = write_cache(tmp_path / "cache", latents)
    (finding,) = outliers(folder)
    assert (finding.path, finding.fix.value, finding.severity.value) == (str(folder / PLANTED), "recompute", "warning")
    assert re.fullmatch(message, finding.message), finding.message


def test_unscaled_says_its_factor(tmp_path: Path) -> None:
    latents = healthy()
    latents[7] = DEFECTS["unscaled"](latents[7])
    (finding,) = outliers(write_cache(tmp_path / "cache", latents))
    median_std = np.median([np.log(x.reshape(4, -1).std(axis=1)) for x in latents[:7] + latents[8:]], axis=0)
    own = np.log(latents[7].reshape(4, -1).std(axis=1))
    assert finding.details["factor"] == pytest.approx(float(np.exp(np.median(own - median_std))), rel=0.03)
    assert finding.details["factor"] > 3 and finding.details["channels"] == 4 and finding.details["key"] == "latents"


def test_a_large_common_mean_shift_is_named_as_a_shift(tmp_path: Path) -> None:
    latents = healthy()
    latents[7] = latents[7] + np.float32(6.0)  # every channel moved by 6 std: a shift far beyond image colour
    (finding,) = outliers(write_cache(tmp_path / "cache", latents))
    assert finding.path.endswith(PLANTED)
    assert re.fullmatch(
        r"latents: mean shifted by \+\d\.\d\d std in every channel \(\d+ robust deviations from 30 peers\): "
        r"Flux shift not applied\?",
        finding.message,
    ), finding.message


def test_a_healthy_varied_cache_is_silent(tmp_path: Path) -> None:
    """Flat, textured, dark, bright, colourful: 120 images of natural statistics, every tenth flat."""
    assert outliers(write_cache(tmp_path / "cache", healthy_set(3, 120, h=16, w=16))) == []


def test_too_few_peers_say_nothing(tmp_path: Path) -> None:
    latents = healthy(MIN_PEERS - 1)
    latents[7] = DEFECTS["unscaled"](latents[7])
    assert outliers(write_cache(tmp_path / "cache", latents)) == []


def test_identical_files_guard_the_spread(tmp_path: Path) -> None:
    """Copies of one latent have a MAD of 0: a 10% difference is no outlier, a 5.5x one is."""
    base = natural_latent(0, "same", h=16, w=16)
    latents = [base] * PEERS + [base * np.float32(1.1)]
    assert outliers(write_cache(tmp_path / "near", latents)) == []
    latents[-1] = DEFECTS["unscaled"](base)
    (finding,) = outliers(write_cache(tmp_path / "far", latents))
    assert finding.path == str(tmp_path / "far" / f"img_{PEERS:06d}.npz") and finding.details[
        "factor"
    ] == pytest.approx(1 / 0.18215, rel=1e-3)


def test_a_rescan_through_the_state_database_gives_the_same_finding(tmp_path: Path) -> None:
    latents = healthy()
    latents[7] = DEFECTS["unscaled"](latents[7])
    folder = write_cache(tmp_path / "cache", latents)
    settle(folder)
    first = [f for f in scan([str(folder)], ScanOptions(deep=True, workers=1, state="auto")).findings if f.kind == KIND]
    assert len(first) == 1
    np.savez(
        folder / "img_000010.npz", latents=latents[10] * np.float32(1.01)
    )  # one peer changes: the folder is judged again
    settle(folder)
    again = scan([str(folder)], ScanOptions(workers=1, state="auto", deep_changed=True))
    assert again.stats.files_reused == PEERS  # the others' statistics came from the state database
    # the same finding; only the peers' medians and spreads may move with the changed peer
    assert [_own(f) for f in again.findings if f.kind == KIND] == [_own(f) for f in first]


def _own(f: Finding) -> tuple[str, str, dict[str, object]]:
    return f.path, f.message, {k: v for k, v in f.details.items() if not k.startswith("peer_")}


def test_the_repair_planner_recomputes_it(tmp_path: Path) -> None:
    latents = healthy()
    latents[7] = DEFECTS["blank"](latents[7])
    folder = write_cache(tmp_path / "cache", latents)
    (finding,) = outliers(folder)
    (action,) = plan_repair([finding], [str(folder)], {}, None, set(), None, True).actions
    assert (action.kind, action.path, action.reasons) == (ActionKind.RECOMPUTE, str(folder / PLANTED), (KIND,))
    assert finding.fix is Fix.RECOMPUTE


_QUICK_RESCAN = """
import json, sys
from cachedoctor.scan import ScanOptions, scan
result = scan([{cache!r}], ScanOptions(workers=1, state="auto"))
print(json.dumps([[f.path for f in result.findings if f.kind == "distribution-outlier"], result.stats.files_reused,
                  sorted(m for m in ("numpy", "torch") if m in sys.modules)]))
"""


def test_a_quick_rescan_keeps_the_finding_without_loading_numpy(tmp_path: Path) -> None:
    """One peer changes after a deep scan: a quick rescan judges the folder again from the
    statistics the deep scan recorded, in plain Python (the quick path loads neither numpy nor torch)."""
    import json
    import subprocess
    import sys

    latents = healthy()
    latents[7] = DEFECTS["unscaled"](latents[7])
    folder = write_cache(tmp_path / "cache", latents)
    settle(folder)
    deep = scan([str(folder)], ScanOptions(deep=True, workers=1, state="auto"))
    assert [f.path for f in deep.findings if f.kind == KIND] == [str(folder / PLANTED)]
    (folder / "img_000010.npz").write_bytes((folder / "img_000010.npz").read_bytes())  # rewritten: a new stat
    settle(folder)
    out = subprocess.run(
        [sys.executable, "-c", _QUICK_RESCAN.format(cache=str(folder))], capture_output=True, text=True, check=True
    )
    paths, reused, heavy = json.loads(out.stdout)
    assert (paths, reused, heavy) == ([str(folder / PLANTED)], PEERS, [])


def test_the_numpy_and_plain_python_scores_agree() -> None:
    """A deep scan judges with numpy (already loaded), a quick rescan in plain Python: both must
    score a folder alike, to the bit, planted defects, a zero std and a tampered NaN included."""
    from cachedoctor.checks._peer_scores import peer_scores

    latents = healthy_set(3, 60, h=16, w=16)
    for i, defect in enumerate(("unscaled", "blank", "other-vae")):
        latents[5 * i] = DEFECTS[defect](latents[5 * i])
    rows = []
    for x in latents:
        flat = x.reshape(x.shape[0], -1).astype(np.float32)
        rows.append(np.concatenate([flat.mean(axis=1), flat.std(axis=1)]))
    table = np.stack(rows).astype("<f4")
    table[7, 1] = np.nan  # a tampered state row
    table[9, 4:] = 0.0  # an exactly flat latent: std 0
    raw = table.tobytes()
    fast = peer_scores(raw, len(rows), 4, use_numpy=True)
    plain = peer_scores(raw, len(rows), 4, use_numpy=False)
    for field, a, b in zip(fast._fields, fast, plain, strict=True):
        assert a == b, field  # the same floats: a finding's numbers do not depend on which path ran


def test_the_two_paths_give_the_same_floats_on_a_folder_of_flux_latents() -> None:
    """2,000 files of 16 channels: 32,000 standard deviations, enough that numpy's own log would
    differ from math.log by an ulp on some of them. The deep scan's parent judges with numpy,
    a quick rescan of the same statistics in plain Python: the scores must be the same floats."""
    from cachedoctor.checks._peer_scores import peer_scores

    rng = np.random.default_rng(16)
    n, channels = 2000, 16
    means = rng.standard_normal((n, channels))
    stds = np.exp(rng.standard_normal((n, channels)) * 0.3)
    raw = np.concatenate([means, stds], axis=1).astype("<f4").tobytes()
    assert peer_scores(raw, n, channels, use_numpy=True) == peer_scores(raw, n, channels, use_numpy=False)
