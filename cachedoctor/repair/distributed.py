"""Running under ``torchrun`` / ``accelerate launch``: every rank plans the same work from the
same scan, takes its deterministic share, writes on ``cuda:LOCAL_RANK`` and keeps its own
journal. Collectives happen only before the work (agreeing on one run id) and after it (rank 0
gathers the results, with a timeout), never inside it: a rank with less work must not hang.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cachedoctor.sharding.ranks import RankGroup

GATHER_TIMEOUT_S = 1800


@dataclass(frozen=True, slots=True)
class Rank:
    rank: int = 0
    world: int = 1
    local: int = 0

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @property
    def leader(self) -> bool:
        return self.rank == 0


def from_env(env: dict[str, str] | None = None) -> Rank:
    env = dict(os.environ) if env is None else env
    try:
        return Rank(int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1)), int(env.get("LOCAL_RANK", 0)))
    except ValueError:
        return Rank()


def join(rank: Rank) -> RankGroup | None:
    """The ranks' meeting place (``sharding/ranks.py``), where the scans before and after the
    work are split by shard and their parts exchanged; ``None`` for a plain repair."""
    if not rank.distributed:
        return None
    from cachedoctor.sharding.ranks import RankGroup

    return RankGroup.join()


def init(rank: Rank) -> None:
    if not rank.distributed:
        return  # a plain repair: importing torch here alone cost 1.4 s of every run
    import torch.distributed as dist

    if not dist.is_initialized():  # rank 0's store server, where it hosts one, is the group's (multi-tenant)
        dist.init_process_group(
            "gloo", rank=rank.rank, world_size=rank.world, timeout=timedelta(seconds=GATHER_TIMEOUT_S)
        )


def barrier(rank: Rank) -> None:
    if rank.distributed:
        import torch.distributed as dist

        dist.barrier()


def agree(rank: Rank, value: Any) -> Any:
    """Rank 0's ``value`` on every rank (the run id), before any work starts."""
    if not rank.distributed:
        return value
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather(rank: Rank, value: Any) -> list[Any] | None:
    """Every rank's ``value`` on rank 0 (``None`` elsewhere), after the work."""
    if not rank.distributed:
        return [value]
    import torch.distributed as dist

    out: list[Any] | None = [None] * rank.world if rank.leader else None
    dist.gather_object(value, out, dst=0)
    return out


def finish(rank: Rank) -> None:
    if rank.distributed:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
