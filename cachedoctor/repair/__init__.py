"""``cachedoctor repair``: planning (planner, specs), lossless fixes (lossless), the quarantine,
recompute (recompute, workers, distributed), the journal, and the per-file locks. ``runner``
ties them together; ``execute`` is the one place a cache file is replaced."""
