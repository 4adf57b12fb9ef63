"""How recompute work is cut up: items batched by identical target shape, batches dealt by cost.

Split from ``pool.py``, which runs the batches on worker processes; this part is pure planning
(no torch, no processes) and deterministic, so every rank of a distributed repair computes the
same split without talking to the others.
"""

from __future__ import annotations

from cachedoctor.repair.model import Action

Batch = list[Action]


def make_batches(actions: list[Action], batch_size: int) -> list[Batch]:
    """Group by target shape, then cut into batches of at most ``batch_size``."""
    groups: dict[tuple, list[Action]] = {}
    for action in sorted(actions, key=lambda a: a.path):
        assert action.spec is not None
        groups.setdefault(action.spec.batch_key(), []).append(action)
    return [items[i : i + batch_size] for items in groups.values() for i in range(0, len(items), batch_size)]


def batch_cost(batch: Batch) -> int:
    return sum(a.spec.cost() for a in batch if a.spec is not None)


def split(batches: list[Batch], shares: int) -> list[list[Batch]]:
    """Longest-processing-time-first: deterministic, so every rank computes the same split."""
    loads = [0] * shares
    out: list[list[Batch]] = [[] for _ in range(shares)]
    for batch in sorted(batches, key=lambda b: (-batch_cost(b), b[0].path)):
        i = min(range(shares), key=lambda k: (loads[k], k))
        out[i].append(batch)
        loads[i] += batch_cost(batch)
    return out
