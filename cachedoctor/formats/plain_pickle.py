"""Plain pickles (not torch.save) found where a cache file should be, whatever their name.

``torch.load`` cannot read them ("Invalid magic number"), and without ``weights_only`` it
would run their payload before saying so: it unpickles a non-zip file's first pickle before it
checks the magic number. ``np.load(allow_pickle=True)`` and ``pickle.load`` run it too.

A pickle is recognised by its content, not by a PROTO opcode (protocols 0 and 1 have none):
the bytes must walk as a complete pickle, or reach a call of a global. A caption, a JSON file or
an image stops within a few bytes (an invalid opcode or a stack underflow), so the walk is cheap
for the foreign files of a cache folder. Up to five pickles in a row are walked, as a legacy
torch load would read them.
"""

from __future__ import annotations

from cachedoctor.formats._pickle_opcodes import _ARG
from cachedoctor.formats._pickle_scan import LIMITS
from cachedoctor.formats._source import Source, growing_window
from cachedoctor.formats._unpickle import PickleBomb, RestrictedUnpickler, refuse_unfolding, walk
from cachedoctor.formats._verdict import LOADERS, Sequence, bomb, screen_sequence
from cachedoctor.formats.interface import FileMeta, FormatReader, ReadError
from cachedoctor.lifetime import reraise_interrupt

_SEQUENCE = 5
#: Opcodes a file without a PROTO opcode must walk before a limit counts as a bomb: one long
#: line of text after an ``S`` or ``i`` is a big text file, not a pickle.
_BOMB_EVIDENCE = 16


def _walk(src: Source) -> Sequence | ReadError:
    """The static walk of the file's pickles, once per source (claims and read share it)."""
    cached: Sequence | ReadError | None = getattr(src, "_pickle_walk", None)
    if cached is None:
        try:
            _, walked = growing_window(
                src,
                LIMITS.pickle_bytes,
                lambda data: screen_sequence(data, _SEQUENCE, "pickle"),
                lambda result: not result.ends and result.truncated,
            )
        except ReadError as exc:
            cached = exc
        else:
            cached = walked
        src._pickle_walk = cached
    return cached


class PlainPickleReader(FormatReader):
    name = "pickle"

    def claims(self, head: bytes, src: Source) -> bool:
        if not head or _ARG[head[0]][0] < 0:
            return False  # not even an opcode: no walk needed
        if head[0] == 0x80 and len(head) > 1 and head[1] <= 5:
            return True
        walked = _walk(src)
        if isinstance(walked, ReadError):  # a resource bomb, if enough of it walked as a pickle
            return walked.details.get("opcodes", 0) >= _BOMB_EVIDENCE
        return bool(walked.ends) or (bool(walked.unsafe) and walked.calls)

    def read(self, path: str, src: Source, *, deep: bool) -> FileMeta:
        walked = _walk(src)
        if isinstance(walked, ReadError):
            raise walked
        if walked.unsafe:
            return _unsafe(path, src, walked, walked.stopped)
        if walked.ends:
            _refuse_unfolding_bomb(src.read_at(0, walked.ends[0]))
        raise ReadError(
            "not-torch", "a plain pickle, not a torch.save file: torch.load cannot read it (Invalid magic number)"
        )


def named_before_break(path: str, src: Source) -> FileMeta | None:
    """A cache-named file no reader claims whose bytes walk as a pickle that names a foreign
    global before they break (a truncated protocol-0 pickle): every loader's unpickler calls
    ``find_class`` on that name, importing the module, before it reaches the break, so the file
    fails closed as unsafe. Only for cache names: a caption that starts ``c...`` walks as a
    GLOBAL too, and no trainer loads a caption with torch.load."""
    if not src.size or _ARG[src.read_at(0, 1)[0]][0] < 0:
        return None
    walked = _walk(src)
    if isinstance(walked, ReadError) or not walked.unsafe:
        return None
    return _unsafe(
        path, src, walked, f"the pickle breaks after naming them ({walked.stopped}); a loader imports them first"
    )


def _unsafe(path: str, src: Source, walked: Sequence, reason: str | None) -> FileMeta:
    """The verdict on a plain pickle whose walk met foreign globals: every loader of one runs them."""
    return FileMeta(
        path,
        PlainPickleReader.name,
        src.size,
        foreign_globals=tuple(walked.unsafe),
        loaders=LOADERS[PlainPickleReader.name],
        unreadable_reason=reason,
    )


def _refuse_unfolding_bomb(data: bytes) -> None:
    """Shared references that unfold into billions of objects load cheaply and then stall
    whatever walks the result (a repr, a tree map, torch's error message for a bad persistent
    id): build the object with stand-ins and count, as the torch zip reader does."""

    def persistent(pid: object) -> object:
        refuse_unfolding(pid, "a persistent id")
        return None

    try:
        walk(RestrictedUnpickler(data, persistent).load())
    except PickleBomb as exc:
        raise bomb("pickle", str(exc)) from None
    except Exception as exc:  # any other failure: the file is no torch file either way
        reraise_interrupt(exc)
