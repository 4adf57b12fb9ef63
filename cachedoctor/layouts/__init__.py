"""Trainer layouts: how dataset items map to cache files. :func:`choose` picks one.

``--layout auto`` (the default) tries each layout's ``detect`` in order and says why it chose
one; when none matches, the scan compares the cache files with each other only.
"""

from __future__ import annotations

import enum
from dataclasses import replace

from cachedoctor.layouts.interface import DatasetPlan, Expected, Layout, LayoutError, LayoutOptions
from cachedoctor.layouts.kohya import KohyaLayout
from cachedoctor.layouts.manifest import ManifestLayout
from cachedoctor.layouts.onetrainer import OneTrainerLayout
from cachedoctor.layouts.simpletuner import SimpleTunerLayout, find_config


class LayoutName(str, enum.Enum):
    AUTO = "auto"
    SIMPLETUNER = "simpletuner"
    KOHYA = "kohya"
    ONETRAINER = "onetrainer"
    MANIFEST = "manifest"
    NONE = "none"


#: Detection order: explicit descriptions first (a manifest, a SimpleTuner config), then the
#: self-describing caches.
LAYOUTS: dict[str, Layout] = {
    layout.name: layout for layout in (ManifestLayout(), SimpleTunerLayout(), OneTrainerLayout(), KohyaLayout())
}


def choose(name: LayoutName, targets: list[str], options: LayoutOptions) -> tuple[Layout | None, LayoutOptions, str]:
    """The layout to use, the options completed (a discovered config), and why it was chosen."""
    if name is LayoutName.NONE:
        return None, options, "--layout none: cache files compared with each other only"
    if name is not LayoutName.AUTO:
        layout = LAYOUTS[name.value]
        if layout.name == "simpletuner" and not options.config:
            found = find_config(targets)
            if found is None:
                raise LayoutError(targets[0] if targets else ".", "the simpletuner layout needs --config multidatabackend.json")
            options = replace(options, config=found)
        return layout, options, f"--layout {name.value}"
    for layout in LAYOUTS.values():
        reason = layout.detect(targets, options)
        if reason is not None:
            if layout.name == "simpletuner" and not options.config:
                options = replace(options, config=find_config(targets))
            return layout, options, f"auto: {reason}"
    return None, options, "auto: no trainer layout recognised; cache files compared with each other only"


def plan_for(name: LayoutName, targets: list[str], options: LayoutOptions) -> tuple[DatasetPlan | None, str]:
    """The dataset plan (``None``: cache only) and a line saying which layout and why."""
    layout, options, reason = choose(name, targets, options)
    if layout is None:
        return None, f"layout: none ({reason})"
    return layout.plan(targets, options), f"layout: {layout.name} ({reason})"


__all__ = ["DatasetPlan", "Expected", "LAYOUTS", "Layout", "LayoutError", "LayoutName", "LayoutOptions", "choose", "plan_for"]
