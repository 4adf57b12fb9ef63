"""Scans and repairs split over ranks: which folders a shard owns (``interface.py``) and how the
ranks of one run under ``torchrun`` hand their parts to each other (``ranks.py``).

Nothing here imports the scan: the scan imports this to know what it owns, and passes its part
through :class:`~cachedoctor.sharding.ranks.RankGroup` as bytes.
"""
