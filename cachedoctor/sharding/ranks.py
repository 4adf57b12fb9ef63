"""The ranks of one ``torchrun`` (or ``accelerate launch``) job handing each other their parts.

Every rank scans its shard, then :meth:`RankGroup.share` gives every rank every rank's part, so
each can merge the whole result (rank 0 prints it; a repair's ranks all plan from it). The
exchange goes through the job's own rendezvous store (the c10d ``TCPStore`` at
``MASTER_ADDR:MASTER_PORT``: the launcher's, or rank 0's where no launcher hosts one), not
through a collective: a collective waits out its whole timeout (30 minutes) for a rank that is
gone, and then says nothing about which one it was.

So waiting is a loop that watches the others while it waits:

- a rank that fails (a target it cannot reach, a problem with its files) posts the one line it
  would have printed; every other rank stops, and rank 0 prints that line, naming the rank and
  its host;
- a rank that dies or hangs stops beating: a thread of each rank adds to its heartbeat counter
  every second, and a counter that has not moved for ``CACHEDOCTOR_RANK_TIMEOUT`` seconds
  (default 120) names its rank as gone;
- a launcher that stops the job (``torchrun`` does when any rank exits badly) sends SIGTERM:
  each rank then says so in the store, waits a moment for the others to say so too, and the
  ranks that did not are the ones that ended first: the lowest rank still there names them.

Only one line is printed, by one rank, and every rank exits 2 (``RankStopped``).
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import threading
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, ClassVar, NoReturn

from cachedoctor.errors import PathError, RankStopped, UsageError
from cachedoctor.sharding.interface import Shard
from cachedoctor.sharding.rank_faults import line_of, seconds, test_hang, test_kill

BEAT_S = 1.0
POLL_S = 0.1
STALL_S = 120.0
CHECK_S = 5.0
TERM_GRACE_S = 2.0
CONNECT_S = 300.0
LEAVE_S = 600.0
LEAVE_GRACE_S = 1.0
AGAIN = "no report was written; run the same command again (each shard resumes from its state)"


class RankGroup:
    """This process's place among the job's ranks, and the store they meet in."""

    joined: ClassVar[int] = 0  # groups this process joined (a key namespace each)

    def __init__(self, rank: int, world: int, store: Any, namespace: str, hosts_store: bool) -> None:
        self.rank, self.world = rank, world
        self.store = store
        self.ns = namespace
        self.hosts_store = hosts_store
        self.host = socket.gethostname()
        self.stall_s = seconds(os.environ.get("CACHEDOCTOR_RANK_TIMEOUT"), STALL_S)
        self.check_s = min(CHECK_S, self.stall_s / 3)  # how often the heartbeats are looked at
        self._step = 0
        self._hosts: dict[int, str] = {}
        self._beats: dict[int, tuple[int, float]] = {}
        self._stop = threading.Event()
        self._closed = False
        self.seen: list[str] = []  # each rank's line about its last part (``Part.line``)
        #: whether every rank needs every part (a repair plans on each rank) or rank 0 alone (a scan)
        self.everyone = True

    @property
    def leader(self) -> bool:
        return self.rank == 0

    @property
    def shard(self) -> Shard:
        """The share of the cache this rank scans."""
        return Shard(self.rank, self.world)

    # --- joining and leaving ----------------------------------------------------------------

    @classmethod
    def join(cls, env: Mapping[str, str] | None = None) -> RankGroup:
        """Connect to the job's store (``MASTER_ADDR``/``MASTER_PORT``, as ``torchrun`` sets them),
        start the heartbeat, and take SIGTERM as the launcher stopping the job."""
        env = os.environ if env is None else env
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        addr, port = env.get("MASTER_ADDR", "127.0.0.1"), env.get("MASTER_PORT", "")
        if not port.isdigit():
            raise UsageError("RANK and WORLD_SIZE are set but MASTER_PORT is not: start the ranks with torchrun")
        try:
            from torch.distributed import TCPStore
        except ImportError:
            raise UsageError(
                "a scan split over ranks (RANK, WORLD_SIZE set) meets through torch.distributed: "
                "pip install torch, or unset RANK and WORLD_SIZE to scan in one process"
            ) from None
        agent = env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"  # torchrun's agent hosts it
        hosts = rank == 0 and not agent
        try:
            store = TCPStore(
                addr,
                int(port),
                world,
                hosts,
                timedelta(seconds=CONNECT_S),
                wait_for_workers=False,
                multi_tenant=True,  # a repair's process group then reuses this server, not a second
            )
        except (RuntimeError, OSError) as exc:
            raise PathError(
                f"{addr}:{port}", f"cannot reach the job's rendezvous store ({exc}); check MASTER_ADDR and MASTER_PORT"
            ) from None
        run = f"{env.get('TORCHELASTIC_RUN_ID', 'run')}/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        cls.joined += 1  # every rank joins its groups in the same order: the n-th group is one group
        group = cls(rank, world, store, f"cachedoctor/{run}/{cls.joined}", hosts)
        group._start()
        group._set(f"host/{rank}", group.host)  # last: a rank named here can be told SIGTERM
        return group

    def _start(self) -> None:
        beat = self.store.clone()  # the thread's own connection: a store client is not shared
        key = f"{self.ns}/beat/{self.rank}"

        def run() -> None:
            while not self._stop.wait(BEAT_S):
                try:
                    beat.add(key, 1)
                except Exception:  # the store is gone: the main thread finds out when it waits
                    return

        beat.add(key, 1)
        threading.Thread(target=run, name="cachedoctor-heartbeat", daemon=True).start()
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._terminated)

    def close(self, wait: bool = True) -> None:
        """Leave the group. Rank 0 leaves last (``wait``): it holds the verdict, and a launcher
        that sees one rank exit non-zero stops the others at once, so every other rank must be
        gone first (they exit 0 once their part is shared, and say so as their process ends);
        where rank 0 hosts the store, the others may still be reading from it. It waits at most
        :data:`LEAVE_S`, and not for a rank that is gone. A run that failed leaves at once."""
        if self._closed:
            return
        self._closed = True
        if not self.leader:
            atexit.register(self._leave)  # as late as this process can say it
            return
        try:
            self._leave()
            deadline = time.monotonic() + LEAVE_S
            checked = time.monotonic()
            while wait and self.store.add(f"{self.ns}/left", 0) < self.world and time.monotonic() < deadline:
                if time.monotonic() - checked > self.check_s:  # a rank gone before it could say so
                    checked = time.monotonic()
                    gone = [r for r in range(self.world) if not self.store.check([f"{self.ns}/done/{r}"])]
                    if self._stalled(gone):
                        break
                time.sleep(POLL_S)
            if wait:
                time.sleep(LEAVE_GRACE_S)  # their interpreters are shutting down
        except (RankStopped, RuntimeError, OSError):
            pass  # a rank gone after the report was made: nothing is left to wait for
        finally:
            self._stop.set()

    def _leave(self) -> None:
        try:
            self.store.set(f"{self.ns}/done/{self.rank}", "1")
            self.store.add(f"{self.ns}/left", 1)
        except Exception:
            pass
        self._stop.set()

    # --- the exchange -----------------------------------------------------------------------

    def share(self, payload: bytes) -> list[bytes]:
        """Every rank's ``payload``, in rank order: on every rank, or (not :attr:`everyone`: a
        scan, which rank 0 alone reports) on rank 0, the others getting their own back at once.

        Waiting costs the store two requests a poll whatever the number of ranks (a counter of
        the parts posted, one of the failures), and every few seconds one per rank still
        missing (its part, then its heartbeat)."""
        self._step += 1
        step = f"{self.ns}/s{self._step}"
        test_kill(self.rank, self.world, self.store, self.ns)
        test_hang(self.rank)
        self._set(f"s{self._step}/part/{self.rank}", payload)
        self._call(self.store.add, f"{step}/posted", 1)
        if not self.everyone and not self.leader:
            return [payload]
        checked = time.monotonic()
        while self._call(self.store.add, f"{step}/posted", 0) < self.world:
            self._watch_failures()
            if time.monotonic() - checked > self.check_s:
                checked = time.monotonic()
                missing = [r for r in range(self.world) if not self._call(self.store.check, [f"{step}/part/{r}"])]
                self._stop_if_stalled(missing)
            time.sleep(POLL_S)
        return [
            payload if r == self.rank else self._call(self.store.get, f"{step}/part/{r}") for r in range(self.world)
        ]

    def fail(self, exc: Exception) -> NoReturn:
        """Raise what this rank ends with when its own work failed (``exc``), the others told
        first: :class:`RankStopped` with the line rank 0 prints, or ``exc`` itself for a bug (its
        traceback is what a report needs, here)."""
        line = line_of(exc)
        if line is None:
            self._post_failure(
                f"stopped by an internal error ({type(exc).__name__}); its traceback is in rank {self.rank}'s log"
            )
            raise exc
        self._post_failure(line)
        raise RankStopped(f"rank {self.rank} on {self.host}: {line}" if self.leader else None) from exc

    def _post_failure(self, line: str) -> None:
        try:
            self.store.set(f"{self.ns}/fail/{self.rank}", line)
            self.store.add(f"{self.ns}/failed", 1)
            if self.hosts_store:  # the others read it from this process: give them the time to
                deadline = time.monotonic() + 5
                while self.store.add(f"{self.ns}/seen", 0) < self.world - 1 and time.monotonic() < deadline:
                    time.sleep(POLL_S)
        except Exception:
            pass

    # --- watching the others ----------------------------------------------------------------

    def _watch_failures(self) -> None:
        """Raise :class:`RankStopped` if a rank posted a failure (one counter request a poll)."""
        if self._call(self.store.add, f"{self.ns}/failed", 0) == 0:
            return
        for r in range(self.world):
            key = f"{self.ns}/fail/{r}"
            if r != self.rank and self._call(self.store.check, [key]):
                line = self._call(self.store.get, key).decode("utf-8", "replace")
                self._call(self.store.add, f"{self.ns}/seen", 1)
                self._stop_with(f"rank {r} on {self.host_of(r)}: {line}", ranks_gone=[r])

    def _stalled(self, ranks: list[int]) -> list[tuple[int, float]]:
        """Of ``ranks``, those whose heartbeat has not moved for ``stall_s``: (rank, seconds)."""
        out = []
        now = time.monotonic()
        for r in ranks:
            if r == self.rank:
                continue
            beats = int(self._call(self.store.add, f"{self.ns}/beat/{r}", 0))
            last = self._beats.get(r)
            if last is None or last[0] != beats:
                self._beats[r] = (beats, now)
            elif now - last[1] > self.stall_s:
                out.append((r, now - last[1]))
        return out

    def _stop_if_stalled(self, ranks: list[int]) -> None:
        for r, quiet in self._stalled(ranks)[:1]:
            self._stop_with(
                f"rank {r} on {self.host_of(r)} stopped answering {quiet:.0f} s ago (killed, hung, or "
                f"its machine is gone); {AGAIN}",
                ranks_gone=[r],
            )

    def _stop_with(self, line: str, ranks_gone: list[int]) -> None:
        """Raise :class:`RankStopped`: the line on the lowest rank still there, nothing elsewhere."""
        printer = min(r for r in range(self.world) if r not in ranks_gone)
        raise RankStopped(line if self.rank == printer else None)

    def _terminated(self, signum: int, frame: Any) -> None:
        """SIGTERM: the launcher is stopping the job (a rank ended badly) or a person is."""
        try:
            store = self.store.clone()  # the main thread may be inside a request on its own connection
            store.set(f"{self.ns}/term/{self.rank}", self.host)
            deadline = time.monotonic() + TERM_GRACE_S
            gone = list(range(self.world))
            while gone and time.monotonic() < deadline:
                gone = [r for r in gone if not store.check([f"{self.ns}/term/{r}"])]
                gone = [r for r in gone if not store.check([f"{self.ns}/done/{r}"])]  # finished first
                time.sleep(POLL_S)
        except Exception:
            gone, store = [], None
        if gone:
            names = ", ".join(f"rank {r} on {self.host_of(r, store)}" for r in gone)
            self._stop_with(
                f"{names} ended first (killed, or out of memory) and the launcher stopped the others; {AGAIN}",
                ranks_gone=gone,
            )
        self._stop_with(
            f"stopped by SIGTERM (from the launcher or a person); {AGAIN}",
            ranks_gone=[],
        )

    def host_of(self, rank: int, store: Any = None) -> str:
        if rank not in self._hosts:
            store = store if store is not None else self.store
            try:
                key = f"{self.ns}/host/{rank}"
                self._hosts[rank] = store.get(key).decode() if store.check([key]) else "an unknown host"
            except Exception:
                return "an unknown host"
        return self._hosts[rank]

    # --- the store --------------------------------------------------------------------------

    def _set(self, key: str, value: bytes | str) -> None:
        self._call(self.store.set, f"{self.ns}/{key}", value)

    def _call(self, method: Any, *args: Any) -> Any:
        """A store request; a store that is gone means rank 0 (or the launcher) is. A request cut
        short by a signal (SIGTERM: its handler runs next) is sent again, not taken for that."""
        for _ in range(3):
            try:
                return method(*args)
            except (RuntimeError, OSError) as exc:  # torch's DistStoreError is a RuntimeError
                if self._answers():
                    continue
                self._stop_with(
                    f"rank 0 on {self._hosts.get(0, 'its host')} (or the launcher) is gone: the job's rendezvous "
                    f"store stopped answering ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); "
                    "no report was written; run the same command again",
                    ranks_gone=[0],
                )
        return method(*args)

    def _answers(self) -> bool:
        """Whether the store answers a new connection."""
        try:
            self.store.clone().add(f"{self.ns}/alive", 0)
        except Exception:
            return False
        return True


__all__ = ["RankGroup", "RankStopped"]
