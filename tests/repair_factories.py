"""A small SimpleTuner dataset whose cache was really encoded, for repair tests.

Images are real PNGs with a bucket metadata file; every latent is what the given encoder makes
of its image after SimpleTuner's recorded resize and crop, scaled, saved as a bare tensor the
way SimpleTuner saves it (torch.save to a file object). The default encoder is the shipped
example adapter (average pooling: fast, no model to build); pass a VAE spec for the real thing.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

POOL = "cachedoctor.encoders.example_adapter:factory:8"


@dataclass
class Dataset:
    root: Path
    config: Path
    data: Path
    vae: Path
    images: list[Path]
    text: Path | None = None  # the text-embed cache, when built with a text encoder

    def embed_path(self, caption: str) -> Path:
        assert self.text is not None
        return self.text / (hashlib.md5(caption.encode()).hexdigest() + "-sdxl.pt")

    def latent_path(self, image: Path) -> Path:
        return self.vae / (hashlib.sha256(image.stem.encode()).hexdigest() + ".pt")

    def source_bytes(self) -> dict[str, bytes]:
        """Every dataset file (images, captions, metadata), to prove repair never touches them."""
        out = {}
        for path in sorted(self.data.rglob("*")):
            if path.is_file():
                out[str(path)] = path.read_bytes()
        return out


def image(path: Path, size: tuple[int, int], seed: int) -> Path:
    rng = np.random.default_rng(seed)
    w, h = size
    pixels = (rng.random((h, w, 3)) * 255).astype(np.uint8)
    Image.fromarray(pixels).save(path)
    return path


def simpletuner(root: Path, n: int = 6, *, encoder: str = POOL, dtype: str = "bfloat16",
                size: tuple[int, int] = (48, 32), target: tuple[int, int] = (32, 24),
                text_encoder: str | None = None) -> Dataset:
    """``n`` images of ``size`` (W, H) bucketed to ``target`` (W, H), their cache complete.

    With ``text_encoder``, captions come from the file names (``img 000``) and a text_embeds
    dataset holds one ``<md5(caption)>-sdxl.pt`` dict per caption, as SimpleTuner writes them:
    ``prompt_embeds`` keeps its batch dimension of 1, the pooled vector does not."""
    import torch

    from cachedoctor.encoders import load_encoder
    from cachedoctor.repair.model import RecomputeSpec
    from cachedoctor.repair.recompute import prepare_image
    from cachedoctor.repair.pool import cpu_threads

    data, vae = root / "data", root / "cache" / "vae"
    data.mkdir(parents=True)
    vae.mkdir(parents=True)
    images = [image(data / f"img{i:03d}.png", size, seed=i) for i in range(n)]
    scale = max(target[0] / size[0], target[1] / size[1])
    resized = (max(target[0], round(size[0] * scale)), max(target[1], round(size[1] * scale)))
    top, left = (resized[1] - target[1]) // 2, (resized[0] - target[0]) // 2
    metadata = {str(p): {"original_size": list(size), "crop_coordinates": [top, left], "target_size": list(target),
                         "intermediary_size": list(resized), "aspect_ratio": round(target[0] / target[1], 2)}
                for p in images}
    (data / "aspect_ratio_bucket_metadata_photos.json").write_text(json.dumps(metadata))
    config = root / "multidatabackend.json"
    backends: list[dict] = [{"id": "photos", "type": "local", "instance_data_dir": str(data),
                             "cache_dir_vae": str(vae), "caption_strategy": "filename"}]
    text = None
    if text_encoder is not None:
        text = root / "cache" / "text"
        text.mkdir(parents=True)
        backends[0]["text_embeds"] = "captions"
        backends.append({"id": "captions", "dataset_type": "text_embeds", "type": "local", "default": True,
                         "cache_dir": str(text)})
        (root / "config.json").write_text(json.dumps({"model_family": "sdxl"}))
    config.write_text(json.dumps(backends))
    enc = load_encoder(encoder)
    enc.load("cpu")
    threads = torch.get_num_threads()
    torch.set_num_threads(cpu_threads(1))  # as a repair on one CPU worker: results depend on the thread count
    for path in images:
        spec = RecomputeSpec("latent", str(path), "bare-tensor", latent_hw=(target[1] // 8, target[0] // 8),
                             resize=resized, crop=(top, left))
        pixels = prepare_image(spec, enc.downscale).pixels
        latent = enc.scaling.apply(enc.encode(pixels[None])["latent"][0]).to(getattr(torch, dtype))
        with open(vae / (hashlib.sha256(path.stem.encode()).hexdigest() + ".pt"), "wb") as out:
            torch.save(latent.clone(), out)
    torch.set_num_threads(threads)
    ds = Dataset(root, config, data, vae, images, text)
    if text_encoder is not None:
        te = load_encoder(text_encoder)
        te.load("cpu")
        torch.set_num_threads(cpu_threads(1))
        for caption in [p.stem.replace("_", " ") for p in images]:
            outputs = te.encode([caption])  # one at a time: a batch of other sizes rounds differently
            embed = {"prompt_embeds": outputs["prompt_embeds"][0:1].clone(),
                     "pooled_prompt_embeds": outputs["pooled_prompt_embeds"][0].clone()}
            with open(ds.embed_path(caption), "wb") as out:
                torch.save(embed, out)
        torch.set_num_threads(threads)
    return ds


def tree_bytes(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` outside ``.cachedoctor/`` and lock files, by relative path."""
    out = {}
    for dirpath, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if d != ".cachedoctor"]
        for name in names:
            if name.startswith(".") and name.endswith(".lock"):
                continue
            path = os.path.join(dirpath, name)
            out[os.path.relpath(path, folder)] = Path(path).read_bytes()
    return out
