"""Adversarial review of issue 30 (sharded scans), in-process: what a split scan must report as
one process does, with the engine's own parts (``scan_part``) joined by ``merge``.

Shards own folders by a hash of their path, so which shard owns which folder depends on
``tmp_path``: each test picks a shard count that parts the folders it needs parted.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from cli_run import cli
from factories import latent, save_pt, settle

from cachedoctor.errors import UsageError
from cachedoctor.scan.engine import scan, scan_part
from cachedoctor.scan.options import ScanOptions
from cachedoctor.scan.state.sample import Sample
from cachedoctor.sharding.interface import Shard, shard_of


def without_time(doc: dict) -> dict:
    return {**doc, "summary": {k: v for k, v in doc["summary"].items() if k != "elapsed_s"}}


def parted(folders: list[str]) -> int:
    """A shard count that gives each of ``folders`` a shard of its own."""
    return next(n for n in range(len(folders), 256) if len({shard_of(f, n) for f in folders}) == len(folders))


def test_a_sample_split_over_shards_is_refused(tmp_path: Path) -> None:
    """``--sample 1/2`` reads deep the half of the whole cache's files due first: a shard sees
    only its own (split so that each of three one-file folders is a shard's, each took half of
    its one file, rounded up: 3 deep reads where one scan reads 2). The ranking needs the whole
    cache, so a split scan with a sample is refused, not answered differently."""
    root = tmp_path / "cache"
    for i in range(3):
        save_pt(root / f"f{i}" / "x.pt", latent(seed=i))
    settle(root)
    n = parted([str(root / f"f{i}") for i in range(3)])
    options = ScanOptions(workers=1, state=str(tmp_path / "state.sqlite"), sample=Sample.parse("1/2"))
    assert scan([str(root)], options).stats.files_deep == 2
    with pytest.raises(UsageError, match="--sample chooses its share among the whole cache's files"):
        scan_part([str(root)], replace(options, shard=Shard(0, n)))
    code, out, err = cli("scan", "--sample", "1/2", "--shard", f"0/{n}", str(root))
    assert (code, out) == (2, "") and err.count("\n") == 1 and "--sample chooses its share" in err
