"""``shape-mismatch``: a tensor's shape is not the one its peers, its name or its bucket say.

Three sources of truth, strongest last:

- peers: rank and feature dimension (latent channels, embedding width) against the strict
  majority of the folder's files with the same keys. Spatial sizes vary legitimately with
  aspect buckets, so they are not compared here; a leading batch dimension is ``batch-leak``'s;
- the key: kohya names each latent after its size (``latents_<h>x<w>``), musubi-tuner after its
  frames and size (``latents_<F>x<H>x<W>_<dtype>``), so a tensor under such a key must be that
  size (``keynames.size_disagrees``): musubi batches latents by the size their names spell;
- the dataset: the bucket's target size (SimpleTuner's bucket metadata, OneTrainer's
  ``crop_resolution``) divided by the VAE's factor 8, or the exact shape a manifest records.

Any of them means the trainer would stack mismatched tensors or train at the wrong size.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from cachedoctor import keynames
from cachedoctor.checks.batch_leak import is_leading_batch
from cachedoctor.checks.interface import Check, Found, Inspected, PeerGroup, feature_dim
from cachedoctor.findings import Finding, Fix, Severity

if TYPE_CHECKING:  # type-only: importing formats/layouts would load every reader (explain, --version stay light)
    from cachedoctor.layouts.interface import Expected


class ShapeMismatch(Check):
    kind = "shape-mismatch"
    severity = Severity.ERROR
    fix = Fix.RECOMPUTE
    summary = (
        "a latent's shape differs from its bucket's size, from the size in its key, or from its peers' rank or channels"
    )
    why = (
        "Latents of one batch must share a shape: a wrong-size latent fails torch.stack in "
        'the collate function ("stack expects each tensor to be equal size, but got [4, 8, '
        '8] at entry 0 and [4, 8, 9] at entry 1"), but only once it shares a batch with a '
        "right one, possibly hours in. Alone in its bucket it trains at the wrong size "
        "against the bucket's crop and size conditioning; a wrong channel count (4 for SDXL, "
        '16 for Flux and SD3: a cache made by another VAE) fails the first layer ("expected '
        'input to have 16 channels, but got 4 channels instead").'
    )
    repair = (
        "recompute: the image is resized and cropped to the size the layout records "
        "(SimpleTuner's bucket metadata target_size, OneTrainer's crop_resolution, "
        "kohya's latents_<h>x<w> key, a manifest's shape or latent_hw), encoded again, "
        "and the wrong file goes to the quarantine."
    )

    def check_file(self, item: Inspected) -> Iterable[Finding]:
        if item.meta is None:
            return
        for t in item.meta.tensors:
            name = keynames.parse(t.key)
            if name.dims is None or not keynames.is_latent_family(name.family):
                continue
            if keynames.size_disagrees(name.dims, t.shape):
                spelled = "x".join(str(d) for d in name.dims)
                yield self.finding(
                    item.path,
                    f"{t.key} has shape {list(t.shape)}: its key says {spelled}",
                    key=t.key,
                    shape=list(t.shape),
                    expected_hw=list(name.dims[-2:]),
                    key_dims=list(name.dims),
                )

    def check_peers(self, group: PeerGroup) -> Iterable[Finding]:
        for key in group.keys():  # noqa: SIM118 - PeerGroup.keys() is a sorted list, not a dict view
            rank, _ = group.majority(key, lambda t: len(t.shape))
            if rank is None:
                continue
            feature, _ = group.majority(key, lambda t: feature_dim(t.label, t.shape) if len(t.shape) == rank else None)  # noqa: B023 - called at once
            for tensors, paths in group.variants.items():
                for t in tensors:
                    if t.key != key or is_leading_batch(t.shape, rank, feature, t.label):
                        continue
                    mine = feature_dim(t.label, t.shape)
                    if len(t.shape) != rank:
                        why = f"rank {len(t.shape)} where peers have rank {rank}"
                    elif feature is not None and mine != feature:
                        why = f"{mine} channels where peers have {feature}"
                    else:
                        continue
                    for path in paths:
                        yield self.finding(
                            path,
                            f"{t.label} has shape {list(t.shape)}: {why}",
                            key=t.label,
                            shape=list(t.shape),
                            peer_rank=rank,
                            peer_channels=feature,
                        )

    def check_entry(self, expected: Expected | None, found: Found | None) -> Iterable[Finding]:
        if expected is None or found is None or not found.tensors or not expected.in_index:
            return
        if expected.shape is None and expected.latent_hw is None and expected.frames is None:
            return
        # a file of several items (a diffusion-pipe shard) holds one latent per item: each is judged
        latents = _latents_of(found.tensors, expected.latent_key)
        for key, shape in latents:
            finding = self._judge_entry(expected, found, key, shape)
            if finding is not None:
                yield finding
                return

    def _judge_entry(self, expected: Expected, found: Found, key: str, shape: tuple[int, ...]) -> Finding | None:
        label = key or "<root>"
        if expected.shape is not None:
            if tuple(shape) != tuple(expected.shape):
                return self.finding(
                    found.path,
                    f"{label} has shape {list(shape)}; the manifest records {list(expected.shape)}",
                    source=expected.source,
                    key=label,
                    shape=list(shape),
                    expected=list(expected.shape),
                )
            return None
        if expected.latent_hw is not None and (len(shape) < 3 or tuple(shape[-2:]) != tuple(expected.latent_hw)):
            h, w = expected.latent_hw
            return self.finding(
                found.path,
                f"{label} has shape {list(shape)}; its bucket's target size needs [..., {h}, {w}] (pixels / 8)",
                source=expected.source,
                key=label,
                shape=list(shape),
                expected_hw=[h, w],
            )
        if expected.frames is not None and len(shape) == 4 and shape[1] != expected.frames:
            return self.finding(
                found.path,
                f"{label} has shape {list(shape)}: {shape[1]} latent frames where its window needs {expected.frames}",
                source=expected.source,
                key=label,
                shape=list(shape),
                expected_frames=expected.frames,
            )
        return None


def _latents_of(tensors: tuple[tuple[str, tuple[int, ...]], ...], key: str | None) -> list[tuple[str, tuple[int, ...]]]:
    """The latent(s) of an entry: every tensor of the key family ``item */...`` names (one per
    item of a shard), else the one :func:`_latent_of` picks."""
    if key is not None and key.startswith("item */"):
        return [(k, s) for k, s in tensors if keynames.family(k) == key]
    picked = _latent_of(tensors, key)
    return [picked] if picked is not None else []


def _latent_of(tensors: tuple[tuple[str, tuple[int, ...]], ...], key: str | None) -> tuple[str, tuple[int, ...]] | None:
    """The tensor that holds the latent: the named key (or a key of that family: musubi-tuner's
    ``latents_FxHxW`` names ``latents_1x16x12_bfloat16``), else the largest of rank >= 3."""
    if key is not None:
        return next(((k, s) for k, s in tensors if k == key or keynames.family(k) == key), None)
    best = None
    for k, s in tensors:
        if len(s) >= 3:
            n = 1
            for d in s:
                n *= d
            if best is None or n > best[0]:
                best = (n, k, s)
    return None if best is None else (best[1], best[2])
