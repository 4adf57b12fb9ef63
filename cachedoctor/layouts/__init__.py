"""Trainer layouts: how dataset items map to cache files. :func:`plan_for` plans with one.

``--layout auto`` (the default) gives each part of the targets the layout whose sign it holds
(``auto.py``: a tree that mixes trainers gets one layout per subtree) and says why; where no
layout matches, the scan compares the cache files with each other only.
:func:`recompute_spec` asks a layout what a repair must write for one of its entries.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import replace

from cachedoctor.errors import UsageError
from cachedoctor.layouts import _recompute, auto
from cachedoctor.layouts._recompute import TemplateFinder
from cachedoctor.layouts.aitoolkit import AiToolkitLayout
from cachedoctor.layouts.diffusion_pipe import DiffusionPipeLayout
from cachedoctor.layouts.interface import (
    DatasetPlan,
    Expected,
    Layout,
    LayoutError,
    LayoutOptions,
    LayoutPart,
    RecomputeSpec,
    SpecOrWhy,
    Template,
)
from cachedoctor.layouts.kohya import KohyaLayout
from cachedoctor.layouts.manifest import ManifestLayout
from cachedoctor.layouts.musubi import MusubiLayout
from cachedoctor.layouts.onetrainer import OneTrainerLayout
from cachedoctor.layouts.simpletuner import SimpleTunerLayout


class LayoutName(str, enum.Enum):
    AUTO = "auto"
    SIMPLETUNER = "simpletuner"
    KOHYA = "kohya"
    ONETRAINER = "onetrainer"
    MUSUBI = "musubi"
    AI_TOOLKIT = "ai-toolkit"
    DIFFUSION_PIPE = "diffusion-pipe"
    MANIFEST = "manifest"
    NONE = "none"


#: Detection order: explicit descriptions first (a manifest, a SimpleTuner config), then the
#: self-describing caches.
LAYOUTS: dict[str, Layout] = {
    layout.name: layout
    for layout in (
        ManifestLayout(),
        SimpleTunerLayout(),
        OneTrainerLayout(),
        KohyaLayout(),
        MusubiLayout(),
        DiffusionPipeLayout(),
        AiToolkitLayout(),
    )
}


def described(options: LayoutOptions) -> list[tuple[str, LayoutName]]:
    """The dataset descriptions given, as ``(flag, the layout it names)``: ``--manifest``,
    ``--config`` (any trainer's, routed by ``configs.routed``) and ``--kohya-config``."""
    out: list[tuple[str, LayoutName]] = []
    if options.manifest:
        out.append(("--manifest", LayoutName.MANIFEST))
    if options.config:
        out.append(("--config", LayoutName.SIMPLETUNER))
    if options.trainer_config:
        out.append(("--config", LayoutName(options.trainer_config[0])))
    if options.kohya_config:
        routed_here = options.config_sign is not None and not options.config and not options.trainer_config
        out.append(("--config" if routed_here else "--kohya-config", LayoutName.KOHYA))
    return out


def choose(name: LayoutName, targets: list[str], options: LayoutOptions) -> tuple[Layout | None, str]:
    """The layout to use and why. A ``--manifest``, ``--config`` or ``--kohya-config`` names its
    layout outright; two of them, or one with another ``--layout``, contradict each other."""
    given = described(options)
    if len(given) > 1:
        raise UsageError(f"{' and '.join(f for f, _ in given)} describe different trainers' datasets; pass one")
    if given and name not in (LayoutName.AUTO, given[0][1]):
        flag, named = given[0]
        raise UsageError(f"{flag} is for --layout {named.value}, not --layout {name.value}; drop one of them")
    if given:
        flag, named = given[0]
        shown = flag if named in (LayoutName.SIMPLETUNER, LayoutName.MANIFEST) or flag != "--config" else None
        return LAYOUTS[named.value], shown or f"--config: {options.config_sign}"
    if name is LayoutName.NONE:
        return None, "--layout none: cache files compared with each other only"
    if name is not LayoutName.AUTO:
        return LAYOUTS[name.value], f"--layout {name.value}"
    for layout in LAYOUTS.values():
        reason = layout.detect(targets, options)
        if reason is not None:
            return layout, f"auto: {reason}"
    return None, f"auto: {auto.NONE_REASON}"


def plan_for(name: LayoutName, targets: list[str], options: LayoutOptions) -> tuple[DatasetPlan | None, str]:
    """The dataset plan (``None``: cache only) and the line(s) saying which layout and why (one
    line per subtree when ``--layout auto`` finds a tree that mixes trainers)."""
    if name is LayoutName.AUTO and not described(options):
        return auto.plan_auto(targets, options, list(LAYOUTS.values()))
    layout, reason = choose(name, targets, options)
    if layout is None:
        return None, f"layout: none ({reason})"
    plan, line = layout.plan(targets, options), f"layout: {layout.name} ({reason})"
    plan.parts = [LayoutPart(layout.name, t, line) for t in targets] or [LayoutPart(layout.name, None, line)]
    return plan, line


def described_roots(options: LayoutOptions) -> list[str]:
    """The folders a dataset description (``--config``, ``--kohya-config``, ``--manifest``) names
    for its caches, read from the description alone where it names them (no dataset walked, no
    image opened); for the trainers whose layouts derive them (musubi-tuner, ai-toolkit,
    diffusion-pipe), the roots their plan walks, which is where repair puts quarantines. Outermost
    first, each once."""
    import os

    from cachedoctor.layouts import _kohya_config, _simpletuner_config
    from cachedoctor.layouts.manifest import read_rows

    folders: list[str] = []
    if options.config:
        backends = _simpletuner_config.load(options).backends
        # an aws dataset's caches are key prefixes in its bucket, which keep their quarantine there
        folders += [d for b in backends if b.kind != "aws" for d in (b.cache_dir_vae, b.cache_dir) if d]
    if options.kohya_config:  # kohya caches sit beside the images
        folders += [s.image_dir for s in _kohya_config.load(options.kohya_config, dict(options.kohya_args)).subsets]
    if options.trainer_config:  # the roots its repairs kept their quarantines at: the plan's own
        name, _ = options.trainer_config
        folders += [r for r in LAYOUTS[name].plan([], options).roots if "://" not in r]
    if options.manifest:
        base = os.path.dirname(os.path.abspath(options.manifest))
        folders += {
            os.path.dirname(os.path.join(base, str(row["cache"])))
            for _, row in read_rows(options.manifest)
            if "://" not in str(row["cache"])  # an s3:// cache keeps its quarantine in its bucket
        }
    out: list[str] = []
    for folder in sorted({os.path.normpath(os.path.abspath(f)) for f in folders}):
        if not any(folder == o or folder.startswith(o.rstrip(os.sep) + os.sep) for o in out):
            out.append(folder)
    return out


#: The layout that planned an entry: a name, or (a plan that mixes layouts) ``path -> name``.
LayoutOf = str | Callable[[str], str | None] | None


def recaches_missing(path: str, layout: LayoutOf) -> bool:
    """Whether the trainer of the entry at ``path`` makes it again by itself once it is missing."""
    name = layout(path) if callable(layout) else layout
    owner = LAYOUTS.get(name) if name else None
    return owner is not None and owner.recaches_missing


def recompute_spec(path: str, expected: Expected | None, layout: LayoutOf, templates: TemplateFinder) -> SpecOrWhy:
    """What a recompute of the entry at ``path`` must produce (``layout``: the plan's layout
    name, or ``DatasetPlan.layout_for``), or ``(None, why it cannot be recomputed here)``."""
    why = _recompute.precondition(expected)
    if why is not None or expected is None:
        return None, why
    if callable(layout):
        layout = layout(path)
    owner = LAYOUTS.get(layout) if layout else None
    template = templates.for_entry(path, expected, owner)
    if owner is not None:
        spec, why = owner.recompute_spec(path, expected, template)
    elif expected.role == "text":
        spec, why = _recompute.text_spec(expected, template, path)
    else:
        spec, why = _recompute.generic_latent_spec(expected, template, path)
    if spec is not None and template is not None:
        spec = replace(spec, peers=template.peers)  # what repair checks the written file against
    return spec, why


__all__ = [
    "LAYOUTS",
    "DatasetPlan",
    "Expected",
    "Layout",
    "LayoutError",
    "LayoutName",
    "LayoutOf",
    "LayoutOptions",
    "LayoutPart",
    "RecomputeSpec",
    "SpecOrWhy",
    "Template",
    "TemplateFinder",
    "choose",
    "described_roots",
    "plan_for",
    "recaches_missing",
    "recompute_spec",
]
