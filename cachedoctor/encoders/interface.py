"""The encoder adapter interface (API version 1) that ``repair --encoder`` recomputes with.

A repair that recomputes a latent or a text embed must produce exactly what the trainer would
have cached, so the interface pins down the parts that vary between trainers: inputs and outputs
are float32 CPU tensors, image latents come back *raw* (the caller decides whether to apply
:class:`Scaling`), and encoding is deterministic so a resumed repair writes the same bytes.

Encoders cross process boundaries as their spec string, not as objects: each worker rebuilds
one through :func:`cachedoctor.encoders.load_encoder` and calls :meth:`Encoder.load` once. That
is why construction must be cheap (no weights) yet strict (a bad path fails before any worker
starts). This module imports no torch: the CLI imports it to list encoders.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from cachedoctor.errors import PathError

if TYPE_CHECKING:
    import torch

#: The interface version this module defines; the entry-point group name carries it too.
API_VERSION = 1


class EncoderError(PathError):
    """An encoder spec or model path that cannot be used; the message says what to do instead."""


@dataclass(frozen=True)
class Scaling:
    """The affine map a trainer applies to raw VAE latents before caching them.

    SimpleTuner caches scaled latents, kohya and OneTrainer cache raw ones; the adapter only
    reports the model's factors so the caller can match whichever convention the cache uses.
    """

    factor: float = 1.0
    shift: float = 0.0

    def apply(self, latent: Any) -> Any:
        """``(latent - shift) * factor``: the order diffusers pipelines use (SD3, Flux)."""
        return (latent - self.shift) * self.factor


class Modality(str, enum.Enum):
    IMAGE = "image"
    TEXT = "text"


class Encoder(abc.ABC):
    """One model that turns pixels or prompts into the tensors a trainer caches.

    Subclasses set the attributes below (as class or instance attributes) in ``__init__``,
    without loading weights, and implement the three methods.

    ``name``: the registered adapter name (``"diffusers-vae"``), recorded in fingerprints.
    ``modality``: what :meth:`encode` takes (image tensors or prompt strings).
    ``output_keys``: the keys :meth:`encode` returns, known before loading so a repair can
    match them against the cache's keys up front.
    ``dtype``: the compute dtype's name (``"float32"``, ``"bfloat16"``); outputs are float32
    regardless, but a cache computed in bfloat16 only matches a bfloat16 recompute.
    ``scaling``: the model's latent scaling (identity for text encoders).
    ``downscale``: pixels per latent cell along each side (8 for SD VAEs, 1 for text).
    ``latent_channels``: channels of the latent (``None`` for text encoders).
    ``posterior_std``: IMAGE only; whether :meth:`encode` also returns ``"latent_std"``, the
    posterior's standard deviation (``repair --posterior sample`` needs it).
    """

    api_version: ClassVar[int] = API_VERSION

    name: str
    modality: Modality
    output_keys: tuple[str, ...]
    dtype: str = "float32"
    scaling: Scaling = Scaling()
    downscale: int = 1
    latent_channels: int | None = None
    posterior_std: bool = False

    @abc.abstractmethod
    def fingerprint(self) -> str:
        """A stable string naming this adapter, model and dtype.

        A repair journal records it so a resumed repair refuses a different model. It must be
        fast (hash config bytes and weight-file sizes and mtimes, never the weights) and
        must not need :meth:`load`.
        """

    @abc.abstractmethod
    def load(self, device: str) -> None:
        """Load the weights onto ``device`` (``"cpu"``, ``"cuda:0"``); called once per worker."""

    @abc.abstractmethod
    def encode(self, batch: Any) -> dict[str, torch.Tensor]:
        """Encode one batch under ``torch.inference_mode()``; deterministic for a given input.

        IMAGE: ``batch`` is a float32 CPU tensor ``[B, 3, H, W]`` in ``[-1, 1]``; returns
        ``{"latent": [B, latent_channels, H // downscale, W // downscale]}``, raw (unscaled): the
        posterior's mode; with ``posterior_std``, also ``"latent_std"`` of the same shape.
        TEXT: ``batch`` is a ``list[str]``; returns ``{key: [B, ...]}`` for each output key.
        Every tensor is on the CPU; floating outputs are float32. Return ordinary tensors, not
        inference tensors (copy them after leaving inference mode): the caller may scale or
        cast them in place, which PyTorch refuses on inference tensors.
        """

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.modality.value} {self.dtype}>"


#: What an entry point or a ``module:factory`` spec names: it takes the optional ``ARG`` of the
#: spec (usually a model path) and returns an :class:`Encoder` without loading weights.
EncoderFactory = Callable[[str | None], Encoder]
