"""``plan_repair``: one finding (or pair of findings) per test, and the exact action it becomes."""

from __future__ import annotations

from pathlib import Path

import torch
from factories import latent, save_pt

from cachedoctor.findings import Finding, Fix, Severity
from cachedoctor.layouts.interface import Expected
from cachedoctor.repair.model import ActionKind, Stat
from cachedoctor.repair.planner import plan_repair, root_of

_FIX = {
    "device-tagged": Fix.REWRITE_CPU,
    "batch-leak": Fix.CLONE_STORAGE,
    "unsafe-pickle": Fix.QUARANTINE,
    "orphan-entry": Fix.QUARANTINE,
    "partial-write": Fix.QUARANTINE,
    "read-timeout": Fix.QUARANTINE,
    "non-finite": Fix.RECOMPUTE,
    "missing-entry": Fix.RECOMPUTE,
    "stale-entry": Fix.RECOMPUTE,
    "name-collision": Fix.NONE,
    "corrupt-archive": Fix.RECOMPUTE,
}


def finding(kind: str, path: Path, source: str | None = None) -> Finding:
    return Finding(kind, Severity.ERROR, str(path), "planted", _FIX[kind], source)


def plan(
    findings: list[Finding],
    root: Path,
    expected: dict[str, list[Expected]] | None = None,
    layout: str | None = None,
    modalities: frozenset[str] = frozenset(),
    only: set[str] | None = None,
    keep_blocked: bool = False,
):
    return plan_repair(findings, [str(root)], expected or {}, layout, set(modalities), only, keep_blocked)


def test_device_tagged_becomes_rewrite_cpu_with_the_planned_stat(tmp_path: Path) -> None:
    path = save_pt(tmp_path / "a.pt", latent())
    (action,) = plan([finding("device-tagged", path)], tmp_path).actions
    assert (action.kind, action.path, action.root, action.reasons) == (
        ActionKind.REWRITE_CPU,
        str(path),
        str(tmp_path),
        ("device-tagged",),
    )
    assert action.before == Stat.of(str(path)) and action.blocked is None and action.spec is None


def test_batch_leak_and_device_tag_on_one_file_clone_the_storage(tmp_path: Path) -> None:
    path = save_pt(tmp_path / "a.pt", latent())
    (action,) = plan([finding("device-tagged", path), finding("batch-leak", path)], tmp_path).actions
    assert action.kind is ActionKind.CLONE_STORAGE and action.reasons == ("batch-leak", "device-tagged")


def test_unsafe_pickle_outside_any_dataset_is_quarantined(tmp_path: Path) -> None:
    path = save_pt(tmp_path / "evil.pt", latent())
    (action,) = plan([finding("unsafe-pickle", path)], tmp_path).actions
    assert action.kind is ActionKind.QUARANTINE and action.blocked is None


def test_orphan_wins_over_a_recompute_finding(tmp_path: Path) -> None:
    path = save_pt(tmp_path / "gone.pt", latent())
    (action,) = plan([finding("orphan-entry", path), finding("non-finite", path)], tmp_path).actions
    assert action.kind is ActionKind.QUARANTINE and action.reasons == ("non-finite", "orphan-entry")


def test_own_temp_file_is_cleaned_up_and_a_vanished_one_is_not_planned(tmp_path: Path) -> None:
    temp = tmp_path / ".cachedoctor-a.pt-k3j4h5g6.tmp"
    temp.write_bytes(b"half")
    gone = tmp_path / ".cachedoctor-b.pt-aaaabbbb.tmp"
    (action,) = plan([finding("partial-write", temp), finding("partial-write", gone)], tmp_path).actions
    assert (action.kind, action.path, action.bytes) == (ActionKind.CLEANUP, str(temp), 4)


def test_name_collision_needs_a_person_and_changes_nothing(tmp_path: Path) -> None:
    path = save_pt(tmp_path / "a.pt", latent())
    result = plan([finding("name-collision", path)], tmp_path)
    assert result.actions == [] and result.needs_person == [str(path)]


def test_a_lossless_fix_for_a_file_gone_since_the_scan_is_not_planned(tmp_path: Path) -> None:
    assert plan([finding("device-tagged", tmp_path / "gone.pt")], tmp_path).actions == []


def test_only_keeps_the_named_kinds(tmp_path: Path) -> None:
    a, b = save_pt(tmp_path / "a.pt", latent()), save_pt(tmp_path / "b.pt", latent())
    result = plan([finding("device-tagged", a), finding("batch-leak", b)], tmp_path, only={"batch-leak"})
    assert [(x.kind, x.path) for x in result.actions] == [(ActionKind.CLONE_STORAGE, str(b))]


def test_a_dead_repairs_own_temp_file_is_cleaned_up_whatever_only_names(tmp_path: Path) -> None:
    temp = tmp_path / ".cachedoctor-a.pt-6593gkk4.tmp"
    temp.write_bytes(b"torn")
    trainer_temp = tmp_path / "a.pt.tmp"
    trainer_temp.write_bytes(b"torn")
    findings = [finding("partial-write", temp), finding("partial-write", trainer_temp)]
    result = plan(findings, tmp_path, only={"device-tagged"})
    assert [(x.kind, x.path) for x in result.actions] == [(ActionKind.CLEANUP, str(temp))]


def test_recompute_without_a_dataset_is_blocked_as_source_unknown(tmp_path: Path) -> None:
    path = save_pt(tmp_path / "a.pt", latent())
    (action,) = plan([finding("non-finite", path)], tmp_path, modalities=frozenset({"image"})).actions
    assert action.kind is ActionKind.RECOMPUTE and action.spec is None
    assert action.blocked == "its source is unknown: repair with the dataset (--config, --layout or --manifest)"
    assert plan([finding("non-finite", path)], tmp_path).counts() == {"blocked": 1}


def test_recompute_whose_source_is_gone_is_blocked(tmp_path: Path) -> None:
    path = save_pt(tmp_path / "a.pt", latent())
    source = tmp_path / "img.png"
    entry = Expected(str(path), str(source), latent_hw=(8, 8))
    (action,) = plan(
        [finding("non-finite", path)], tmp_path, {str(path): [entry]}, "simpletuner", frozenset({"image"})
    ).actions
    assert action.blocked == f"its source {source} is gone"


def test_missing_entry_with_source_and_encoder_is_a_runnable_recompute(tmp_path: Path) -> None:
    peer = save_pt(tmp_path / "peer.pt", latent())
    source = tmp_path / "img.png"
    source.write_bytes(b"png")
    path = tmp_path / "a.pt"
    entry = Expected(str(path), str(source), latent_hw=(8, 8))
    (action,) = plan(
        [finding("missing-entry", path)], tmp_path, {str(path): [entry]}, "simpletuner", frozenset({"image"})
    ).actions
    assert (action.kind, action.before, action.blocked) == (ActionKind.RECOMPUTE, None, None)
    assert action.spec is not None and (action.spec.source, action.spec.template) == (str(source), str(peer))


def test_recompute_without_the_encoder_for_its_role_is_blocked(tmp_path: Path) -> None:
    source = tmp_path / "img.png"
    source.write_bytes(b"png")
    path = tmp_path / "a.pt"
    entry = Expected(str(path), str(source), latent_hw=(8, 8))
    (action,) = plan(
        [finding("missing-entry", path)], tmp_path, {str(path): [entry]}, "simpletuner", frozenset({"text"})
    ).actions
    assert action.blocked == "needs an encoder for images (--encoder)" and action.spec is not None


def test_unsafe_pickle_the_dataset_expects_is_recomputed(tmp_path: Path) -> None:
    source = tmp_path / "img.png"
    source.write_bytes(b"png")
    path = save_pt(tmp_path / "a.pt", latent())
    entry = Expected(str(path), str(source), latent_hw=(8, 8))
    (action,) = plan(
        [finding("unsafe-pickle", path)], tmp_path, {str(path): [entry]}, "simpletuner", frozenset({"image"})
    ).actions
    assert action.kind is ActionKind.RECOMPUTE and action.blocked is None


def test_unsafe_pickle_that_cannot_be_recomputed_is_still_quarantined(tmp_path: Path) -> None:
    source = tmp_path / "img.png"
    source.write_bytes(b"png")
    path = save_pt(tmp_path / "a.pt", latent())
    entry = Expected(str(path), str(source), latent_hw=(8, 8))
    (action,) = plan([finding("unsafe-pickle", path)], tmp_path, {str(path): [entry]}, "simpletuner").actions
    assert (action.kind, action.spec, action.blocked) == (ActionKind.QUARANTINE, None, None)


def test_an_unreadable_entry_that_cannot_be_recomputed_is_quarantined_with_the_reason(tmp_path: Path) -> None:
    """Left in place, a file the trainer cannot open stops it (sd-scripts re-raises BadZipFile);
    moved out, the trainer re-caches the item."""
    path = tmp_path / "a.pt"
    path.write_bytes(b"PK\x03\x04 truncated")
    (action,) = plan([finding("corrupt-archive", path)], tmp_path, modalities=frozenset({"image"})).actions
    assert (action.kind, action.spec, action.blocked) == (ActionKind.QUARANTINE, None, None)
    assert action.note == "its source is unknown: repair with the dataset (--config, --layout or --manifest)"


def test_keep_blocked_leaves_an_unreadable_entry_but_never_an_unsafe_pickle(tmp_path: Path) -> None:
    broken = tmp_path / "a.pt"
    broken.write_bytes(b"PK\x03\x04 truncated")
    evil = save_pt(tmp_path / "b.pt", latent())
    actions = plan(
        [finding("corrupt-archive", broken), finding("unsafe-pickle", evil)], tmp_path, keep_blocked=True
    ).actions
    assert [(a.path, a.kind, a.blocked is not None) for a in actions] == [
        (str(broken), ActionKind.RECOMPUTE, True),
        (str(evil), ActionKind.QUARANTINE, False),
    ]


def test_a_stale_entry_the_layout_cannot_size_is_blocked_not_quarantined(tmp_path: Path) -> None:
    source = tmp_path / "img.png"
    source.write_bytes(b"png")
    path = save_pt(tmp_path / "a.pt", torch.zeros(4, 8, 8))
    entry = Expected(str(path), str(source))
    (action,) = plan(
        [finding("stale-entry", path)], tmp_path, {str(path): [entry]}, "simpletuner", frozenset({"image"})
    ).actions
    assert action.kind is ActionKind.RECOMPUTE
    assert action.blocked == "the layout does not record this entry's latent size (no bucket metadata for it)"


def test_root_of_picks_the_deepest_root_holding_the_path(tmp_path: Path) -> None:
    inner = tmp_path / "vae"
    inner.mkdir()
    assert root_of(str(inner / "x" / "a.pt"), [str(tmp_path), str(inner)]) == str(inner)
    assert root_of(str(tmp_path / "b.pt"), [str(inner)]) == str(tmp_path)
