"""The whole of one object for a deep read, within bounded memory and disk.

A deep scan reads every byte, and the bytes of an object no worker process can map (an object
store's) must be somewhere while the CRC, NaN
and digest passes run over them: in memory for an object up to :data:`SPILL_OVER`, within
:data:`MEMORY_BUDGET` across all the scan's threads (a thread waits for room), else in an
unlinked temporary file, filled by ranged reads and mapped, one such object at a time. So a
deep scan of 50 GB objects on 32 threads needs neither 1.6 TB of memory nor of disk (the local
scan maps files for the same reason).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from cachedoctor.stores.interface import ObjectInfo, Store, TransientError

#: Deep reads hold at most this many bytes in memory at once across the pool; an object larger
#: than :data:`SPILL_OVER` goes to an unlinked temporary file, read by ranges and mapped, one
#: such object at a time, so a deep scan of 50 GB objects on 32 threads needs neither 1.6 TB of
#: memory nor of disk (the local scan maps files for the same reason).
MEMORY_BUDGET = 512 << 20
SPILL_OVER = 64 << 20
SPILL_CHUNK = 16 << 20


class _Budget:
    """Bytes of deep downloads in flight: ``take(n)`` waits until ``n`` fit (an object larger
    than the whole budget waits for an empty pool)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self.cond = threading.Condition()

    @contextlib.contextmanager
    def take(self, n: int) -> Iterator[None]:
        n = min(n, self.capacity)
        with self.cond:
            self.cond.wait_for(lambda: self.used + n <= self.capacity)
            self.used += n
        try:
            yield
        finally:
            with self.cond:
                self.used -= n
                self.cond.notify_all()


_memory = _Budget(MEMORY_BUDGET)
_spill = threading.Lock()


@contextlib.contextmanager
def deep_bytes(store: Store, info: ObjectInfo) -> Iterator[memoryview]:
    """The whole object for a deep read: in memory within the pool's budget, or spilled."""
    if info.size <= SPILL_OVER:
        with _memory.take(info.size):
            yield memoryview(store.read_whole(info, limit=info.size))
        return
    import tempfile

    from cachedoctor.formats import _mapped

    with _spill, tempfile.TemporaryFile(prefix="cachedoctor-deep-") as sink:
        for start in range(0, info.size, SPILL_CHUNK):
            end = min(info.size, start + SPILL_CHUNK)
            chunk = store.read_range(info, start, end)
            if len(chunk) != end - start:
                raise TransientError(f"{info.url}: short read at byte {start + len(chunk)}")
            sink.write(chunk)
        sink.flush()
        with _mapped(sink.fileno(), info.size) as view:  # the local deep read's own mapping
            yield view
