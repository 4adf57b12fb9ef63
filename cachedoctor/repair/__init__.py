"""``cachedoctor repair``: ``run`` drives one repair end to end (scan, plan, confirm, act,
rescan, judge); ``planner`` turns findings into actions, asking the layout what a recompute
makes; ``model`` is the vocabulary (actions, results); ``replace`` is the one place a cache file
is replaced (lock, quarantine, atomic write, read back); ``lossless`` and ``recompute`` make the
new bytes, loading and saving through ``torch_io``; ``pool`` runs recomputes on many devices;
``distributed`` runs under torchrun; ``journal``, ``quarantine`` and ``locks`` keep it
crash-safe (their names in ``.cachedoctor/``: ``statedir.py``); ``recover`` is ``cachedoctor recover``.
"""
