"""What ``repair`` and ``recover`` print: the plan and what is left name their files (a few, all
with ``-v``, none with ``-q``), ``--format json`` gives one ``cachedoctor.repair/1`` document,
``recover`` counts only the files it read, and every line is wrapped to the terminal's width
without breaking a word or a path (issue 15, points 4, 5 and 9).

The planted cache: four healthy peers, one device-tagged file (a lossless rewrite) and one
truncated file (no dataset, so no recompute: quarantined in its place, or with
``--keep-blocked`` left where it is).
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from factories import latent, peers, pt_bytes, save_pt, saved_on, settle

from cachedoctor.cli.app import run
from cachedoctor.cli.environment import Environment
from cachedoctor.report.text import human_size

UNKNOWN = "its source is unknown: repair with the dataset (--config, --layout or --manifest)"


def cli(*argv: str, cwd: Path, columns: int = 200, stdout_isatty: bool = False) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(
        stdout=out,
        stderr=err,
        stdout_isatty=stdout_isatty,
        stderr_isatty=False,
        stdin_isatty=False,
        cwd=str(cwd),
        environ={},
        columns=columns,
    )
    return run(list(argv), env), out.getvalue(), err.getvalue()


def plant(root: Path, tagged: int = 1) -> None:
    peers(root)
    for i in range(tagged):
        with saved_on("cuda:0"):
            save_pt(root / (f"gpu{i}.pt" if tagged > 1 else "gpu.pt"), latent(seed=10 + i))
    (root / "torn.pt").write_bytes(pt_bytes(latent(seed=9))[:300])


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    plant(tmp_path / "cache")
    return tmp_path / "cache"


def section(out: str, first: str, last: str) -> list[str]:
    lines = out.splitlines()
    start = lines.index(first)
    return lines[start : lines.index(last, start) + 1]


def test_the_plan_names_each_file_and_its_kinds(cache: Path) -> None:
    before = {p.name: p.read_bytes() for p in cache.iterdir()}
    code, out, err = cli("repair", str(cache), "--dry-run", cwd=cache.parent)
    assert (code, err) == (1, "")
    size = human_size(os.path.getsize(cache / "gpu.pt"))
    assert section(out, "plan:", "dry run: nothing was changed") == [
        "plan:",
        "  quarantine     1 file(s)",
        f"    1 of them not recomputed ({UNKNOWN}): the trainer re-caches them",
        "      cache/torn.pt: corrupt-archive",
        f"  rewrite-cpu    1 file(s) ({size} to rewrite)",
        "    cache/gpu.pt: device-tagged",
        "dry run: nothing was changed",
    ]
    assert {p.name: p.read_bytes() for p in cache.iterdir()} == before


def test_a_path_outside_the_cwd_is_shown_whole(cache: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = cli("repair", str(cache), "--dry-run", cwd=elsewhere)[1]
    assert f"    {cache / 'gpu.pt'}: device-tagged" in out.splitlines()


@pytest.mark.parametrize(
    ("flag", "named"),
    [
        ("", ["gpu0.pt", "gpu1.pt", "gpu2.pt", "gpu3.pt", "gpu4.pt"]),
        ("-v", [f"gpu{i}.pt" for i in range(7)]),
        ("-q", []),
    ],
)
def test_five_files_per_action_all_with_verbose_none_with_quiet(tmp_path: Path, flag: str, named: list[str]) -> None:
    plant(tmp_path, tagged=7)
    code, out, _ = cli("repair", str(tmp_path), "--dry-run", *([flag] if flag else []), cwd=tmp_path)
    assert code == 1 and "  rewrite-cpu    7 file(s) (" in out
    assert [line.split(":")[0].strip() for line in out.splitlines() if ": device-tagged" in line] == named
    assert ("    ... and 2 more (-v lists all)" in out.splitlines()) is (flag == "")
    assert ("torn.pt" in out) is (flag != "-q")


@pytest.mark.parametrize("flags", [[], ["-q"]], ids=["default", "-q keeps what is left: it is the result"])
def test_not_clean_lists_what_is_left_and_why(cache: Path, flags: list[str]) -> None:
    code, out, err = cli("repair", str(cache), "--yes", "--keep-blocked", *flags, cwd=cache.parent)
    assert (code, err) == (1, "")
    assert "  cannot fix     1 file(s): " + UNKNOWN in out.splitlines()
    assert ("    cache/torn.pt: corrupt-archive" in out.splitlines()[:-4]) is not flags  # the plan's list: not with -q
    assert section(out, "not clean: 1 file(s) still need attention:", out.splitlines()[-1]) == [
        "not clean: 1 file(s) still need attention:",
        f"  cannot fix: {UNKNOWN}",
        "    cache/torn.pt: corrupt-archive",
        "next: give repair what each file that it cannot fix lacks (the reason says it), "
        "then run the same command again",
    ]


def test_a_clean_run_says_so_and_how_to_undo_it(cache: Path) -> None:
    code, out, err = cli("repair", str(cache), "--yes", cwd=cache.parent)
    assert (code, err) == (0, "") and not (cache / "torn.pt").exists()
    (run_id,) = (p.name for p in (cache / ".cachedoctor" / "quarantine").iterdir())
    assert out.splitlines()[-5:] == [
        "done: 2 verified, 0 skipped, 0 blocked, 0 failed",
        f"quarantine: {cache / '.cachedoctor' / 'quarantine' / run_id}",
        f"undo: cachedoctor quarantine restore {run_id} {cache}",
        "before -> after: corrupt-archive 1 -> 0, device-tagged 1 -> 0",
        "repaired: the rescan is clean of what was repaired",
    ]


# --- --format json ---------------------------------------------------------------------------

STR, INT, BOOL, NULL = str, int, bool, type(None)


class MapOf:
    """A JSON object whose keys vary (``kind -> n``); every value has ``shape``."""

    def __init__(self, shape: Any) -> None:
        self.shape = shape


PAIR = {"before": INT, "after": INT}
DAMAGED = {"path": STR, "kind": STR, "message": STR}
SHAPE: dict[str, Any] = {
    "schema": STR,
    "tool": {"name": STR, "version": STR},
    "command": STR,
    "dry_run": BOOL,
    "targets": [STR],
    "layout": (STR, NULL),
    "notes": [STR],
    "resumed_run": (STR, NULL),
    "scan": ({"deep": BOOL, "files_read": INT, "findings": INT, "files_with_findings": INT}, NULL),
    "survey": (
        {
            "temp_files": [{"path": STR, "size": INT}],
            "read_deep": [{"written": STR, "files": INT, "damaged_files": INT, "damaged": [DAMAGED]}],
            "known_damaged": [DAMAGED],
            "held_locks": [STR],
            "interrupted": [
                {
                    "root": STR,
                    "run_id": STR,
                    "finished": INT,
                    "unfinished": INT,
                    "encoders": [STR],
                    "scope": ({"only": ([STR], NULL), "keep_blocked": BOOL}, NULL),
                }
            ],
        },
        NULL,
    ),
    "plan": (
        {
            "actions": [
                {
                    "path": STR,
                    "action": STR,
                    "kinds": [STR],
                    "source": (STR, NULL),
                    "bytes": INT,
                    "blocked": (STR, NULL),
                    "not_recomputed": (STR, NULL),
                }
            ],
            "needs_person": [{"path": STR, "kinds": [STR], "reason": STR}],
            "counts": MapOf(INT),
        },
        NULL,
    ),
    "result": (
        {
            "run_id": (STR, NULL),
            "files": [{"path": STR, "action": STR, "state": STR, "message": STR, "quarantined": (STR, NULL)}],
            "counts": {"verified": INT, "skipped": INT, "blocked": INT, "failed": INT},
            "problems": [STR],
            "quarantine": [STR],
            "undo": (STR, NULL),
            "before_after": (MapOf(PAIR), NULL),
            "refused": [{"path": STR, "message": STR}],
            "not_judged": [{"path": STR, "message": STR}],
            "worse": MapOf(PAIR),
            "changed_by_others": [STR],
            "still_broken": [{"path": STR, "kinds": [STR], "state": STR, "message": STR}],
            "next": (STR, NULL),
        },
        NULL,
    ),
    "clean": BOOL,
    "exit_code": INT,
}


def misfits(value: Any, shape: Any, where: str = "$") -> list[str]:
    """Where ``value`` departs from ``shape`` (empty: it fits; objects need exactly these keys)."""
    if isinstance(shape, tuple):
        fits = [misfits(value, s, where) for s in shape]
        return [] if any(not f for f in fits) else min(fits, key=len)
    if isinstance(shape, MapOf):
        if not isinstance(value, dict):
            return [f"{where}: not an object"]
        return [m for k, v in value.items() for m in misfits(v, shape.shape, f"{where}.{k}")]
    if isinstance(shape, dict):
        if not isinstance(value, dict) or set(value) != set(shape):
            return [f"{where}: keys {sorted(value) if isinstance(value, dict) else value!r}, not {sorted(shape)}"]
        return [m for k in shape for m in misfits(value[k], shape[k], f"{where}.{k}")]
    if isinstance(shape, list):
        if not isinstance(value, list):
            return [f"{where}: not an array"]
        return [m for i, v in enumerate(value) for m in misfits(v, shape[0], f"{where}[{i}]")]
    ok = isinstance(value, shape) and not (shape is INT and isinstance(value, bool))
    return [] if ok else [f"{where}: {value!r} is not {shape.__name__}"]


def test_the_json_document_has_the_documented_shape_and_absolute_paths(cache: Path) -> None:
    code, out, err = cli("repair", str(cache), "--yes", "--keep-blocked", "--format", "json", cwd=cache.parent)
    doc = json.loads(out)  # stdout holds the document and nothing else
    assert (code, err) == (1, "") and misfits(doc, SHAPE) == []
    assert (doc["schema"], doc["command"], doc["dry_run"], doc["exit_code"], doc["clean"]) == (
        "cachedoctor.repair/1",
        "repair",
        False,
        1,
        False,
    )
    assert doc["targets"] == [str(cache)] and doc["survey"] is None
    actions = [(a["path"], a["action"], a["kinds"], a["blocked"], a["not_recomputed"]) for a in doc["plan"]["actions"]]
    assert actions == [
        (str(cache / "gpu.pt"), "rewrite-cpu", ["device-tagged"], None, None),
        (str(cache / "torn.pt"), "recompute", ["corrupt-archive"], UNKNOWN, None),
    ]
    result = doc["result"]
    assert [(f["path"], f["state"]) for f in result["files"]] == [
        (str(cache / "torn.pt"), "blocked"),
        (str(cache / "gpu.pt"), "verified"),
    ]
    assert result["counts"] == {"verified": 1, "skipped": 0, "blocked": 1, "failed": 0}
    run_id = result["run_id"]
    assert result["quarantine"] == [str(cache / ".cachedoctor" / "quarantine" / run_id)]  # the old gpu.pt
    assert result["undo"] == f"cachedoctor quarantine restore {run_id} {cache}"
    assert result["still_broken"] == [
        {"path": str(cache / "torn.pt"), "kinds": ["corrupt-archive"], "state": "blocked", "message": UNKNOWN}
    ]
    assert result["before_after"] == {
        "corrupt-archive": {"before": 1, "after": 1},
        "device-tagged": {"before": 1, "after": 0},
    }
    assert result["next"] == (
        "give repair what each file that it cannot fix lacks (the reason says it), then run the same command again"
    )


def test_a_json_dry_run_plans_and_changes_nothing(cache: Path) -> None:
    before = {p.name: p.read_bytes() for p in cache.iterdir()}
    code, out, err = cli("repair", str(cache), "--dry-run", "--format", "json", cwd=cache.parent)
    doc = json.loads(out)
    assert (code, err) == (1, "") and misfits(doc, SHAPE) == []
    assert (
        doc["dry_run"] is True
        and doc["result"] is None
        and doc["plan"]["counts"] == {"quarantine": 1, "rewrite-cpu": 1}
    )
    assert {p.name: p.read_bytes() for p in cache.iterdir()} == before


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["repair", "--format", "json"], "--format json never asks before changing files: add --yes to repair"),
        (["recover", "--apply", "--format", "json"], "--format json never asks before changing files: add --yes"),
        (["repair", "--dry-run", "--output", "plan.json"], "--output writes the JSON document; add --format json"),
    ],
)
def test_json_without_consent_stops_before_any_work(cache: Path, argv: list[str], says: str) -> None:
    before = {p.name: p.read_bytes() for p in cache.iterdir()}
    code, out, err = cli(*argv, str(cache), cwd=cache.parent)
    assert (code, out) == (2, "") and err.startswith("cachedoctor: error: ") and says in err
    assert len(err.splitlines()) == 1
    assert {p.name: p.read_bytes() for p in cache.iterdir()} == before


@pytest.mark.parametrize("terminal", [False, True])
def test_output_writes_the_document_to_a_file(cache: Path, tmp_path: Path, terminal: bool) -> None:
    target = tmp_path / "plan.json"
    code, out, err = cli(
        "repair",
        str(cache),
        "--dry-run",
        "--format",
        "json",
        "--output",
        str(target),
        cwd=tmp_path,
        stdout_isatty=terminal,
    )
    assert (code, err) == (1, "") and json.loads(target.read_text())["plan"]["counts"] == {
        "quarantine": 1,
        "rewrite-cpu": 1,
    }
    assert ("    cache/gpu.pt: device-tagged" in out.splitlines()) is terminal  # a person watching gets the text


# --- recover ---------------------------------------------------------------------------------


def test_recover_counts_only_the_files_it_read(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    peers(root)
    (root / "old.pt").write_bytes(pt_bytes(latent(seed=8))[:300])  # damaged before the scan
    settle(root)
    assert cli("scan", str(root), cwd=tmp_path)[0] == 1  # the state database records it
    (root / "new.pt").write_bytes(pt_bytes(latent(seed=9))[:300])  # written since, torn
    save_pt(root / "whole.pt", latent(seed=10))  # written since, whole
    code, out, err = cli("recover", str(root), cwd=tmp_path)
    assert (code, err) == (1, "")
    lines = out.splitlines()
    assert lines[1:5] == [
        "written since the last scan (its state database): 2 file(s) read deep, 1 of them damaged:",
        "  cache/new.pt: corrupt-archive: no zip end record: the archive is truncated (failed finding central directory)",
        "recorded as damaged by the last scan (unchanged since, not read again): 1 file(s)",
        "  cache/old.pt: corrupt-archive: no zip end record: the archive is truncated (failed finding central directory)",
    ]


def test_recover_json_survey(tmp_path: Path) -> None:
    peers(tmp_path)
    (tmp_path / "tmpAbCdEfGh").write_bytes(b"half")  # a SimpleTuner temp file: its folder was being written
    code, out, err = cli("recover", str(tmp_path), "--format", "json", cwd=tmp_path)
    doc = json.loads(out)
    assert (code, err) == (1, "") and misfits(doc, SHAPE) == []
    assert doc["command"] == "recover" and doc["plan"] is None and doc["result"] is None
    assert doc["survey"]["temp_files"] == [{"path": str(tmp_path / "tmpAbCdEfGh"), "size": 4}]
    assert doc["survey"]["read_deep"] == [
        {"written": "around the crash (beside a temp file)", "files": 4, "damaged_files": 0, "damaged": []}
    ]


# --- wrapping --------------------------------------------------------------------------------


def test_every_line_fits_the_terminal_and_no_word_or_path_is_broken(tmp_path: Path) -> None:
    folder = tmp_path / "my cache"  # a path with a space stays on one line
    plant(folder)
    wide = cli("repair", str(folder), "--dry-run", cwd=tmp_path, columns=400)[1]
    narrow = cli("repair", str(folder), "--dry-run", cwd=tmp_path, columns=40)[1]
    assert narrow != wide and narrow.split() == wide.split()  # the same words, only the breaks moved
    assert "      my cache/torn.pt: corrupt-archive" in narrow.splitlines()
    applied = cli("repair", str(folder), "--yes", "--keep-blocked", cwd=tmp_path, columns=40)[1]
    assert "not clean: 1 file(s) still need" in applied
    for line in narrow.splitlines() + applied.splitlines():
        piece = line.strip().replace("my cache", "my_cache")
        if len(line) > 40 and not piece.startswith("cachedoctor quarantine restore "):  # a command stays whole
            assert " " not in piece, line  # longer only as one unbreakable path


def test_each_layout_line_of_a_mixed_tree_is_wrapped_on_its_own() -> None:
    from cachedoctor.report.repair_lines import Lines

    out = io.StringIO()
    Lines(Environment(stdout=out, columns=40, environ={})).say(
        "layout: kohya for /data/a (auto: its npz names)\nlayout: none for the rest of /data (auto: nothing)"
    )
    assert out.getvalue().splitlines() == [
        "layout: kohya for /data/a (auto: its npz",
        "  names)",
        "layout: none for the rest of /data",
        "  (auto: nothing)",
    ]


def test_an_output_that_cannot_be_written_stops_before_anything_changes(cache: Path, tmp_path: Path) -> None:
    """Else the repair runs, the document is lost, and nobody learns the run id to undo it."""
    before = {p.name: p.read_bytes() for p in cache.iterdir()}
    target = tmp_path / "missing" / "o.json"
    code, out, err = cli("repair", str(cache), "--yes", "--format", "json", "--output", str(target), cwd=tmp_path)
    assert (code, out) == (2, "")
    assert err == (
        f"cachedoctor: error: {target}: cannot write the report there (No such file or directory); "
        "choose another --output\n"
    )
    assert {p.name: p.read_bytes() for p in cache.iterdir()} == before
    assert not (cache / ".cachedoctor").exists()
