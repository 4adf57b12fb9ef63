"""A complete third-party adapter: average-pools pixels into a "latent" (shown in EXAMPLE.md)."""

from __future__ import annotations

from typing import Any

from cachedoctor.encoders import Encoder, Modality


class PoolEncoder(Encoder):
    name, modality, output_keys, latent_channels = "pool", Modality.IMAGE, ("latent",), 3

    def __init__(self, downscale: int) -> None:
        self.downscale = downscale  # cheap: no weights, nothing to validate but the ARG

    def fingerprint(self) -> str:
        return f"pool|{self.downscale}|{self.dtype}"

    def load(self, device: str) -> None:
        self.device = device  # a real adapter loads its weights here, once per worker

    def encode(self, batch: Any) -> dict[str, Any]:
        import torch  # heavy imports stay out of module scope: listing encoders stays fast

        with torch.inference_mode():
            latent = torch.nn.functional.avg_pool2d(batch.to(self.device), self.downscale)
        return {"latent": latent.to("cpu", torch.float32, copy=True)}  # copy: not an inference tensor


def factory(arg: str | None) -> PoolEncoder:
    return PoolEncoder(int(arg or 8))
