"""A run named by its id, ``latest`` or a unique prefix; ambiguous and unknown names are one line."""

from __future__ import annotations

import pytest

from cachedoctor.errors import PathError
from cachedoctor.repair.run_ids import resolve_run, run_time

IDS = ["20261127-235959-aaaaaa", "20261128-063000-bbbbbb", "restore-20261128-070000-cccccc", "20261128-064500-dddddd"]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("20261128-063000-bbbbbb", "20261128-063000-bbbbbb"),  # whole
        ("latest", "restore-20261128-070000-cccccc"),  # newest by its time, the restore's own run included
        ("20261127", "20261127-235959-aaaaaa"),  # a prefix
        ("2026-11-27", "20261127-235959-aaaaaa"),  # typed with dashes
        ("20261128-0645", "20261128-064500-dddddd"),
        ("restore", "restore-20261128-070000-cccccc"),
    ],
)
def test_a_run_is_named_by_its_id_latest_or_a_unique_prefix(given: str, expected: str) -> None:
    assert resolve_run(given, IDS, "/cache") == expected


def test_latest_of_runs_without_a_restore() -> None:
    assert resolve_run("latest", IDS[:2] + IDS[3:], "/cache") == "20261128-064500-dddddd"


def test_an_ambiguous_prefix_lists_the_candidates_in_one_line() -> None:
    with pytest.raises(PathError) as caught:
        resolve_run("2026-11-28", IDS, "/cache")
    assert str(caught.value) == (
        "/cache: '2026-11-28' names 2 quarantine runs: 20261128-063000-bbbbbb, 20261128-064500-dddddd; "
        "give more of the id"
    )


def test_an_unknown_run_and_latest_of_none_are_one_line() -> None:
    with pytest.raises(PathError) as caught:
        resolve_run("2025", IDS, "/cache")
    assert str(caught.value) == "/cache: no quarantine run '2025' here or below; see `cachedoctor quarantine list`"
    with pytest.raises(PathError) as caught:
        resolve_run("latest", [], "/cache")
    assert str(caught.value) == "/cache: no quarantine run here or below, so none is the latest"


def test_run_time_reads_the_id() -> None:
    assert run_time("restore-20261128-070000-cccccc") == "2026-11-28 07:00:00"
    assert run_time("copied-by-hand") is None
