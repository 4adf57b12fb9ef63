"""Where a recompute gets its sources and puts what it made: the seam between the encoding loop
(``pool.py``, the same for every cache) and the storage the cache lives on.

The local sink opens the image file and writes through ``replace.run_action`` (temp file,
judged, old file linked into the quarantine, rename). ``store_recompute.StoreSink`` GETs the
image from its bucket and writes one conditional PUT (``store_act.py``). Everything between,
the preparation, the batching, the encoder and the file's bytes, is shared, which is what makes
a recompute of a remote entry the same bytes as a local one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from cachedoctor.layouts.interface import RecomputeSpec
    from cachedoctor.layouts.prepare import Prepared
    from cachedoctor.repair.model import Action, ItemResult
    from cachedoctor.repair.peer_scale import EncoderUsed

Make = Callable[["Action"], bytes]


class Sink(Protocol):
    def prepare(self, spec: RecomputeSpec, downscale: int) -> Prepared:
        """The source of ``spec`` read and prepared (``layouts.prepare.prepare_image``)."""

    def write(self, action: Action, make: Make, encoder: EncoderUsed) -> ItemResult:
        """``make(action)``'s bytes judged and put in place of ``action.path``; one item's
        failure is its result, a fault that must stop the run raises ``RepairError``.
        ``encoder``: the ``--encoder`` that made them, as given (a refusal names it), and its scaling."""


class LocalSink:
    """Sources and cache files on this machine's disk (one run's quarantine per cache root)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    def prepare(self, spec: RecomputeSpec, downscale: int) -> Prepared:
        from cachedoctor.layouts.prepare import prepare_image

        return prepare_image(spec, downscale)

    def write(self, action: Action, make: Make, encoder: EncoderUsed) -> ItemResult:
        from cachedoctor.repair.quarantine import Quarantine
        from cachedoctor.repair.replace import run_action
        from cachedoctor.repair.verify import problems_of, with_notes

        notes: list[str] = []

        def verify(a: Action, temp: str) -> str | None:
            return problems_of(a, temp, encoder=encoder, notes=notes)

        return with_notes(run_action(action, Quarantine(action.root, self.run_id), make, verify), notes)


__all__ = ["LocalSink", "Make", "Sink"]
