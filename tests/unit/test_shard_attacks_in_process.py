"""Adversarial review of issue 30 (sharded scans), in-process: what a split scan must report as
one process does, with the engine's own parts (``scan_part``) joined by ``merge``.

Shards own folders by a hash of their path, so which shard owns which folder depends on
``tmp_path``: each test picks a shard count that parts the folders it needs parted.
"""

from __future__ import annotations

from pathlib import Path

from factories import latent, save_pt, settle

from cachedoctor.report import ScanReport
from cachedoctor.scan.engine import scan, scan_part
from cachedoctor.scan.merge import merge
from cachedoctor.scan.options import ScanOptions
from cachedoctor.scan.state.sample import Sample
from cachedoctor.sharding.interface import Shard, shard_of


def without_time(doc: dict) -> dict:
    return {**doc, "summary": {k: v for k, v in doc["summary"].items() if k != "elapsed_s"}}


def parted(folders: list[str]) -> int:
    """A shard count that gives each of ``folders`` a shard of its own."""
    return next(n for n in range(len(folders), 256) if len({shard_of(f, n) for f in folders}) == len(folders))


def test_a_sample_split_over_shards_reads_as_many_files_deep_as_one_scan(tmp_path: Path) -> None:
    """``--sample 1/2`` of three healthy latents, one a folder: one scan reads ceil(3/2) = 2 of
    them deep. Split so that each folder is a shard's, each shard takes half of its own one file,
    rounded up: 3 deep reads, and the report's ``files_deep`` says 3 where one scan says 2 (with
    a defect among the files, the split scan finds what the single one did not read)."""
    root = tmp_path / "cache"
    for i in range(3):
        save_pt(root / f"f{i}" / "x.pt", latent(seed=i))
    settle(root)
    n = parted([str(root / f"f{i}") for i in range(3)])

    def options(shard: Shard | None = None) -> ScanOptions:
        return ScanOptions(workers=1, state=str(tmp_path / "state.sqlite"), sample=Sample.parse("1/2"), shard=shard)

    whole = without_time(ScanReport(scan([str(root)], options())).document())
    (tmp_path / "state.sqlite").unlink()  # each run starts without a record, as the first does
    parts = [scan_part([str(root)], options(Shard(k, n))) for k in range(n)]
    split = without_time(ScanReport(merge(parts, options())).document())
    assert whole["summary"]["files_deep"] == 2
    assert split["summary"]["files_deep"] == whole["summary"]["files_deep"]
    assert split == whole
