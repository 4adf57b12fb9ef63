"""Recompute on many devices: one worker process per GPU (or N on the CPU), work split by cost (``batches.py``).

Items are batched by identical target shape, batches are dealt longest first to the least
loaded worker (so workers finish together), and each worker decodes and resizes its next
batches on a thread pool while the current one encodes. Workers never talk to each other: a
worker with less work just finishes; results go back over a queue to the parent, which alone
writes the journal. A worker whose parent dies is killed with it (``PR_SET_PDEATHSIG``), so a
SIGKILLed repair leaves no orphan writing behind the next one's back.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeAlias

from cachedoctor.errors import PathError
from cachedoctor.lifetime import die_with_parent, reraise_interrupt
from cachedoctor.repair.batches import Batch, batch_cost, make_batches, split
from cachedoctor.repair.model import Action, ItemResult, ItemState, RepairError
from cachedoctor.repair.peer_scale import EncoderUsed
from cachedoctor.repair.posterior import Models
from cachedoctor.repair.sink import LocalSink

if TYPE_CHECKING:
    import torch

    from cachedoctor.encoders.interface import Encoder
    from cachedoctor.layouts.prepare import Prepared
    from cachedoctor.repair.sink import Sink

OnResult = Callable[[ItemResult], None]


#: What the decode thread makes of one item: the resized image, the error that stopped it, or
#: ``None`` for a text item.
Ready: TypeAlias = "Prepared | Exception | None"


def _prepared(batches: list[Batch], downscale: int, sink: Sink) -> Iterator[tuple[Batch, list[Ready]]]:
    """Decode and resize ahead of the encoder (two batches in flight on a small thread pool)."""

    def prepare(batch: Batch) -> list[Ready]:
        out: list[Ready] = []
        for action in batch:
            try:
                out.append(sink.prepare(action.recompute, downscale) if action.recompute.role == "latent" else None)
            except Exception as exc:  # a missing or undecodable image fails its own item only
                out.append(exc)
        return out

    # One thread: it runs two batches ahead, and PIL's decode and resize release the GIL, so it
    # overlaps with encoding without taking a second core from torch's own threads.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="cachedoctor-prefetch") as pool:
        futures = [pool.submit(prepare, b) for b in batches[:2]]
        for i, batch in enumerate(batches):
            if i + 2 < len(batches):
                futures.append(pool.submit(prepare, batches[i + 2]))
            yield batch, futures[i].result()


def cpu_threads(workers_on_cpu: int) -> int:
    """torch threads for one CPU worker: its share of the cores, less one for the prefetch
    thread (on 2 cores, 1 thread encodes while 1 decodes: 1.04x a bare 2-thread loop, against
    0.70x when both compete; see bench/README.md)."""
    return max(1, (os.cpu_count() or 1) // max(1, workers_on_cpu) - 1)


def work(
    batches: list[Batch],
    models: Models,
    device: str,
    run_id: str,
    on_result: OnResult,
    workers_on_cpu: int = 1,
    sink: Sink | None = None,
) -> None:
    """Encode and write every item of ``batches`` on ``device`` (runs in a worker or in-process);
    ``sink``: where sources are read and files written (``sink.py``; default: local files)."""
    import torch

    threads = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(cpu_threads(workers_on_cpu))
    try:
        _work(batches, models, device, sink or LocalSink(run_id), on_result)
    finally:
        torch.set_num_threads(threads)  # in-process callers (tests, the API) get theirs back


def _work(batches: list[Batch], models: Models, device: str, sink: Sink, on_result: OnResult) -> None:
    from cachedoctor.encoders import load_encoder

    encoders = {}
    given: dict[str, EncoderUsed] = {}  # role -> the --encoder as written, and its factors (a refusal names it)
    for spec in models.encoders:
        encoder = load_encoder(spec)
        try:
            encoder.load(device)
        except PathError:
            raise
        except Exception as exc:  # out of memory, a CUDA error, weights the library refuses
            reraise_interrupt(exc)
            raise RepairError(
                spec,
                f"cannot load it on {device} ({type(exc).__name__}: {exc}); "
                "nothing was recomputed. Check the model and the device, then run again",
            ) from None
        role = "latent" if encoder.modality.value == "image" else "text"
        encoders[role], given[role] = encoder, EncoderUsed.of(spec, encoder.scaling)
    image = encoders.get("latent")
    texts_first = [b for b in batches if b[0].recompute.role == "text"]
    images = [b for b in batches if b[0].recompute.role == "latent"]
    for batch in texts_first:
        _run_text(batch, encoders["text"], sink, on_result, given["text"])
    if not images:
        return
    if image is None:  # the planner blocks latent items without an image encoder
        raise RepairError("--encoder", "latent items to recompute but no image encoder loaded")
    # Writes (lock, temp file, fsyncs, quarantine link, read-back) wait on the disk more than they
    # use a core: one writer thread keeps them off the encoder's path. A full disk raised there
    # stops the loop at the next batch.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="cachedoctor-writer") as writer:
        pending: list = []
        for batch, prepared in _prepared(images, image.downscale, sink):
            for future in [f for f in pending if f.done()]:
                future.result()
            pending = [f for f in pending if not f.done()]
            _encode_batch(batch, prepared, (image, given["latent"]), models, sink, on_result, writer, pending)
        for future in pending:
            future.result()


def _encode_batch(
    batch: Batch,
    prepared: list[Ready],
    encoder: tuple[Encoder, EncoderUsed],
    models: Models,
    sink: Sink,
    on_result: OnResult,
    writer: ThreadPoolExecutor,
    pending: list[Future[None]],
) -> None:
    import torch

    from cachedoctor.layouts.prepare import Prepared
    from cachedoctor.repair.recompute import build_file

    image, given = encoder  # the loaded encoder, and its --encoder as given
    ok = [(a, p) for a, p in zip(batch, prepared, strict=False) if isinstance(p, Prepared)]  # latent items only
    for action, problem in zip(batch, prepared, strict=False):
        if isinstance(problem, Exception):
            failed = ItemResult(action.path, action.kind, ItemState.FAILED, f"cannot read its source: {problem}")
            pending.append(writer.submit(on_result, failed))  # results reach the journal from one thread only
    if not ok:
        return
    pixels = torch.stack([p.pixels for _a, p in ok])
    out = image.encode(pixels)
    mirrored = image.encode(torch.flip(pixels, dims=[3])) if any(a.recompute.flipped for a, _p in ok) else None
    for i, (action, prep) in enumerate(ok):
        latent = _latent(out, i, image, models, action, action.path)
        flip = _latent(mirrored, i, image, models, action, action.path + "#flipped") if mirrored else None

        def make(
            a: Action, latent: torch.Tensor = latent, flip: torch.Tensor | None = flip, prep: Prepared = prep
        ) -> bytes:
            return build_file(a.recompute, latent=latent, flipped=flip, prepared=prep, encoder=image.name)

        def write(action: Action = action, make: Callable[[Action], bytes] = make) -> None:
            on_result(sink.write(action, make, given))

        pending.append(writer.submit(write))


def _latent(out: dict[str, Any], i: int, image: Encoder, models: Models, action: Action, name: str) -> torch.Tensor:
    """Item ``i``'s latent as the layout stores it: drawn from the posterior, then scaled when
    the trainer caches scaled latents (the flipped one too: sd-scripts' Flux stores both scaled)."""
    from cachedoctor.repair.posterior import draw

    std = out.get("latent_std")
    spec = action.recompute
    latent = draw(models, out["latent"][i], std[i] if std is not None else None, name, action.root, spec.posterior)
    if not spec.scaled:
        return latent
    if spec.scaling is not None:  # the trainer's own factors, which the layout knows (ai-toolkit's 0.18215)
        from cachedoctor.encoders.interface import Scaling

        return Scaling(*spec.scaling).apply(latent)
    return image.scaling.apply(latent)


def _run_text(batch: Batch, encoder: Encoder, sink: Sink, on_result: OnResult, given: EncoderUsed) -> None:
    from cachedoctor.repair.recompute import build_file

    outputs = encoder.encode([a.recompute.text for a in batch])
    for i, action in enumerate(batch):
        item = {k: v[i] for k, v in outputs.items()}

        def make(a: Action, item: dict[str, torch.Tensor] = item) -> bytes:
            return build_file(a.recompute, texts=item, encoder=encoder.name)

        on_result(sink.write(action, make, given))


def _worker_main(
    batches: list[Batch],
    models: Models,
    device: str,
    run_id: str,
    queue: Any,
    workers_on_cpu: int,
    parent: int | None = None,
) -> None:
    # With the parent's pid: a spawned worker starts Python before it gets here, and a parent
    # SIGKILLed in that window would otherwise leave it running on, writing to the cache.
    die_with_parent(parent)
    try:
        work(batches, models, device, run_id, queue.put, workers_on_cpu)
    except BaseException as exc:  # reported by the parent; the items stay unfinished in the journal
        queue.put(("error", f"{type(exc).__name__}: {exc}"))
        raise SystemExit(1) from None
    queue.put(("done", device))


def run_pool(
    shares: list[list[Batch]], models: Models, devices: list[str], run_id: str, on_result: OnResult
) -> list[str]:
    """Start one process per device with its share; feed results to ``on_result``. Returns
    problems of workers that died (their items stay unfinished for the next run)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = []
    for share, device in zip(shares, devices, strict=False):
        if share:
            proc = ctx.Process(
                target=_worker_main,
                daemon=True,
                args=(share, models, device, run_id, queue, devices.count("cpu"), os.getpid()),
            )
            proc.start()
            procs.append(proc)
    problems: list[str] = []
    running = len(procs)
    while running:
        try:
            message = queue.get(timeout=1.0)
        except Exception:  # queue.Empty: check for workers that died without a word
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead and all(p.exitcode is not None for p in procs):
                problems.extend(f"a worker exited with code {p.exitcode}" for p in dead)
                break
            continue
        if isinstance(message, ItemResult):
            on_result(message)
        elif message[0] == "error":
            problems.append(message[1])
            running -= 1
        else:
            running -= 1
    for proc in procs:
        proc.join(timeout=30)
    return problems


def devices_for(gpus: int | None, device: str, workers: int) -> list[str]:
    if gpus:
        return [f"cuda:{i}" for i in range(gpus)]
    return [device] * max(1, workers)


def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


__all__ = [
    "Batch",
    "batch_cost",
    "devices_for",
    "make_batches",
    "run_pool",
    "split",
    "visible_gpus",
    "work",
]  # the batching is in batches.py; still importable from here
