"""What a scan worker sends its parent: each chunk's outcomes, pickled.

Records pickle as a call of their class with their fields (``records.record``), and files of one
structure share one peer-tensors tuple (``worker._shared``), so a chunk carries that structure
once. Both are what made a quick scan's pickling a third of what it was (issue 31); these tests
hold the outcomes equal after the trip and the structure sent once.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import torch
from factories import save_pt

from cachedoctor.checks import PeerEntry, PeerTensor
from cachedoctor.findings import Finding, Fix, Severity
from cachedoctor.scan.outcome import Outcome
from cachedoctor.scan.worker import inspect_chunk


def _chunk(folder: Path, count: int) -> list[Outcome]:
    paths = []
    for index in range(count):
        path = folder / f"{index}.pt"
        save_pt(path, torch.full((4, 8, 8), float(index)))
        paths.append((str(path), False))
    return inspect_chunk(paths)


def test_a_chunk_of_one_structure_carries_its_tensors_once(tmp_path: Path) -> None:
    outcomes = _chunk(tmp_path, 3)
    blob = pickle.dumps(outcomes, protocol=pickle.HIGHEST_PROTOCOL)
    assert blob.count(b"float32") == 1  # the dtype of the one shared tensors tuple
    back = pickle.loads(blob)
    assert back == outcomes
    assert back[0].peer.tensors is back[2].peer.tensors  # rebuilt once in the parent too


def test_records_come_back_equal_with_every_field(tmp_path: Path) -> None:
    finding = Finding("nan-latent", Severity.ERROR, "x.pt", "2 NaN", Fix.RECOMPUTE, details={"count": 2})
    outcome = Outcome(
        "x.pt",
        7,
        "read",
        (finding,),
        "torch|tensor|",
        PeerEntry("x.pt", (PeerTensor("latents", "bfloat16", (4, 8, 8), "latents_8x8"),), (("latents", b"\0" * 8),)),
        "torch-zip",
        mtime_ns=5,
        shapes=(("latents", (4, 8, 8)),),
        values=(("crop", (1.0, 2.0)),),
        deep=True,
        xxh3="ab",
        transient=True,
        io_bytes=3,
        special="fifo",
        broken_link=True,
    )
    assert pickle.loads(pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)) == outcome
    single = PeerEntry("y.pt", ())
    assert pickle.loads(pickle.dumps(single)) == single
