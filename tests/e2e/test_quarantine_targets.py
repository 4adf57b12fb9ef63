"""``quarantine list|restore|purge`` take what scan and repair take and find every run at or below
it (issue 15: ``quarantine list .`` from a project did not find the runs kept under its cache
roots). The runs are made by the quarantine itself (``Quarantine.move``), as repair makes them."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from cli_run import cli

from cachedoctor.repair.quarantine import Quarantine

RUN = "20260101-000000-aaaaaa"


def _moved(root: Path, name: str, run_id: str = RUN, data: bytes = b"old") -> Path:
    """``root/name`` holding ``data``, moved into ``run_id``'s quarantine of the cache root ``root``."""
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    Quarantine(str(root), run_id).move(str(path), ("orphan-entry",), "quarantine")
    return path


def test_list_from_a_project_finds_the_runs_of_every_cache_root_below(tmp_path: Path) -> None:
    _moved(tmp_path / "cache", "a.pt")
    _moved(tmp_path / "deep" / "er" / "cache", "vae/b.pt", run_id="20260101-000000-bbbbbb")
    code, out, err = cli("quarantine", "list", "--all", str(tmp_path))
    assert (code, err) == (0, "")
    assert out == (
        f"{tmp_path / 'cache'}:\n"
        f"  {RUN}: 1 file(s), 3 B\n"
        "    a.pt  [quarantine: orphan-entry]\n"
        f"{tmp_path / 'deep' / 'er' / 'cache'}:\n"
        "  20260101-000000-bbbbbb: 1 file(s), 3 B\n"
        "    vae/b.pt  [quarantine: orphan-entry]\n"
    )


def test_list_all_of_the_cache_root_itself_prints_as_before(tmp_path: Path) -> None:
    _moved(tmp_path, "a.pt")
    code, out, _ = cli("quarantine", "list", "--all", str(tmp_path))
    assert (code, out) == (0, f"{RUN}: 1 file(s), 3 B\n  a.pt  [quarantine: orphan-entry]\n")


def test_list_takes_a_file_and_several_paths(tmp_path: Path) -> None:
    _moved(tmp_path / "one", "a.pt")
    _moved(tmp_path / "two", "b.pt")
    (tmp_path / "one" / "c.pt").write_bytes(b"x")
    code, out, _ = cli("quarantine", "list", str(tmp_path / "one" / "c.pt"), str(tmp_path / "two"))
    assert code == 0 and [line for line in out.splitlines() if line.endswith(":")] == [
        f"{tmp_path / 'one'}:",
        f"{tmp_path / 'two'}:",
    ]


def test_list_does_not_search_hidden_folders_unless_named(tmp_path: Path) -> None:
    _moved(tmp_path / ".hidden" / "cache", "a.pt")
    (tmp_path / "loop").symlink_to(tmp_path)  # followed once, never round and round
    assert cli("quarantine", "list", str(tmp_path))[1] == f"no quarantine at or below {tmp_path}\n"
    assert f"{RUN}: 1 file(s)" in cli("quarantine", "list", "--all", str(tmp_path / ".hidden"))[1]


def test_list_and_restore_by_the_dataset_description(tmp_path: Path) -> None:
    config = tmp_path / "project" / "multidatabackend.json"
    config.parent.mkdir()
    config.write_text(
        json.dumps(
            [
                {"id": "img", "type": "local", "instance_data_dir": str(tmp_path / "data"), "cache_dir_vae": "/x"},
                {"id": "txt", "type": "local", "dataset_type": "text_embeds", "cache_dir": str(tmp_path / "text")},
            ]
        )
    )
    path = _moved(tmp_path / "text", "e-sdxl.pt")
    code, out, _ = cli("quarantine", "list", "--all", "--config", str(config))
    assert (code, out.splitlines()[:2]) == (0, [f"{tmp_path / 'text'}:", f"  {RUN}: 1 file(s), 3 B"])
    code, out, err = cli("quarantine", "restore", RUN, "--config", str(config), "--yes")
    assert (code, err, path.read_bytes()) == (0, "", b"old")


def test_list_of_a_simpletuner_checkout_finds_the_caches_its_config_names(tmp_path: Path) -> None:
    checkout = tmp_path / "SimpleTuner"
    (checkout / "config").mkdir(parents=True)
    text = {"id": "txt", "type": "local", "dataset_type": "text_embeds", "cache_dir": str(tmp_path / "elsewhere")}
    (checkout / "config" / "multidatabackend.json").write_text(json.dumps([text]))
    _moved(tmp_path / "elsewhere", "e-sdxl.pt")
    code, out, _ = cli("quarantine", "list", "--all", str(checkout))  # as `scan SimpleTuner` finds its config
    assert (code, out.splitlines()[:2]) == (0, [f"{tmp_path / 'elsewhere'}:", f"  {RUN}: 1 file(s), 3 B"])


def test_the_config_names_are_simpletuners() -> None:
    from cachedoctor.layouts.simpletuner import CONFIG_NAMES
    from cachedoctor.repair.quarantine_search import SIMPLETUNER_CONFIGS

    assert SIMPLETUNER_CONFIGS == CONFIG_NAMES


def test_list_by_a_manifest(tmp_path: Path) -> None:
    _moved(tmp_path / "cache", "a.pt")
    manifest = tmp_path / "items.jsonl"
    manifest.write_text(json.dumps({"source": "images/a.png", "cache": "cache/a.pt"}) + "\n")
    code, out, _ = cli("quarantine", "list", "--all", "--manifest", str(manifest))
    assert code == 0 and out.startswith(f"{tmp_path / 'cache'}:\n  {RUN}: 1 file(s)")


def test_restore_finds_the_run_below_the_paths(tmp_path: Path) -> None:
    path = _moved(tmp_path / "caches" / "kohya", "train/a_0064x0064_sdxl.npz")
    code, out, err = cli("quarantine", "restore", RUN, str(tmp_path), "--yes")
    assert (code, err, path.read_bytes()) == (0, "", b"old")
    assert out.startswith(f"restored 1 file(s) from {RUN} in 1 cache root(s)")


def test_one_run_across_two_roots_is_restored_in_both(tmp_path: Path) -> None:
    vae, text = _moved(tmp_path / "vae", "a.pt"), _moved(tmp_path / "text", "b.pt")
    code, out, _ = cli("quarantine", "restore", RUN, str(tmp_path), "--yes")
    assert (code, vae.read_bytes(), text.read_bytes()) == (0, b"old", b"old")
    assert f"from {RUN} in 2 cache root(s)" in out


def test_a_run_copied_along_with_its_cache_is_ambiguous(tmp_path: Path) -> None:
    path = _moved(tmp_path / "cache", "a.pt")
    shutil.copytree(tmp_path / "cache", tmp_path / "backup")
    code, out, err = cli("quarantine", "restore", RUN, str(tmp_path))
    assert (code, out) == (2, "") and not path.exists()
    assert err == (
        f"cachedoctor: error: {RUN}: is in 2 cache roots, and some were copied or moved from elsewhere: "
        f"{tmp_path / 'backup'}, {tmp_path / 'cache'}; name the one you mean: "
        f"`cachedoctor quarantine restore {RUN} ROOT`\n"
    )
    code, _, _ = cli("quarantine", "restore", RUN, str(tmp_path / "cache"), "--yes")
    assert (code, path.read_bytes(), (tmp_path / "backup" / "a.pt").exists()) == (0, b"old", False)


def test_purge_finds_the_run_below_the_paths(tmp_path: Path) -> None:
    _moved(tmp_path / "cache", "a.pt")
    code, out, _ = cli("quarantine", "purge", RUN, str(tmp_path), "--yes")
    assert (code, out) == (0, f"purged {RUN}: 3 B freed\n")
    assert os.listdir(tmp_path / "cache" / ".cachedoctor" / "quarantine") == []


def test_a_missing_path_is_one_line_and_exit_2_for_every_command(tmp_path: Path) -> None:
    for argv in (["list"], ["restore", RUN], ["purge", RUN, "--yes"]):
        code, out, err = cli("quarantine", *argv, str(tmp_path), str(tmp_path / "nope"))
        assert (code, out) == (2, "")
        assert (
            err
            == f"cachedoctor: error: {tmp_path / 'nope'}: no such file or folder; check the path (and that its disk is mounted)\n"
        )


def test_restore_names_a_run_for_replaced_files_only(tmp_path: Path) -> None:
    """A broken link is quarantined and nothing takes its place: restoring it replaces nothing,
    so the line names no run (it used to name one that was never made)."""
    import re

    cache = tmp_path / "cache"
    shutil.copytree(Path(__file__).resolve().parents[2] / "fixtures" / "caches" / "healthy" / "kohya", cache)
    (cache / "gone_0128x0128_sdxl.npz").symlink_to(tmp_path / "nowhere.npz")
    code, out, err = cli("repair", str(cache), "--yes", "--format", "json")
    assert code == 0, err
    run_id = json.loads(out)["result"]["run_id"]
    code, out, err = cli("quarantine", "restore", run_id, str(cache), "--yes")
    assert (code, err) == (0, "")
    assert out == f"restored 1 file(s) from {run_id} in 1 cache root(s)\n"
    assert os.readlink(cache / "gone_0128x0128_sdxl.npz") == str(tmp_path / "nowhere.npz")
    assert not re.search(r"restore-\d", "".join(os.listdir(cache / ".cachedoctor" / "quarantine")))


def _many(root: Path, run_id: str, n: int) -> None:
    """``n`` files in one run: a third partial-write, the rest corrupt-archive."""
    quarantine = Quarantine(str(root), run_id)
    for i in range(n):
        path = root / f"f{i:03}.pt"
        path.write_bytes(b"x" * 10)
        quarantine.move(str(path), ("partial-write",) if i % 3 == 0 else ("corrupt-archive",), "quarantine")


def test_list_is_a_summary_per_run_and_lists_files_on_request(tmp_path: Path) -> None:
    """204 quarantined files made 204 lines: the default is a line or two per run."""
    _many(tmp_path, "20261128-063000-bbbbbb", 204)
    _moved(tmp_path, "a.pt")
    code, out, err = cli("quarantine", "list", str(tmp_path))
    assert (code, err) == (0, "")
    assert out.splitlines()[:4] == [
        f"{RUN} (2026-01-01 00:00:00): 1 file(s), 3 B",
        "  why: orphan-entry 1",
        "20261128-063000-bbbbbb (2026-11-28 06:30:00): 204 file(s), 2.0 KB",
        "  why: corrupt-archive 136, partial-write 68",
    ]
    assert " ".join(" ".join(out.splitlines()[4:]).split()) == (
        "One line per file: `cachedoctor quarantine list RUN` (RUN: a run's id, a prefix of it, or latest), "
        "or --all for every run."
    )
    for flag in ("--all", "-v"):
        code, out, _ = cli("quarantine", "list", str(tmp_path), flag)
        assert code == 0 and len(out.splitlines()) == 2 + 205 and "  f203.pt  [quarantine: corrupt-archive]" in out


def test_list_of_one_run_by_latest_or_a_prefix(tmp_path: Path) -> None:
    _many(tmp_path, "20261128-063000-bbbbbb", 3)
    _moved(tmp_path, "a.pt")
    whole = "20261128-063000-bbbbbb: 3 file(s), 30 B\n  f000.pt  [quarantine: partial-write]\n"
    for name in ("latest", "20261128", "2026-11-28-06"):
        code, out, err = cli("quarantine", "list", name, str(tmp_path))
        assert (code, err) == (0, "") and out.startswith(whole), name
        assert len(out.splitlines()) == 4 and RUN not in out
    code, out, err = cli("quarantine", "list", "2026", str(tmp_path))
    assert (code, out) == (2, "")
    assert err == (
        f"cachedoctor: error: {tmp_path}: '2026' names 2 quarantine runs: {RUN}, 20261128-063000-bbbbbb; "
        "give more of the id\n"
    )
    code, out, err = cli("quarantine", "list", "2027", str(tmp_path))
    assert (code, out) == (2, "")
    assert err == (
        f"cachedoctor: error: {tmp_path}: no quarantine run '2027' here or below; see `cachedoctor quarantine list`\n"
    )


def test_restore_and_purge_take_latest_and_a_unique_prefix(tmp_path: Path) -> None:
    old = _moved(tmp_path, "old.pt")
    new = _moved(tmp_path, "new.pt", run_id="20261128-063000-bbbbbb")
    code, out, err = cli("quarantine", "restore", "latest", str(tmp_path), "--yes")
    assert (code, err) == (0, "") and out == "restored 1 file(s) from 20261128-063000-bbbbbb in 1 cache root(s)\n"
    assert new.exists() and not old.exists()
    code, out, err = cli("quarantine", "restore", "2026", str(tmp_path), "--yes")  # one run left: the prefix is unique
    assert (code, err) == (0, "") and out == f"restored 1 file(s) from {RUN} in 1 cache root(s)\n" and old.exists()
    _moved(tmp_path, "gone.pt", run_id="20261128-070000-cccccc")
    code, out, err = cli("quarantine", "purge", "20261128-07", str(tmp_path), "--yes")
    assert (code, err) == (0, "") and out == "purged 20261128-070000-cccccc: 3 B freed\n"
    code, out, err = cli("quarantine", "restore", "latest", str(tmp_path), "--yes")
    assert (code, out) == (2, "")
    assert err == f"cachedoctor: error: {tmp_path}: no quarantine run here or below, so none is the latest\n"


def test_a_file_without_a_record_is_counted_as_such_in_the_summary(tmp_path: Path) -> None:
    """A run from before records were written first (or copied by hand): its files still count."""
    _moved(tmp_path, "a.pt")
    (tmp_path / ".cachedoctor" / "quarantine" / RUN / "b.pt").write_bytes(b"old")
    code, out, _ = cli("quarantine", "list", str(tmp_path))
    assert code == 0 and out.splitlines()[1] == "  why: no record 1, orphan-entry 1"
    assert "  b.pt  [unknown: no record]" in cli("quarantine", "list", RUN, str(tmp_path))[1]
