"""``DatasetMatcher``: pairing found cache files with expected entries, one planted condition each."""

from __future__ import annotations

from pathlib import Path

from cachedoctor.checks import Found
from cachedoctor.findings import Finding, Fix, Severity
from cachedoctor.layouts.interface import DatasetPlan, Expected
from cachedoctor.scan.dataset import DatasetMatcher, judge_staleness

_SECOND = 10**9


def plan_with(folder: Path, *entries: Expected) -> DatasetPlan:
    plan = DatasetPlan("manifest", [str(folder)])
    for entry in entries:
        plan.add(entry)
    return plan


def kinds(findings: list[Finding]) -> list[tuple[str, str, str | None]]:
    return sorted((f.kind, f.path, f.source) for f in findings)


def test_an_expected_entry_not_found_is_missing(tmp_path: Path) -> None:
    path = str(tmp_path / "a.pt")
    matcher = DatasetMatcher(plan_with(tmp_path, Expected(path, "/data/a.png")))
    assert matcher.close_folder(str(tmp_path), {}, []) == []
    assert kinds(matcher.finish()) == [("missing-entry", path, "/data/a.png")]


def test_a_found_file_no_item_expects_is_an_orphan(tmp_path: Path) -> None:
    path = str(tmp_path / "old.pt")
    matcher = DatasetMatcher(plan_with(tmp_path))
    matcher.close_folder(str(tmp_path), {path: Found(path, 5 * _SECOND)}, [])
    assert kinds(matcher.finish()) == [("orphan-entry", path, None)]


def test_files_outside_the_owned_folders_or_not_entries_are_no_orphans(tmp_path: Path) -> None:
    other = tmp_path / "elsewhere"
    matcher = DatasetMatcher(plan_with(tmp_path / "cache"))
    matcher.close_folder(str(other), {str(other / "x.pt"): Found(str(other / "x.pt"), 1)}, [])
    notes = str(tmp_path / "cache" / "notes.json")
    matcher.close_folder(str(tmp_path / "cache"), {notes: Found(notes, 1)}, [])
    assert matcher.finish() == []


def test_an_entry_older_than_its_source_is_stale(tmp_path: Path) -> None:
    path = str(tmp_path / "a.pt")
    matcher = DatasetMatcher(plan_with(tmp_path, Expected(path, "/data/a.png", source_mtime_ns=100 * _SECOND)))
    matcher.close_folder(str(tmp_path), {path: Found(path, 10 * _SECOND)}, [])
    assert matcher.finish() == []  # staleness by mtime is judged over the whole scan (every shard's pairings)
    (finding,), note = judge_staleness(matcher.mtime_stale, matcher.paired)
    assert (finding.kind, finding.path, finding.details["by"], note) == ("stale-entry", path, "mtime", None)


def test_a_paired_healthy_entry_gives_nothing_and_its_file_findings_get_the_source(tmp_path: Path) -> None:
    path = str(tmp_path / "a.pt")
    matcher = DatasetMatcher(plan_with(tmp_path, Expected(path, "/data/a.png", source_mtime_ns=1 * _SECOND)))
    found_bad = Finding("non-finite", Severity.ERROR, path, "NaN", Fix.RECOMPUTE)
    (filled,) = matcher.close_folder(str(tmp_path), {path: Found(path, 10 * _SECOND)}, [found_bad])
    assert filled.source == "/data/a.png" and matcher.finish() == []


def test_a_folder_the_walk_never_reached_is_settled_with_a_stat(tmp_path: Path) -> None:
    there = tmp_path / "vae" / "there.pt"
    there.parent.mkdir()
    there.write_bytes(b"x")
    gone = str(tmp_path / "vae" / "gone.pt")
    matcher = DatasetMatcher(plan_with(tmp_path, Expected(str(there), "/d/1.png"), Expected(gone, "/d/2.png")))
    assert kinds(matcher.finish()) == [("missing-entry", gone, "/d/2.png")]


def test_many_mtime_stale_entries_look_like_a_copied_dataset_and_are_noted_not_reported(tmp_path: Path) -> None:
    entries = [Expected(str(tmp_path / f"{i}.pt"), f"/d/{i}.png", source_mtime_ns=100 * _SECOND) for i in range(25)]
    matcher = DatasetMatcher(plan_with(tmp_path, *entries))
    matcher.close_folder(str(tmp_path), {e.path: Found(e.path, 1 * _SECOND) for e in entries}, [])
    assert matcher.finish() == [] and (len(matcher.mtime_stale), matcher.paired) == (25, 25)
    findings, note = judge_staleness(matcher.mtime_stale, matcher.paired)
    assert findings == [] and note is not None and "looks copied without its file times" in note
