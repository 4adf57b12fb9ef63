"""Incremental planning (``plan_folder``) against a state database a real scan wrote: what is
taken from the state, what is read again, and how deep."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from factories import latent, save_pt, settle

from cachedoctor.scan import ScanOptions, scan
from cachedoctor.scan.state.plan import plan_folder
from cachedoctor.scan.state.store import StateStore, default_path


def recorded(tmp_path: Path) -> tuple[Path, list[str]]:
    folder = tmp_path / "cache"
    files = [str(save_pt(folder / f"{n}.pt", latent(seed=i))) for i, n in enumerate("ab")]
    settle(folder)
    result = scan([str(folder)], ScanOptions(workers=1, state="auto"))
    assert result.errors == [] and result.stats.files_read == 2
    return folder, files


def store_of(folder: Path) -> StateStore:
    settle(folder)  # every change below is older than this store's clock: not racy
    store, note = StateStore.open(default_path(str(folder)), str(folder), explicit=True)
    assert store is not None and note is None
    return store


def test_unchanged_files_come_from_the_state(tmp_path: Path) -> None:
    folder, files = recorded(tmp_path)
    store = store_of(folder)
    plan, result = plan_folder(store, str(folder), files, deep=False, deep_changed=False, chosen=set(), whole=False)
    store.close()
    assert result is None and plan.to_read == [] and plan.gone == []
    assert [(o.path, o.status) for o in plan.reused] == [(files[0], "read"), (files[1], "read")]
    assert plan.digest is not None


def test_an_unchanged_folder_is_settled_by_its_recorded_result(tmp_path: Path) -> None:
    folder, files = recorded(tmp_path)
    store = store_of(folder)
    plan, result = plan_folder(store, str(folder), files, deep=False, deep_changed=False, chosen=set())
    store.close()
    assert result is not None and plan.reused == [] and plan.to_read == []


def test_a_file_whose_size_changed_is_read_again(tmp_path: Path) -> None:
    folder, files = recorded(tmp_path)
    save_pt(Path(files[1]), torch.zeros(4, 16, 16))
    store = store_of(folder)
    plan, result = plan_folder(store, str(folder), files, deep=False, deep_changed=False, chosen=set())
    store.close()
    assert result is None
    assert [o.path for o in plan.reused] == [files[0]] and plan.to_read == [(files[1], False)]


def test_a_file_whose_mtime_alone_changed_is_read_again(tmp_path: Path) -> None:
    folder, files = recorded(tmp_path)
    st = os.stat(files[0])
    os.utime(files[0], ns=(st.st_atime_ns, st.st_mtime_ns - 10**9))
    store = store_of(folder)
    plan, _ = plan_folder(store, str(folder), files, deep=False, deep_changed=False, chosen=set(), whole=False)
    store.close()
    assert plan.to_read == [(files[0], False)] and [o.path for o in plan.reused] == [files[1]]


def test_deep_reads_every_file_deep_even_when_unchanged(tmp_path: Path) -> None:
    folder, files = recorded(tmp_path)
    store = store_of(folder)
    plan, result = plan_folder(store, str(folder), files, deep=True, deep_changed=False, chosen=set())
    store.close()
    assert result is None and plan.reused == [] and plan.to_read == [(files[0], True), (files[1], True)]


def test_deep_changed_reads_only_the_changed_file_deep(tmp_path: Path) -> None:
    folder, files = recorded(tmp_path)
    save_pt(Path(files[0]), torch.zeros(2, 2))
    store = store_of(folder)
    plan, _ = plan_folder(store, str(folder), files, deep=False, deep_changed=True, chosen=set(), whole=False)
    store.close()
    assert plan.to_read == [(files[0], True)] and [o.path for o in plan.reused] == [files[1]]


def test_a_sampled_file_is_read_deep_and_a_vanished_one_is_gone(tmp_path: Path) -> None:
    folder, files = recorded(tmp_path)
    os.unlink(files[1])
    store = store_of(folder)
    plan, _ = plan_folder(store, str(folder), files[:1], deep=False, deep_changed=False, chosen={"a.pt"})
    store.close()
    assert plan.to_read == [(files[0], True)] and plan.gone == ["b.pt"]
