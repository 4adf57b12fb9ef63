"""What a format reader produces: facts about a file, never judgments.

A reader turns bytes into :class:`FileMeta` (tensors with their storage facts, the globals its
pickle names, and in deep mode CRC and NaN counts) or raises :class:`ReadError` when the bytes
are not a readable file of that format. Deciding what is a *defect* is the job of ``checks/``.
Readers never execute anything from the file.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

# ``X as X``: moved to _read_error.py (below _source.py, which raises it), still importable from here
from cachedoctor.formats._read_error import ReadError as ReadError
from cachedoctor.formats._read_error import UnreadableFile as UnreadableFile
from cachedoctor.records import record

if TYPE_CHECKING:
    from cachedoctor.formats._source import Source


@record
class TensorMeta:
    """One tensor inside a cache file.

    ``key`` is its path inside the saved object: ``""`` for a bare tensor, ``latent_image`` for
    a dict entry, ``[0]`` for a list item, ``a.b[1]`` when nested. Sizes are in elements except
    ``record_bytes``, the byte size of the record holding the storage (``None`` when the record
    is missing). ``stride``, ``storage_numel`` and ``location`` are ``None`` for formats that
    store contiguous data without a storage (safetensors, npz).
    """

    key: str
    shape: tuple[int, ...]
    dtype: str
    itemsize: int
    stride: tuple[int, ...] | None = None
    offset: int = 0
    storage: str | None = None
    storage_numel: int | None = None
    record_bytes: int | None = None
    location: str | None = None
    nonfinite: int | None = None  # deep mode only: NaN/Inf elements in the tensor's view
    stats: bytes | None = None  # deep mode, finite latents: per-channel means then stds, float32 (_channel_stats)

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def span(self) -> int:
        """Elements of the storage the view touches: ``1 + sum((size-1)*stride)``."""
        if self.stride is None:
            return self.numel
        span = 1
        for size, stride in zip(self.shape, self.stride, strict=False):
            if size == 0:
                return 0
            span += (size - 1) * stride
        return span

    @property
    def display_key(self) -> str:
        return self.key or "<root>"

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "stride": None if self.stride is None else list(self.stride),
            "offset": self.offset,
            "storage": self.storage,
            "storage_numel": self.storage_numel,
            "record_bytes": self.record_bytes,
            "location": self.location,
        }


@record
class MemberCrc:
    """A zip member whose data does not match the CRC-32 its central directory records."""

    name: str
    expected: int
    actual: int


@record
class FileMeta:
    """Everything a reader learned about one file.

    ``container`` is the shape of the saved object (``tensor``, ``dict``, ``list``, ``other``).
    ``foreign_globals`` lists every global the pickle names outside the allow-list (recorded,
    never imported), and ``loaders`` the loaders that would run them. ``unreadable_reason`` is
    set when the pickle could not be followed to the end after a foreign global (the tensors
    listed are then the ones seen before that). ``ambiguous`` lists member names that torch.load
    and zipfile would resolve to different bytes (duplicates, case variants, renamed headers).
    """

    path: str
    format: str
    size: int
    container: str = "other"
    tensors: tuple[TensorMeta, ...] = ()
    foreign_globals: tuple[str, ...] = ()
    missing_records: tuple[str, ...] = ()
    unreadable_reason: str | None = None
    deep: bool = False
    crc_mismatches: tuple[MemberCrc, ...] = ()
    digest: str | None = None  # deep mode: xxh3-128 of the whole file, hex
    values: tuple[tuple[str, tuple[float, ...]], ...] = ()  # tiny numeric arrays (kohya original_size), free to read
    loaders: tuple[str, ...] = ()
    ambiguous: tuple[str, ...] = ()
    metadata: tuple[tuple[str, str], ...] = ()  # safetensors ``__metadata__`` (string to string), in header order
    texts: tuple[tuple[str, str], ...] = ()  # a saved dict's own strings (``_unpickle._texts``): what the item is
    #: items of a file that holds several (a diffusion-pipe shard): ``(label, problem, message)`` of
    #: each item that does not read; the items that read are in ``tensors`` under ``<label>/<key>``
    item_errors: tuple[tuple[str, str, str], ...] = ()


class FormatReader(abc.ABC):
    """One container format. Readers are stateless; ``read`` is safe on hostile bytes."""

    #: Stable format name used in metadata and reports.
    name: str

    @abc.abstractmethod
    def claims(self, head: bytes, src: Source) -> bool:
        """Whether the file's first bytes (``head``, up to 64) are this format's magic."""

    @abc.abstractmethod
    def read(self, path: str, src: Source, *, deep: bool) -> FileMeta:
        """Describe the file whose bytes ``src`` holds (all of them in memory in deep mode).

        Raises :class:`ReadError` when the bytes are not a valid file of this format.
        """
