"""Trainers' samplers, modelled on bucket counts: which rank takes how many steps per epoch.

``registry.py``'s :data:`~cachedoctor.layouts.samplers.registry.SAMPLERS` maps a trainer name to
its model; :func:`~cachedoctor.layouts.samplers.registry.sampler_for` picks the model for a
layout, and falls back to ``DEFAULT`` (Sana's rules: shard the items, then bucket each rank's
share, the common pattern and the one that hangs) for a trainer it cannot name. The models are
in ``interface.py`` and one module per trainer; this ``__init__`` imports none of them, so that
the scan's bucket census (``census.py``) costs nothing where no multi-GPU run is judged.
"""
