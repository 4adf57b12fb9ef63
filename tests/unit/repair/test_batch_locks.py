"""A batch of lossless rewrites never waits for a lock while it holds others: two repairs
that meet on a file cannot deadlock. Here another holder has the second file's lock and lets
it go only once the batch has recorded the first file: the batch must finish that file first."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import torch
from factories import save_pt, saved_on

from cachedoctor.repair.batch import Batcher, lossless_bytes
from cachedoctor.repair.model import Action, ActionKind, ItemResult, ItemState, Stat
from cachedoctor.repair.verify import problems_of
from cachedoctor.statedir import lock_path


def _tagged(path: Path) -> Action:
    with saved_on("cuda:0"):
        save_pt(path, torch.randn(4, 8, 8).to(torch.bfloat16))
    return Action(ActionKind.REWRITE_CPU, str(path), str(path.parent), ("device-tagged",), before=Stat.of(str(path)))


def test_a_busy_lock_first_finishes_what_the_batch_holds(tmp_path: Path) -> None:
    first, second = _tagged(tmp_path / "a.pt"), _tagged(tmp_path / "b.pt")
    blocker = os.open(lock_path(second.path), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(blocker, fcntl.LOCK_EX)  # another writer holds b.pt
    batches: list[list[tuple[str, ItemState]]] = []

    def record(results: list[ItemResult]) -> None:
        batches.append([(os.path.basename(r.path), r.state) for r in results])
        if len(batches) == 1:
            os.close(blocker)  # the other writer finishes once a.pt is recorded

    with Batcher("run", record, lossless_bytes, problems_of) as batcher:
        batcher.add(first)
        batcher.add(second)
    assert batches == [[("a.pt", ItemState.VERIFIED)], [("b.pt", ItemState.VERIFIED)]]
