"""Edges a trainer user meets (issue 15): nothing to check is a failure, not a pass; a broken
symlink under a cache name is a finding that repair quarantines as the link itself; a state
database is left only where there are cache files; and the table's counts add up (every
file with findings accounted for, findings set to ``info`` counted, foreign files apart).

In-process through ``tests/cli_run.py``-style calls with an injected environment."""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

import pytest
from factories import peers, settle

from cachedoctor.cli.app import run
from cachedoctor.cli.environment import Environment

JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00"


def cli(*argv: str, cwd: Path | str = "/", environ: dict[str, str] | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(
        stdout=out,
        stderr=err,
        stdout_isatty=False,
        stderr_isatty=False,
        stdin_isatty=False,
        cwd=str(cwd),
        environ={"CACHEDOCTOR_WORKERS": "1", **(environ or {})},  # one reader, in-process: no pool to start
    )
    return run(list(argv), env), out.getvalue(), err.getvalue()


#: What the line adds when the folder held other files (images: a dataset whose cache is all gone?).
LAYOUT_HINT = (
    "; if its cache is gone, name the dataset's layout (--layout kohya, --kohya-config, --config) to see the "
    "missing entries"
)


def _empty_line(path: Path, extra: str = "", hint: str = "") -> str:
    return (
        f"cachedoctor: error: {path}: no cache files (.pt, .npz, .safetensors, ...) here{extra}; "
        f"check the path (and that its disk is mounted){hint}, or pass --allow-empty\n"
    )


def _jpegs(folder: Path, n: int = 3) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (folder / f"img{i}.jpg").write_bytes(JPEG)
    return folder


# --- nothing to check ------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_an_empty_folder_is_exit_2_in_one_line(tmp_path: Path, fmt: str) -> None:
    (tmp_path / "empty").mkdir()
    code, out, err = cli("scan", str(tmp_path / "empty"), "--format", fmt)
    assert (code, out, err) == (2, "", _empty_line(tmp_path / "empty"))
    assert not (tmp_path / "empty" / ".cachedoctor").exists()


def test_allow_empty_accepts_it(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    code, out, err = cli("scan", str(tmp_path / "empty"), "--allow-empty")
    assert (code, err) == (0, "")
    assert "No findings. There was no cache file to check." in out
    code, out, _ = cli("scan", str(tmp_path / "empty"), "--allow-empty", "--format", "json")
    summary = json.loads(out)["summary"]
    assert (code, summary["empty"], summary["exit_code"]) == (0, True, 0)
    assert not (tmp_path / "empty" / ".cachedoctor").exists()


def test_allow_empty_from_the_environment_and_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    empty = str(tmp_path / "empty")
    assert cli("scan", empty, cwd=tmp_path, environ={"CACHEDOCTOR_ALLOW_EMPTY": "1"})[0] == 0
    (tmp_path / "cachedoctor.toml").write_text("allow-empty = true\n")
    assert cli("scan", empty, cwd=tmp_path)[0] == 0
    code, out, _ = cli("settings", "show", cwd=tmp_path)
    [line] = [line for line in out.splitlines() if line.startswith("allow-empty")]
    assert line.split() == ["allow-empty", "true", f"({tmp_path / 'cachedoctor.toml'})"]
    # the environment says no: it wins over the file, as every setting does
    assert cli("scan", empty, cwd=tmp_path, environ={"CACHEDOCTOR_ALLOW_EMPTY": "false"})[0] == 2


def test_settings_show_lists_allow_empty(tmp_path: Path) -> None:
    code, out, _ = cli("settings", "show", cwd=tmp_path)
    [line] = [line for line in out.splitlines() if line.startswith("allow-empty")]
    assert line.split() == ["allow-empty", "false", "(default)"]
    code, out, _ = cli("settings", "show", "--allow-empty", cwd=tmp_path)
    [line] = [line for line in out.splitlines() if line.startswith("allow-empty")]
    assert line.split() == ["allow-empty", "true", "(command", "line)"]


def test_a_folder_of_images_only_is_nothing_to_check(tmp_path: Path) -> None:
    folder = _jpegs(tmp_path / "photos")
    code, out, err = cli("scan", str(folder))
    assert (code, out, err) == (2, "", _empty_line(folder, " (only 3 other files)", LAYOUT_HINT))
    code, out, _ = cli("scan", str(folder), "--allow-empty")
    assert code == 0 and "0 files read in 1 folder, 0 B, 3 skipped" in out
    code, out, _ = cli("scan", str(folder), "--allow-empty")  # again: no state was kept, the same line
    assert code == 0 and "0 files read in 1 folder, 0 B, 3 skipped" in out and "unchanged" not in out
    assert sorted(p.name for p in folder.iterdir()) == ["img0.jpg", "img1.jpg", "img2.jpg"]


def test_a_config_whose_caches_and_datasets_are_empty(tmp_path: Path) -> None:
    (tmp_path / "photos").mkdir()
    (tmp_path / "cache").mkdir()
    config = tmp_path / "multidatabackend.json"
    backend = {"id": "photos", "type": "local", "caption_strategy": "filename"}
    backend |= {"instance_data_dir": str(tmp_path / "photos"), "cache_dir_vae": str(tmp_path / "cache")}
    config.write_text(json.dumps([backend]))
    code, out, err = cli("scan", "--config", str(config))
    assert (code, out) == (2, "")
    assert err == _empty_line(tmp_path / "cache", ", and the dataset expects none")


def test_every_entry_missing_is_findings_not_nothing_to_check(tmp_path: Path) -> None:
    """A kohya image folder whose latents were never cached: the dataset expects them."""
    from fixtures.builders.datasets import image

    folder = tmp_path / "train" / "10_subject"
    folder.mkdir(parents=True)
    image(folder / "img.png", (64, 64), 1)
    code, out, err = cli("scan", str(tmp_path / "train"), "--layout", "kohya", "--format", "json")
    doc = json.loads(out)
    assert (code, err) == (1, "")
    assert [f["kind"] for f in doc["findings"]] == ["missing-entry"] and doc["summary"]["empty"] is False


@pytest.mark.parametrize("name", ["empty.pt", "tmpAbCd1234"])
def test_a_single_damaged_or_temp_file_is_something_to_check(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_bytes(b"")
    code, _, err = cli("scan", str(tmp_path))
    assert (code, err) == (1, "")


def test_repair_and_recover_refuse_nothing_to_check_too(tmp_path: Path) -> None:
    folder = _jpegs(tmp_path / "photos", n=1)
    for command in (["repair", "--yes"], ["repair", "--dry-run"], ["recover"]):
        code, out, err = cli(*command, str(folder))
        assert (code, out, err) == (2, "", _empty_line(folder, " (only 1 other file)", LAYOUT_HINT)), command
        code, _, err = cli(*command, str(folder), "--allow-empty")
        assert (code, err) == (0, ""), command
    assert sorted(p.name for p in folder.iterdir()) == ["img0.jpg"]


def test_the_library_gets_the_same_verdict(tmp_path: Path) -> None:
    from cachedoctor.api import audit
    from cachedoctor.settings import load

    (tmp_path / "empty").mkdir()
    report = audit([str(tmp_path / "empty")], load(cwd=str(tmp_path), environ={}))
    assert (int(report.exit_code), report.nothing_to_check) == (2, True)
    assert report.empty_problem()[0] == str(tmp_path / "empty")
    report = audit([str(tmp_path / "empty")], load(cwd=str(tmp_path), environ={}, allow_empty=True))
    assert (int(report.exit_code), report.nothing_to_check, report.scan.empty) == (0, False, True)


# --- broken links ----------------------------------------------------------------------------


def test_broken_links_in_every_output(tmp_path: Path) -> None:
    peers(tmp_path / "cache", n=2)
    (tmp_path / "cache" / "broken.pt").symlink_to("/nonexistent/latent.pt")
    code, out, _ = cli("scan", str(tmp_path / "cache"), "--format", "json")
    [finding] = json.loads(out)["findings"]
    assert code == 1
    assert (finding["kind"], finding["fix"], finding["details"]) == (
        "broken-link",
        "quarantine",
        {"target": "/nonexistent/latent.pt", "problem": "dangling"},
    )
    code, out, _ = cli("scan", str(tmp_path / "cache"), "--format", "github", cwd=tmp_path)
    assert code == 1 and out.startswith("::error file=cache/broken.pt,title=broken-link::symlink to /nonexistent/")
    code, out, _ = cli("scan", str(tmp_path / "cache"), "--format", "junit", cwd=tmp_path)
    assert code == 1 and 'name="broken-link"' in out and "[error] cache/broken.pt: symlink to" in out


def test_repair_quarantines_the_link_itself_and_restore_puts_it_back(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    peers(cache, n=2)
    target = tmp_path / "moved-away" / "latent.pt"  # the link's target: must never be created or touched
    (cache / "broken.pt").symlink_to(target)
    (cache / "loop.pt").symlink_to("loop.pt")
    code, out, err = cli("repair", str(cache), "--yes")
    assert (code, err) == (0, ""), out
    assert not os.path.lexists(cache / "broken.pt") and not os.path.lexists(cache / "loop.pt")
    [run_dir] = (cache / ".cachedoctor" / "quarantine").iterdir()
    assert os.readlink(run_dir / "broken.pt") == str(target)  # the link, moved as it was
    assert os.readlink(run_dir / "loop.pt") == "loop.pt"
    assert not (tmp_path / "moved-away").exists()
    code, out, _ = cli("quarantine", "list", "--all", str(cache))
    assert code == 0 and "broken.pt  [quarantine: broken-link]" in out
    code, _, err = cli("quarantine", "restore", run_dir.name, str(cache), "--yes")
    assert (code, err) == (0, "")
    assert os.readlink(cache / "broken.pt") == str(target)


def test_a_recompute_over_a_broken_link_keeps_the_link_in_the_quarantine(tmp_path: Path) -> None:
    """The write path a recompute takes (``replace_file``): the link it replaces is kept."""
    from cachedoctor.repair.model import Action, ActionKind, Stat
    from cachedoctor.repair.quarantine import Quarantine
    from cachedoctor.repair.replace import replace_file

    path = tmp_path / "img_0064x0064_sdxl.npz"
    path.symlink_to("/nonexistent/img.npz")
    action = Action(ActionKind.RECOMPUTE, str(path), str(tmp_path), ("broken-link",), before=Stat.of(str(path)))
    assert action.before is not None  # the link itself: repair acts on it
    kept = replace_file(str(path), b"new bytes", Quarantine(str(tmp_path), "run1"), action)
    assert path.read_bytes() == b"new bytes" and not path.is_symlink()
    assert kept is not None and os.readlink(kept) == "/nonexistent/img.npz"


# --- the state database ----------------------------------------------------------------------


def test_no_state_database_is_left_where_there_is_no_cache_file(tmp_path: Path) -> None:
    photos = _jpegs(tmp_path / "photos")
    assert cli("scan", str(photos), "--allow-empty")[0] == 0
    assert not (photos / ".cachedoctor").exists()
    peers(tmp_path / "cache", n=2)
    assert cli("scan", str(tmp_path / "cache"))[0] == 0
    assert (tmp_path / "cache" / ".cachedoctor" / "state.sqlite").is_file()  # a cache keeps its state


def test_a_cachedoctor_folder_with_other_contents_stays(tmp_path: Path) -> None:
    photos = _jpegs(tmp_path / "photos")
    (photos / ".cachedoctor" / "quarantine").mkdir(parents=True)  # repair's, from another day
    assert cli("scan", str(photos), "--allow-empty")[0] == 0
    assert sorted(p.name for p in (photos / ".cachedoctor").iterdir()) == ["quarantine"]


# --- the table's counts ----------------------------------------------------------------------


def test_worst_files_says_how_many_more(tmp_path: Path) -> None:
    for i in range(12):
        (tmp_path / f"e{i:02}.pt").write_bytes(b"")
    code, out, _ = cli("scan", str(tmp_path), cwd=str(tmp_path))  # short paths: one line per file
    worst = out.split("Worst files\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert code == 1 and len(worst) == 11
    assert worst[-1] == "  ... and 2 more file(s) (-v or --format json lists all)"


def test_the_totals_count_findings_set_to_info(tmp_path: Path) -> None:
    peers(tmp_path / "cache", n=2)
    (tmp_path / "cache" / "empty.pt").write_bytes(b"")
    (tmp_path / "cachedoctor.toml").write_text('[severity]\ncorrupt-archive = "info"\n')
    code, out, _ = cli("scan", str(tmp_path / "cache"), cwd=tmp_path)
    assert code == 0 and "0 error(s), 0 warning(s), 1 info in 1 file(s)." in out


def test_the_rescan_header_counts_cache_files_not_images(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    peers(folder, n=2)
    _jpegs(folder)
    settle(folder)
    assert cli("scan", str(folder))[0] == 0
    code, out, _ = cli("scan", str(folder))
    assert code == 0 and "2 files in 1 folder (2 unchanged since the last scan, 0 read)" in " ".join(out.split())
    assert "3 skipped" in out


def test_one_empty_target_among_others_is_named_and_fails(tmp_path: Path) -> None:
    """A gate given two caches, one on a disk that is not mounted, must not pass on the other."""
    healthy = Path(__file__).resolve().parents[2] / "fixtures" / "caches" / "healthy" / "kohya"
    empty = tmp_path / "unmounted"
    empty.mkdir()
    line = (
        f"cachedoctor: error: {empty}: no cache files (.pt, .npz, .safetensors, ...) here; check the path "
        "(and that its disk is mounted), or pass --allow-empty\n"
    )
    for command in (["scan"], ["repair", "--dry-run"]):
        code, out, err = cli(*command, str(healthy), str(empty), "--no-state")
        assert (code, out, err) == (2, "", line), command
    code, out, err = cli("scan", str(healthy), str(empty), "--no-state", "--allow-empty", "--format", "json")
    assert (code, err) == (0, "") and json.loads(out)["summary"]["unchecked"] == [str(empty)]
    code, out, err = cli("scan", str(healthy), str(healthy.parent / "onetrainer"), "--no-state", "--format", "json")
    assert code == 0 and json.loads(out)["summary"]["unchecked"] == []


def test_a_dangling_link_named_as_the_target_says_what_it_is(tmp_path: Path) -> None:
    link = tmp_path / "broken.pt"
    link.symlink_to(tmp_path / "gone.pt")
    code, out, err = cli("scan", str(link))
    assert (code, out) == (2, "")
    assert err == (
        f"cachedoctor: error: {link}: a symlink to {tmp_path / 'gone.pt'}, which does not exist; scan its folder "
        "to have it reported (broken-link) and quarantined by repair\n"
    )


@pytest.mark.parametrize("value", ["abc", "0", "512,abc", "512,768,1"])
def test_a_bad_resolution_stops_whatever_the_layout(tmp_path: Path, value: str) -> None:
    """It was checked only where the kohya layout read it: elsewhere a typo passed silently."""
    peers(tmp_path, 2)
    code, out, err = cli("scan", "--resolution", value, str(tmp_path))
    assert (code, out) == (2, "")
    assert err == "cachedoctor: error: --resolution: expected a size in pixels: 1024 or 1024,768 (width,height)\n"


def test_a_folder_of_a_fifo_only_says_it_held_one(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "a.pt")
    code, out, err = cli("scan", str(tmp_path))
    assert (code, out) == (2, "")
    assert err == (
        f"cachedoctor: error: {tmp_path}: no cache files (.pt, .npz, .safetensors, ...) here (skipped 1 special "
        f"file (FIFO): {tmp_path / 'a.pt'}, never opened); check the path (and that its disk is mounted), or pass "
        "--allow-empty\n"
    )


def test_a_kohya_dataset_whose_latents_are_all_gone_points_to_its_layout(tmp_path: Path) -> None:
    """Auto detection knows kohya by a latent beside its image: with none left, the line says
    how to see the missing entries, and with the layout named they are findings (exit 1)."""
    import shutil

    data = tmp_path / "kohya"
    shutil.copytree(Path(__file__).resolve().parents[2] / "fixtures" / "datasets" / "kohya", data)
    for npz in data.rglob("*.npz"):
        npz.unlink()
    train = data / "train"
    code, out, err = cli("scan", str(train))
    assert (code, out) == (2, "") and err.endswith(LAYOUT_HINT + ", or pass --allow-empty\n"), err
    report = json.loads(cli("scan", str(train), "--layout", "kohya", "--format", "json")[1])
    assert report["summary"]["exit_code"] == 1 and "missing-entry" in report["summary"]["by_kind"]


def test_everything_excluded_says_the_patterns_may_be_why(tmp_path: Path) -> None:
    peers(tmp_path / "sub", 2)
    code, out, err = cli("scan", str(tmp_path), "--exclude", "*", "--no-state")
    assert (code, out) == (2, "")
    assert err == (
        f"cachedoctor: error: {tmp_path}: no cache files (.pt, .npz, .safetensors, ...) here; check the path and the "
        "--exclude patterns (they may have left the files out), or pass --allow-empty\n"
    )


def test_github_notice_says_nothing_was_checked(tmp_path: Path) -> None:
    code, out, err = cli("scan", str(tmp_path), "--allow-empty", "--format", "github")
    assert (code, err) == (0, "")
    assert "::notice title=cachedoctor::no findings; nothing was checked in the targets (no cache file)" in out


def test_a_symlink_to_a_folder_already_given_is_scanned_once_with_a_note(tmp_path: Path) -> None:
    """``scan DIR LINK`` where LINK leads to DIR/sub: its files were scanned through DIR, so the
    run is judged by its findings (not "no cache files here", exit 2) and says why LINK added none."""
    peers(tmp_path / "dir" / "sub")
    (tmp_path / "dir" / "sub" / "tmpAbCdEfGh").write_bytes(b"half a latent")  # partial-write: exit 1
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "dir" / "sub")
    code, out, err = cli(
        "scan", str(tmp_path / "dir"), str(link), cwd=tmp_path, environ={"COLUMNS": "1000"}
    )  # a note per line
    assert (code, err) == (1, "")
    assert f"{link}: same files as {tmp_path / 'dir' / 'sub'}, scanned once" in out
    report = json.loads(cli("scan", str(tmp_path / "dir"), str(link), "--format", "json", cwd=tmp_path)[1])
    assert report["summary"]["files_seen"] == 5 and report["summary"]["unchecked"] == []
    assert report["summary"]["notes"] == [f"{link}: same files as {tmp_path / 'dir' / 'sub'}, scanned once"]


def test_a_file_through_a_symlinked_folder_already_given_is_read_once(tmp_path: Path) -> None:
    peers(tmp_path / "dir")
    (tmp_path / "link").symlink_to(tmp_path / "dir")
    report = json.loads(
        cli("scan", str(tmp_path / "dir"), str(tmp_path / "link" / "peer0.pt"), "--format", "json", cwd=tmp_path)[1]
    )
    assert report["summary"]["files_seen"] == 4
    link, real = tmp_path / "link" / "peer0.pt", tmp_path / "dir" / "peer0.pt"
    assert report["summary"]["notes"] == [f"{link}: same file as {real}, scanned once"]


def test_a_folder_given_before_the_folder_that_holds_it_is_merged_into_it(tmp_path: Path) -> None:
    peers(tmp_path / "dir" / "sub")
    (tmp_path / "link").symlink_to(tmp_path / "dir" / "sub")
    code, out, err = cli("scan", str(tmp_path / "link"), str(tmp_path / "dir"), "--format", "json", cwd=tmp_path)
    report = json.loads(out)
    assert (code, err) == (0, "") and report["summary"]["files_seen"] == 4
    assert report["summary"]["notes"] == [
        f"{tmp_path / 'link'}: same files as {tmp_path / 'dir' / 'sub'}, scanned once"
    ]


def test_a_kohya_folders_images_and_captions_are_dataset_files_not_skipped(tmp_path: Path) -> None:
    """kohya keeps its latents beside the images and their captions: those are the dataset, not
    cache files the scan left unread, so they are counted apart; "skipped" keeps its meaning."""
    data = tmp_path / "kohya"
    shutil.copytree(Path(__file__).resolve().parents[2] / "fixtures" / "datasets" / "kohya", data)
    folder = data / "train" / "10_subject"
    images = [p for p in folder.iterdir() if p.suffix in (".png", ".jpg")]
    captions = {image.with_suffix(".txt") for image in images}
    for caption in captions:
        caption.write_text("a photo")
    (folder / "notes.dat").write_bytes(b"not a cache, not the dataset")  # foreign: skipped
    report = json.loads(cli("scan", str(data / "train"), "--no-state", "--format", "json")[1])["summary"]
    dataset = len(images) + len(captions)
    assert (report["files_dataset"], report["files_skipped"]) == (dataset, 1)
    assert report["files_seen"] == report["files_read"] + report["files_skipped"] + report["files_dataset"]
    code, out, _ = cli("scan", str(data / "train"), "--no-state")
    assert f"1 skipped, {dataset} dataset files (images, captions), " in " ".join(out.split())
