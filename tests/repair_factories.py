"""A small SimpleTuner dataset whose cache was really encoded, for repair tests: the builders
live in ``fixtures/builders/datasets.py`` (shared with the benchmarks); these names stay here."""

from __future__ import annotations

from fixtures.builders.datasets import POOL, Dataset, image, simpletuner, tree_bytes

__all__ = ["POOL", "Dataset", "image", "simpletuner", "tree_bytes"]
