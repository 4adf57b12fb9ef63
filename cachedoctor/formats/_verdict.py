"""The safety verdict every reader shares: which loaders would run a file's pickles, and bombs.

A reader lists the pickles a loader would unpickle (every one of them, wherever it sits), hands
each to :func:`screen`, and records the names it returns with the loaders that would run them.
A pickle over a limit of ``_pickle_scan.LIMITS`` raises ``ReadError("resource-bomb")``, which
the scan reports as ``unsafe-pickle`` whatever the file's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cachedoctor.formats._pickle_scan import LIMITS, PickleScan, scan, scan_bytes
from cachedoctor.formats._read_error import ReadError

_MEMO_BYTES = (
    8 * 1024
)  # pickles memoised by their bytes: a cache's are small and repeat (hashing a large window costs more than walking it)

TORCH_LOAD = "torch.load(weights_only=False)"
PICKLE_LOAD = "pickle.load"
NP_LOAD = "np.load(allow_pickle=True)"
GUNZIP_LOAD = "a gunzip-then-torch.load reader (SimpleTuner's compressed caches)"

#: Who unpickles what: a plain pickle runs under any of the three (torch.load reads a non-zip
#: file's first pickle before it checks the magic number; np.load falls back to pickle.load).
LOADERS = {
    "torch-zip": (TORCH_LOAD,),
    "torch-legacy": (TORCH_LOAD,),
    "torch-tar": (TORCH_LOAD,),
    "pickle": (PICKLE_LOAD, TORCH_LOAD, NP_LOAD),
    "npy": (NP_LOAD,),
    "npz": (NP_LOAD,),
}


def bomb(where: str, reason: str, opcodes: int = 0, unsafe: tuple[str, ...] | list[str] = ()) -> ReadError:
    """A resource bomb; ``unsafe`` the foreign globals the walk met before the limit (a loader
    imports them before it gets that far, so no damage excuses the file)."""
    return ReadError(
        "resource-bomb",
        f"{where} passes the limits of any cache file ({reason}): a resource "
        "bomb that would stall or exhaust the memory of whatever loads it",
        limit=reason,
        where=where,
        opcodes=opcodes,
        **({"unsafe": list(unsafe)} if unsafe else {}),
    )


def check_size(where: str, size: int) -> None:
    """Refuse a pickle before reading it when its length alone is over the limit."""
    if size > LIMITS.pickle_bytes:
        raise bomb(where, f"{size:,} bytes of pickle, limit {LIMITS.pickle_bytes:,}")


def screen(where: str, data: bytes | memoryview, start: int = 0) -> PickleScan:
    """The static walk of one pickle; a resource bomb raises instead of returning."""
    small = start == 0 and isinstance(data, bytes) and len(data) <= _MEMO_BYTES
    result = scan_bytes(data) if small else scan(data, start)
    if result.bomb is not None:
        raise bomb(where, result.bomb, result.opcodes, result.unsafe)
    return result


def merge(names: list[str], found: tuple[str, ...] | list[str]) -> None:
    for name in found:
        if name not in names:
            names.append(name)


@dataclass(slots=True)
class Sequence:
    """What a walk over pickles stored one after another found (a legacy torch file holds five)."""

    unsafe: list[str] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)  # where each complete pickle ends
    stopped: str | None = None  # why the walk ended early: a loader stops there too
    calls: bool = False  # a call opcode (REDUCE, NEWOBJ, INST, OBJ, BUILD) was reached
    allocated: int = 0  # bytes the calls of all the pickles would allocate (one budget per file)

    @property
    def truncated(self) -> bool:
        return self.stopped is not None and "truncated" in self.stopped


def screen_sequence(data: bytes | memoryview, count: int, where: str, start: int = 0) -> Sequence:
    """Walk up to ``count`` pickles from ``start`` one after another, as a legacy load reads them."""
    found = Sequence()
    pos = start
    for i in range(count):
        result = screen(f"{where} pickle {i + 1}" if count > 1 else where, data, pos)
        merge(found.unsafe, result.unsafe)
        found.calls = found.calls or result.calls
        found.allocated += result.allocated
        if found.allocated > LIMITS.call_bytes:  # one allocation budget for the file, not per pickle
            raise bomb(
                where, f"its pickles' calls would allocate {found.allocated:,} bytes, limit {LIMITS.call_bytes:,}"
            )
        if not result.complete:
            found.stopped = result.error
            return found
        found.ends.append(result.end)
        pos = result.end
        if pos >= len(data):
            break
    return found
