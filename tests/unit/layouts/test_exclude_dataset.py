"""``exclude`` leaves a cache file out of the dataset comparison too: a file the walk never lists
must not come back as a ``missing-entry`` (which repair would then recompute over it)."""

from __future__ import annotations

import json
from pathlib import Path

from test_layouts import cli, tree  # noqa: F401  (tree: the shared fixture of the copied datasets)


def _missing(root: Path, *extra: str) -> list[str]:
    code, out, err = cli("scan", "kohya/train", "--layout", "kohya", "--no-state", "--format", "json", *extra, cwd=root)
    assert code in (0, 1), err
    doc = json.loads(out)
    return sorted(Path(f["path"]).name for f in doc["findings"] if f["kind"] == "missing-entry")


def test_an_excluded_entry_is_not_reported_missing(tree: Path) -> None:  # noqa: F811
    every = _missing(tree)
    assert "fig_0064x0064_sdxl.npz" in every
    without_fig = _missing(tree, "--exclude", "fig*")
    assert without_fig == [name for name in every if not name.startswith("fig")]


def test_an_excluded_folder_expects_nothing_inside(tree: Path) -> None:  # noqa: F811
    assert _missing(tree) != []
    # With its only image folder excluded the dataset expects nothing, and no cache file is left
    # either: nothing to check, which is exit 2 unless allowed (issue 15).
    assert _missing(tree, "--exclude", "10_subject", "--allow-empty") == []
    code, _, err = cli("scan", "kohya/train", "--layout", "kohya", "--no-state", "--exclude", "10_subject", cwd=tree)
    assert code == 2 and "no cache files" in err and "the dataset expects none" in err


def test_manifest_build_leaves_excluded_entries_out(tree: Path) -> None:  # noqa: F811
    def rows(*extra: str) -> list[str]:
        out = tree / "m.jsonl"
        code, _, err = cli("manifest", "build", "kohya/train", "--layout", "kohya", "-o", str(out), *extra, cwd=tree)
        assert code == 0, err
        return [json.loads(line)["cache"] for line in out.read_text().splitlines()]

    every = rows()
    assert any(Path(c).name.startswith("fig") for c in every)
    (tree / "cachedoctor.toml").write_text('exclude = ["fig*"]\n')
    try:
        assert rows() == [c for c in every if not Path(c).name.startswith("fig")]
    finally:
        (tree / "cachedoctor.toml").unlink()


def test_manifest_build_on_a_file_says_it_is_a_file(tree: Path) -> None:  # noqa: F811
    code, _, err = cli("manifest", "build", "kohya/train/10_subject/apple.png", "--layout", "kohya", cwd=tree)
    assert code == 2 and "is a file, not a folder; name the dataset folder" in err
