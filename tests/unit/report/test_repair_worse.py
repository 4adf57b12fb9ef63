"""The repair verdict: a finding kind with more files after the repair than before is reported
and makes the run not clean (a guard behind the check of every write)."""

from __future__ import annotations

from pathlib import Path

from factories import peers

from cachedoctor.exit_status import ExitStatus
from cachedoctor.repair.model import RepairPlan
from cachedoctor.repair.run import RepairOutcome
from cachedoctor.report.repair_text import RepairReport
from cachedoctor.scan import ScanOptions, scan


def test_a_kind_with_more_files_after_the_repair_is_worse(tmp_path: Path) -> None:
    files = peers(tmp_path)
    before = scan([str(tmp_path)], ScanOptions(workers=1, deep=True))
    files[1].write_bytes(files[1].read_bytes()[:300])  # damage that appears during the "repair"
    after = scan([str(tmp_path)], ScanOptions(workers=1, deep=True))
    report = RepairReport(RepairOutcome(before, RepairPlan(), None, after=after))
    assert report.worse == {"corrupt-archive": (0, 1)}
    assert report.exit_code is ExitStatus.FINDINGS


def test_the_same_findings_are_not_worse(tmp_path: Path) -> None:
    peers(tmp_path)
    result = scan([str(tmp_path)], ScanOptions(workers=1, deep=True))
    report = RepairReport(RepairOutcome(result, RepairPlan(), None, after=result))
    assert report.worse == {} and report.exit_code is ExitStatus.CLEAN


def test_a_finding_left_beside_a_dropped_index_keeps_the_run_from_being_clean(tmp_path: Path) -> None:
    """A drop that found nothing to do (every item read when it looked) leaves the shard's finding
    (a shape the bucket does not want): the shard is named with it, and the run is not clean."""
    from cachedoctor.repair.model import Action, ActionKind, ItemResult, ItemState, Stat
    from cachedoctor.repair.run import still_broken

    files = peers(tmp_path)
    files[1].write_bytes(files[1].read_bytes()[:300])  # stands in for the shard the index lists
    index = tmp_path / "metadata.db"
    index.write_bytes(b"")
    result = scan([str(tmp_path)], ScanOptions(workers=1, deep=True))
    action = Action(ActionKind.DROP_ITEMS, str(index), str(tmp_path), ("corrupt-archive",), before=Stat.of(str(index)))
    skipped = ItemResult(str(index), ActionKind.DROP_ITEMS, ItemState.SKIPPED, "every item reads now; nothing dropped")
    outcome = RepairOutcome(result, RepairPlan([action]), None, after=result, results=[skipped])
    report = RepairReport(outcome, broken=tuple(still_broken(outcome)))
    [left] = report.left()
    assert (left.path, left.kinds, left.state) == (str(files[1]), ("corrupt-archive",), "found-again")
    assert report.exit_code is ExitStatus.FINDINGS
