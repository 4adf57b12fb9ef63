"""Recomputing entries of a cache repaired through its store's conditional requests
(``store_flow.py``): the local recompute's loop, with a store at both ends.

What makes the new object the same bytes a local recompute would write for that item is that
nothing of the making is remote-specific: the planner's spec (``Layout.recompute_spec``), the
preparer (``layouts/prepare/``, decoding the image from the fetched bytes), the batching, the
encoder, its thread settings and the file's bytes (``recompute.build_file``) are the local
ones (``pool.work``). Only the two ends differ (:class:`StoreSink`): the image is one
conditional GET (its facts from the dataset's listing, or one HEAD when the plan has none),
and the entry is written by ``StoreActor.put_made`` (judged, old version kept, one conditional
PUT, journaled).

Where it runs: in this process, on one device, batches of ``--batch-size`` with the source GETs
two batches ahead on the prefetch thread and the PUTs on the writer thread (``pool.work``).
Worker processes would each need their own S3 client and journal writer for what is, per item,
one GET and one PUT: the encoder is the cost, and one device runs it.

A template (the healthy peer whose container, keys and dtypes a new entry copies) must be a
file for torch to load: :class:`ListedTemplates` keeps the few peers it reads per folder in the
prefix's local state folder, named by URL and ETag, and the verification reads them there.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from cachedoctor.layouts import TemplateFinder
from cachedoctor.layouts._recompute import KindOf
from cachedoctor.layouts.interface import Template
from cachedoctor.stores.interface import ObjectChanged, ObjectGone, ObjectInfo, Store, TransientError, is_remote

if TYPE_CHECKING:
    from cachedoctor.formats.interface import FileMeta
    from cachedoctor.layouts.interface import RecomputeSpec
    from cachedoctor.layouts.prepare import Prepared
    from cachedoctor.repair.model import Action, ItemResult
    from cachedoctor.repair.outcome import RepairOptions
    from cachedoctor.repair.peer_scale import EncoderUsed
    from cachedoctor.repair.sink import Make
    from cachedoctor.repair.store_act import Recompute, StoreActor

#: A source image larger than this is not read (a training image is a few MB).
SOURCE_LIMIT = 512 << 20
#: Healthy peers copied per folder: ``distribution-outlier``'s ``MIN_PEERS`` (20) and a few more
#: for the ones the deep read finds wanting.
SCALE_PEERS = 24
#: A template or peer larger than this is not copied here to be one.
_TEMPLATE_LIMIT = 64 << 20


class StoreSink:
    """``pool.work``'s two ends for one remote run (see the module's docstring)."""

    def __init__(
        self, actor: StoreActor, source_store: Callable[[str], Store], sources: Mapping[str, ObjectInfo]
    ) -> None:
        self.actor = actor
        self.source_store = source_store
        self.sources = sources

    def prepare(self, spec: RecomputeSpec, downscale: int) -> Prepared:
        from cachedoctor.layouts.prepare import prepare_image

        if not is_remote(spec.source):  # a local image for a cache in a bucket: read from disk
            return prepare_image(spec, downscale)
        return prepare_image(spec, downscale, self.fetch(spec.source))

    def fetch(self, url: str) -> bytes:
        """The source's bytes: one GET conditional on the version the dataset listed."""
        store = self.source_store(url)
        info = self.sources.get(url) or store.head(url)
        if info is None:
            raise ObjectGone(f"{url} is gone")
        try:
            return store.read_whole(info, SOURCE_LIMIT)
        except ObjectChanged:  # replaced since the listing: the image as it is now
            now = store.head(url)
            if now is None:
                raise ObjectGone(f"{url} is gone") from None
            return store.read_whole(now, SOURCE_LIMIT)

    def write(self, action: Action, make: Make, encoder: EncoderUsed) -> ItemResult:
        return self.actor.put_made(action, make, encoder)


def recomputer(
    options: RepairOptions, source_store: Callable[[str], Store], sources: Mapping[str, ObjectInfo]
) -> Recompute:
    """What a :class:`~cachedoctor.repair.store_session.StoreSession` runs its recomputes with."""

    def run(actions: list[Action], actor: StoreActor) -> None:
        from cachedoctor.repair.pool import devices_for, make_batches, work
        from cachedoctor.repair.posterior import Models

        models = Models(options.encoders, options.posterior, options.seed)
        device = devices_for(options.gpus, options.device, options.workers)[0]
        sink = StoreSink(actor, source_store, sources)
        work(make_batches(actions, options.batch_size), models, device, actor.quarantine.run_id, actor.record, 1, sink)

    return run


class ListedTemplates(TemplateFinder):
    """Templates for the entries of remote cache folders, from the listing of their prefix:
    up to :attr:`peers` healthy objects per folder, each copied once into ``home``: enough for
    the write-time check to judge a recompute's scale by (``peer_scale.py``), which cannot list
    a bucket's folder as it lists a local one."""

    peers = SCALE_PEERS

    def __init__(
        self, bad: set[str], infos: Mapping[str, ObjectInfo], store_of: Callable[[str], Store], home: str
    ) -> None:
        super().__init__(bad)
        self.infos = infos
        self.store_of = store_of
        self.home = home

    def _search(self, folder: str, kind: str, kind_of: KindOf) -> Template | None:
        if not is_remote(folder):
            return super()._search(folder, kind, kind_of)
        from cachedoctor.layouts._recompute import own_meta

        def load(url: str) -> tuple[str, FileMeta] | None:
            local = self._copy(self.infos[url], posixpath.splitext(url)[1] or ".pt")
            meta = own_meta(local) if local is not None else None
            return (local, meta) if local is not None and meta is not None and meta.tensors else None

        urls = sorted(u for u in self.infos if posixpath.dirname(u) == folder)
        return self._pick(((posixpath.basename(u), u) for u in urls), kind, kind_of, load)

    def _copy(self, info: ObjectInfo, suffix: str) -> str | None:
        """The object's bytes in a local file named by its URL and ETag (reused while both hold)."""
        from cachedoctor.atomic import atomic_binary

        digest = hashlib.sha256(f"{info.url}\0{info.etag}\0{info.size}".encode()).hexdigest()[:32]
        path = os.path.join(self.home, "templates", digest + suffix)
        if os.path.isfile(path) and os.path.getsize(path) == info.size:
            return path
        if info.size > _TEMPLATE_LIMIT:
            return None
        try:
            data = self.store_of(info.url).read_whole(info, _TEMPLATE_LIMIT)
        except (ObjectGone, ObjectChanged, TransientError):
            return None
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with atomic_binary(path) as out:
            out.write(data)
        return path


__all__ = ["SOURCE_LIMIT", "ListedTemplates", "StoreSink", "recomputer"]
