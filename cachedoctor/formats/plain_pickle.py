"""Plain pickles (not torch.save) found where a cache file should be.

``torch.load`` cannot read them ("Invalid magic number"), and without ``weights_only`` it
would run their payload before saying so. They are unpickled with the restricted unpickler only
to learn which globals they name.
"""

from __future__ import annotations

from cachedoctor.formats._source import Source
from cachedoctor.formats._unpickle import RestrictedUnpickler
from cachedoctor.formats.interface import FileMeta, FormatReader, ReadError
from cachedoctor.lifetime import reraise_interrupt

_LIMIT = 256 * 1024 * 1024


class PlainPickleReader(FormatReader):
    name = "pickle"

    def claims(self, head: bytes, src: Source) -> bool:
        return len(head) > 2 and head[0] == 0x80 and 2 <= head[1] <= 5

    def read(self, path: str, src: Source, *, deep: bool) -> FileMeta:
        if src.size > _LIMIT:
            raise ReadError("too-large", "plain pickle larger than any cache file should be")
        unpickler = RestrictedUnpickler(src.exact(0, src.size))
        error = None
        try:
            unpickler.load()
        except Exception as exc:  # hostile or damaged pickles raise anything
            reraise_interrupt(exc)
            error = f"{type(exc).__name__}: {exc}"[:200]
        if unpickler.foreign:
            return FileMeta(path, self.name, src.size, foreign_globals=tuple(unpickler.foreign),
                            unreadable_reason=error)
        raise ReadError("not-torch", "a plain pickle, not a torch.save file: torch.load cannot read it (Invalid magic number)")
