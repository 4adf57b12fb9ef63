"""How a trainer maps dataset items to cache files.

A :class:`Layout` turns scan targets (and options such as a SimpleTuner config) into a
:class:`DatasetPlan`: the cache folders to walk, and per folder the :class:`Expected` entries,
each naming the dataset item it was made from. The scan then pairs what it finds with what
was expected; ``checks/`` judges each pair (missing, orphan, stale, collision, shape).

Layouts may look at the file system (list folders, read image headers, read a cache's own
index such as OneTrainer's ``aggregate.pt``) but never read tensor data: planning must stay a
small fraction of the scan.

A layout also knows what its trainer would have written for an entry, so ``repair`` can make a
broken one again: :meth:`Layout.recompute_spec` turns an :class:`Expected` entry (and a healthy
peer, the template) into a :class:`RecomputeSpec`. Adding a trainer touches this package only.
"""

from __future__ import annotations

import abc
import os
from typing import ClassVar

from cachedoctor.layouts import _recompute
from cachedoctor.layouts._scout import scout

# ``X as X``: the values moved to model.py (below this module and the pieces its defaults call),
# still importable from here
from cachedoctor.layouts.model import Claim as Claim
from cachedoctor.layouts.model import DatasetPlan as DatasetPlan
from cachedoctor.layouts.model import Expected as Expected
from cachedoctor.layouts.model import LayoutError as LayoutError
from cachedoctor.layouts.model import LayoutOptions as LayoutOptions
from cachedoctor.layouts.model import LayoutPart as LayoutPart
from cachedoctor.layouts.model import RecomputeSpec as RecomputeSpec
from cachedoctor.layouts.model import SpecOrWhy as SpecOrWhy
from cachedoctor.layouts.model import Template as Template


class Layout(abc.ABC):
    """One trainer's naming scheme."""

    name: ClassVar[str]
    summary: ClassVar[str]
    #: Whether the plan of a folder finds every sign below it, so that ``--layout auto`` may give
    #: it a parent of its signs that holds nothing else (kohya, OneTrainer). SimpleTuner's plan
    #: reads the config in the folder it is given, so it gets exactly the folder of its sign.
    plans_below: ClassVar[bool] = True
    #: Whether the trainer makes a missing entry again by itself when it starts (ai-toolkit
    #: encodes whatever is not on disk): an entry repair cannot recompute is then moved to the
    #: quarantine rather than left for a person, and the trainer re-caches it.
    recaches_missing: ClassVar[bool] = False

    def detect(self, targets: list[str], options: LayoutOptions) -> str | None:
        """Why these targets look like this layout (a short reason), or ``None``: the first
        :meth:`claim` within the first ``DETECT_ENTRIES`` directory entries below them."""
        for target in targets:
            found = scout(target, [self]).claims
            if found:
                return found[0][1].reason
        return None

    def claim(self, folder: str, names: set[str]) -> Claim | None:
        """This layout's sign in ``folder`` (which holds ``names``), or ``None``. It may look at
        the file system (a stat), never read a cache file's content; a small config file may be
        read to tell whose it is (a musubi-tuner dataset TOML)."""
        return None

    def resembles(self, names: set[str]) -> bool:
        """Whether ``names`` (one folder's) hold files this layout writes, without its sign (a
        kohya cache whose images are gone): such a folder does not stop ``--layout auto`` from
        giving this layout the tree around it."""
        return False

    def opaque(self, name: str) -> bool:
        """A folder name ``--layout auto`` never lists: it holds only entries (OneTrainer's
        ``variation-<n>``), and its parent's :meth:`claim` sees it by name."""
        return False

    @abc.abstractmethod
    def plan(self, targets: list[str], options: LayoutOptions) -> DatasetPlan:
        """The expected entries for ``targets``; :class:`LayoutError` if it cannot be built."""

    def template_kind(self, name: str, role: str) -> str:
        """The kind of entry a file called ``name`` is, for repair's templates: a recomputed
        entry copies its container and keys from a healthy file of its folder of the same kind.
        ``role`` is the entry's being recomputed. The default tells kinds by suffix (and kohya's
        text-encoder ``.npz`` by name); a layout whose latents and text embeds share a folder
        and suffix says more."""
        return _recompute.default_kind(name, role)

    def recompute_spec(self, path: str, expected: Expected, template: Template | None) -> SpecOrWhy:
        """What a recompute of the entry at ``path`` must produce, or why it cannot be made here.

        Called only for an entry whose source exists. ``template`` is a healthy peer, if any.
        The default suits a trainer that records sizes and keys in the dataset description
        (a manifest): the latent key it names, else the peer's largest tensor, raw latents.
        """
        if expected.role == "text":
            return _recompute.text_spec(expected, template, path)
        return _recompute.generic_latent_spec(expected, template, path)


def mtime_ns(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None
