"""SimpleTuner's ``MultiAspectSampler`` and the per-rank bucket split before it (commit bc8e6ab).

Rules, as read in ``simpletuner/helpers``:

- Pruning (``metadata/backends/base.py`` 1024-1037 ``_enforce_min_bucket_size``, 1083-1112
  ``_prune_small_buckets``): only when the dataset sets ``minimum_image_size`` and
  ``--disable_bucket_pruning`` is off, a bucket with ``images * (repeats + 1) < batch_size``
  is deleted: its images never train (``dropped``).
- Start-up (741-866 ``split_buckets_between_processes``): the effective batch is ``batch_size
  * processes * gradient_accumulation_steps``; a bucket with ``images * (repeats + 1)`` below it
  stops the trainer ("Dataset configuration will produce zero usable batches"), unless
  ``--allow_dataset_oversubscription`` is on and the dataset sets no ``repeats``: then the
  bucket is repeated up to a whole number of effective batches, the same share on every rank
  (883-895).
- Split (897-935): each bucket's images are dealt contiguously, the first ``images % ranks``
  ranks getting one more; with padding (``apply_padding``, ``data_backend/factory.py`` 3273:
  on when ``max_train_steps`` is unset or oversubscription is allowed) the short ranks repeat
  the bucket's last image, so every rank holds the same count. ``repeats`` never duplicates an
  image here or in the sampler: it only enters the two size tests above (and ``__len__``).
- Sampling (``multiaspect/sampler.py`` 536-580 ``_get_next_bucket``/``change_bucket``,
  1041-1140 ``__iter__``): one batch per visit, round robin over the buckets not yet
  exhausted; a bucket with fewer unseen images than a batch is topped up with seen ones; a bucket
  with none left is retired. After a *topped-up* batch the sampler retires the bucket it has
  just moved on to (the test at 1126-1131 reads the previous bucket's count), so that bucket's
  unseen images wait for the next epoch. The epoch ends when every bucket is retired
  (``_reset_buckets``, 406-433), and the next one starts one bucket further on: epochs differ.

The model follows that state machine on counts. Bucket order is the order of the metadata's
``aspect_ratio_bucket_indices``; cachedoctor knows buckets by latent size in the order the
images were listed, which is the same order for a dataset cached in one pass.
"""

from __future__ import annotations

from collections import Counter

from cachedoctor.layouts.samplers.interface import Buckets, RankSplit, Sampler, ceil_div, share


class SimpleTunerSampler(Sampler):
    name = "simpletuner"
    commit = "bc8e6ab"
    remedy = "unset max_train_steps (SimpleTuner then pads each bucket to the same count on every rank)"

    def split(self, buckets: Buckets, world_size: int, batch_size: int) -> RankSplit:
        options = buckets.options
        repeats = int(buckets.repeats or 0)
        grad_acc = int(options.get("gradient_accumulation_steps") or 1)
        oversubscribe = bool(options.get("allow_dataset_oversubscription"))
        counts = {b: n for b, n in buckets.counts.items() if n > 0}
        dropped: dict[str, int] = {}
        if options.get("minimum_image_size") is not None and not options.get("disable_bucket_pruning"):
            dropped = {b: n for b, n in counts.items() if n * (repeats + 1) < batch_size}
            counts = {b: n for b, n in counts.items() if b not in dropped}
        effective = batch_size * world_size * grad_acc
        short = {b: n for b, n in counts.items() if n * (repeats + 1) < effective}
        auto = oversubscribe and repeats == 0
        if short and not auto:
            listed = ", ".join(f"{b} ({n})" for b, n in short.items())
            return RankSplit(
                self.name,
                (0,) * world_size,
                {b: (0,) * world_size for b in counts},
                dropped,
                refused=f"SimpleTuner stops at start-up: bucket(s) {listed} hold fewer than the effective "
                f"batch of {effective} (batch {batch_size} x {world_size} ranks x {grad_acc} accumulation)",
            )
        pad = not options.get("max_train_steps") or oversubscribe
        local: list[dict[str, int]] = []
        for rank in range(world_size):
            mine: dict[str, int] = {}
            for b, n in counts.items():
                if b in short:  # auto-repeated to whole effective batches, the same on every rank
                    mine[b] = ceil_div(n * (ceil_div(effective, n)), effective) * effective // world_size
                elif pad:
                    mine[b] = ceil_div(n, world_size)
                else:
                    mine[b] = share(n, world_size, rank)
            local.append(mine)
        order = list(counts)
        empty = [r for r, mine in enumerate(local) if not any(mine.values())]
        if empty:
            return RankSplit(
                self.name,
                tuple(sum(1 for n in mine.values() if n) for mine in local),
                {b: tuple(mine[b] for mine in local) for b in order},
                dropped,
                refused=f"SimpleTuner stops at start-up: rank(s) {', '.join(map(str, empty))} get no image "
                f"of the split ({sum(counts.values())} images over {world_size} ranks)",
            )
        runs = [_Rank(order, mine, batch_size) for mine in local]
        passes = repeats + 1  # a training epoch samples the dataset repeats + 1 times
        first = [run.epochs(passes) for run in runs]
        second = [run.epochs(passes) for run in runs]
        by_bucket = {b: tuple(f[1].get(b, 0) for f in first) for b in order}
        steps = tuple(f[0] for f in first)
        later = tuple(s[0] for s in second)
        notes = []
        skipped = {b for f in (*first, *second) for b in f[2]}
        if skipped:
            notes.append(
                "after a topped-up batch SimpleTuner's sampler retires the next bucket for the rest of the "
                f"epoch: bucket(s) {', '.join(sorted(skipped))} lose their unseen images in some epochs"
            )
        return RankSplit(self.name, steps, by_bucket, dropped, None, tuple(notes), (later,) if later != steps else ())


class _Rank:
    """One rank's ``MultiAspectSampler`` on counts: the bucket list, the retired buckets, each
    bucket's unseen images and the current position, kept from one epoch to the next."""

    def __init__(self, order: list[str], local: dict[str, int], batch_size: int) -> None:
        self.order = [b for b in order if local.get(b, 0) > 0]
        self.local = local
        self.batch = batch_size
        self.current: int | None = None

    def epochs(self, passes: int) -> tuple[int, dict[str, int], set[str]]:
        """``passes`` sampler epochs in a row, added up: one training epoch of a dataset with
        ``repeats = passes - 1``. An epoch depends only on the bucket it starts at, so the
        passes fall into a cycle of at most one per bucket: it is run once and multiplied (a
        dataset's ``repeats`` is untrusted input, and may be 10**30)."""
        steps, per_bucket, skipped = 0, Counter[str](), set[str]()
        history: list[tuple[int | None, int, dict[str, int], set[str]]] = []
        seen: dict[int | None, int] = {}
        done = 0
        while done < passes:
            state = self.current
            if state in seen:
                cycle = history[seen[state] :]
                full, rest = divmod(passes - done, len(cycle))
                for i, (_, n, per, gone) in enumerate(cycle):
                    times = full + (1 if i < rest else 0)
                    if times:
                        steps += n * times
                        per_bucket.update({b: c * times for b, c in per.items()})
                        skipped |= gone
                self.current = cycle[rest][0] if rest else state
                break
            seen[state] = len(history)
            n, per, gone = self.epoch()
            history.append((state, n, per, gone))
            steps += n
            per_bucket.update(per)
            skipped |= gone
            done += 1
        return steps, dict(per_bucket), skipped

    def epoch(self) -> tuple[int, dict[str, int], set[str]]:
        """Batches in one epoch, per bucket, and the buckets retired with unseen images."""
        live = list(self.order)
        unseen = {b: self.local[b] for b in live}
        per_bucket: dict[str, int] = {}
        skipped: set[str] = set()
        steps = 0
        if not live:
            return 0, per_bucket, skipped
        self._advance(live)
        while True:
            available = 0
            for _ in range(len(live)):  # find a bucket with unseen images
                available = unseen[live[self.current or 0]]
                if available > 0:
                    break
                if not self._retire(live):
                    return steps, per_bucket, skipped
            if available > 0:
                bucket = live[self.current or 0]
                unseen[bucket] -= min(available, self.batch)
                per_bucket[bucket] = per_bucket.get(bucket, 0) + 1
                steps += 1
                self._advance(live)
            if available < self.batch:  # the previous bucket's count decides; the current one goes
                gone = live[self.current or 0]
                if unseen[gone] > 0:
                    skipped.add(gone)
                if not self._retire(live):
                    return steps, per_bucket, skipped
            if available == 0:
                self._end(live)
                return steps, per_bucket, skipped

    def _advance(self, live: list[str]) -> None:
        self.current = 0 if self.current is None else (self.current + 1) % len(live)

    def _retire(self, live: list[str]) -> bool:
        """Retire the current bucket and move on; ``False`` at the end of the epoch."""
        live.pop(self.current or 0)
        if not live:
            self._end(live)
            return False
        self._advance(live)
        return True

    def _end(self, live: list[str]) -> None:
        # _reset_buckets reloads every bucket and moves on once more before the epoch ends
        live[:] = list(self.order)
        self._advance(live)
