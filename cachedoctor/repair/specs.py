"""What a recompute must produce for each layout, and the healthy peer that shows the format.

SimpleTuner caches a bare tensor, already scaled (``(latent - shift) * factor``), at the bucket's
``target_size`` after its recorded resize and crop. kohya keeps raw float32 latents in an npz
whose keys carry the bucket (``latents_<h>x<w>``), with ``original_size`` and ``crop_ltrb``.
OneTrainer keeps raw latents in a dict (``latent_image``, ``original_resolution``,
``crop_offset``). A manifest gives the size and key; its files are written like their peers.
"""

from __future__ import annotations

import os
import re

from cachedoctor.formats import read_file
from cachedoctor.formats.interface import FileMeta, ReadError
from cachedoctor.layouts.interface import Expected
from cachedoctor.repair.model import RecomputeSpec

_CACHE_SUFFIXES = (".pt", ".npz", ".safetensors", ".pth", ".bin")
_KOHYA_TE = ("_te_outputs.npz", "_te.npz")
_KOHYA_KEY = re.compile(r"^latents_(\d+)x(\d+)$")
_TEMPLATE_TRIES = 6


class TemplateFinder:
    """A healthy peer per (folder, role): a file with no finding whose reader is happy."""

    def __init__(self, bad: set[str]) -> None:
        self.bad = bad
        self.cache: dict[tuple[str, str], tuple[str, FileMeta] | None] = {}

    def find(self, folder: str, role: str, suffix: str) -> tuple[str, FileMeta] | None:
        key = (folder, role + suffix)
        if key not in self.cache:
            self.cache[key] = self._search(folder, role, suffix)
        return self.cache[key]

    def _search(self, folder: str, role: str, suffix: str) -> tuple[str, FileMeta] | None:
        tries = 0
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            return None
        for name in names:
            path = os.path.join(folder, name)
            if path in self.bad or not name.endswith(suffix) or name.startswith("."):
                continue
            if _is_kohya_text(name) != (role == "text") and suffix == ".npz":
                continue
            tries += 1
            try:
                meta = read_file(path, deep=False)
            except ReadError:
                continue
            if not meta.foreign_globals and not meta.unreadable_reason and meta.tensors:
                return path, meta
            if tries >= _TEMPLATE_TRIES:
                break
        return None


def _is_kohya_text(name: str) -> bool:
    return name.endswith(_KOHYA_TE)


def _suffix(path: str) -> str:
    return os.path.splitext(path)[1] or ".pt"


def _caption(expected: Expected) -> str | None:
    if expected.text is not None:
        return expected.text
    if expected.source.lower().endswith((".txt", ".caption")):
        try:
            with open(expected.source, encoding="utf-8") as handle:
                return handle.read().strip()
        except (OSError, UnicodeDecodeError):
            return None
    return None


def _own_keys(path: str) -> FileMeta | None:
    try:
        return read_file(path, deep=False)
    except (ReadError, OSError):
        return None


def spec_for(path: str, expected: Expected | None, layout: str | None,
             templates: TemplateFinder) -> tuple[RecomputeSpec | None, str | None]:
    """The recompute spec for ``path``, or ``(None, why it cannot be recomputed)``."""
    if expected is None:
        return None, "its source is unknown: repair with the dataset (--config, --layout or --manifest)"
    if not expected.source_exists or not os.path.exists(expected.source):
        return None, f"its source {expected.source} is gone"
    role = "text" if expected.role == "text" else "latent"
    folder = os.path.dirname(path)
    found = templates.find(folder, role, _suffix(path))
    template, meta = (found if found else (None, None))
    keys = tuple(t.key for t in meta.tensors) if meta else ()
    fmt = meta.format if meta else ("npz" if path.endswith(".npz") else "safetensors" if path.endswith(".safetensors") else "torch-zip")
    if role == "text":
        text = _caption(expected)
        if text is None:
            return None, "no caption is recorded for it (the layout keeps captions this repair cannot read)"
        if layout == "onetrainer":
            return None, "OneTrainer text caches hold tokens and several encoders' states; re-cache them with OneTrainer"
        return RecomputeSpec("text", expected.source, "dict", fmt, "", "float32", False, None, text=text,
                             keys=keys, template=template), None
    hw = expected.latent_hw or (tuple(expected.shape[-2:]) if expected.shape else None)  # type: ignore[assignment]
    dtype_of = {t.key: t.dtype for t in meta.tensors} if meta else {}
    if layout == "kohya":
        own = _own_keys(path)
        key = next((t.key for t in own.tensors if _KOHYA_KEY.match(t.key) or t.key == "latents"), None) if own else None
        if key is None:
            return None, ("kohya records an entry's bucket only inside the entry; with the file unreadable or missing, "
                          "let sd-scripts re-cache it, or pass a manifest with latent_hw")
        match = _KOHYA_KEY.match(key)
        shape = next(t.shape for t in own.tensors if t.key == key)  # type: ignore[union-attr]
        hw = (int(match.group(1)), int(match.group(2))) if match else tuple(shape[-2:])  # type: ignore[assignment]
        flipped = any(k.startswith("latents_flipped") for k in keys)
        return RecomputeSpec("latent", expected.source, "kohya-npz", "npz", key, "float32", False, hw,  # type: ignore[arg-type]
                             keys=keys or (key, "original_size" + key[7:], "crop_ltrb" + key[7:]),
                             flipped=flipped, template=template), None
    if hw is None:
        return None, "the layout does not record this entry's latent size (no bucket metadata for it)"
    if layout == "onetrainer":
        key = "latent_image"
        return RecomputeSpec("latent", expected.source, "dict", fmt, key, dtype_of.get(key, "float32"), False, hw,  # type: ignore[arg-type]
                             keys=keys or (key, "original_resolution", "crop_offset"), template=template), None
    if layout == "simpletuner":
        bare = meta is None or meta.container == "tensor"
        key = "" if bare else "latents"
        crop = expected.crop
        return RecomputeSpec("latent", expected.source, "bare-tensor" if bare else "dict", fmt, key,
                             dtype_of.get(key, "bfloat16"), True, hw,  # type: ignore[arg-type]
                             resize=(crop[0], crop[1]) if crop else None, crop=(crop[2], crop[3]) if crop else None,
                             keys=keys, template=template), None
    key = expected.latent_key if expected.latent_key is not None else ("" if meta is None or meta.container == "tensor"
                                                                      else max(meta.tensors, key=lambda t: t.numel).key)
    return RecomputeSpec("latent", expected.source, "bare-tensor" if key == "" else "dict", fmt, key,
                         dtype_of.get(key, "float32"), False, hw, keys=keys, template=template), None  # type: ignore[arg-type]
