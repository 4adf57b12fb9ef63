"""``transformers-text``: recompute text embeds with a local CLIP or T5 text encoder.

``ARG`` is a folder, optionally followed by ``@float32`` (default), ``@float16`` or ``@bfloat16``:

* a text-encoder folder (``config.json`` + weights) with the tokenizer files in it too, or a
  pipeline's ``text_encoder[_N]`` folder whose tokenizer is the sibling ``tokenizer[_N]``;
* a pipeline folder holding ``text_encoder/`` and ``tokenizer/``.

What comes out mirrors the diffusers pipelines (SD 1.x/2.x, SDXL, SD3, Flux): prompts are padded
to the tokenizer's ``model_max_length`` with truncation on, and the encoder sees the token ids
only (the pipelines pass no attention mask to it). Outputs, all ``[B, ...]`` on the CPU:

* CLIP (``CLIPTextModel``): ``prompt_embeds`` = last hidden state (float32),
  ``pooled_prompt_embeds`` = ``pooler_output``;
* CLIP with projection (``CLIPTextModelWithProjection``): ``pooled_prompt_embeds`` =
  ``text_embeds`` instead;
* T5 (``T5EncoderModel``): ``prompt_embeds`` and ``attention_mask``, the tokenizer's mask kept
  as int64, the dtype trainers cache it in.

Not covered: trainers that cache a penultimate hidden state (SDXL's ``prompt_embeds`` use
``hidden_states[-2]`` of both encoders, concatenated); those need their own adapter.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachedoctor.encoders._local import (
    NEVER_DOWNLOADS,
    check_dtype,
    fingerprint,
    require_arg,
    require_modules,
    split_dtype,
    weight_files,
)
from cachedoctor.encoders.interface import Encoder, EncoderError, Modality

if TYPE_CHECKING:
    import torch

NAME = "transformers-text"
WHAT_TO_PASS = (
    "pass a local transformers text-encoder folder with its tokenizer files (in it, or in the sibling "
    f"tokenizer[_N] folder), or a pipeline folder with text_encoder/ and tokenizer/ ({NEVER_DOWNLOADS})"
)
#: config.json ``model_type`` -> (transformers class, output keys) for the model kinds supported.
KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "clip": ("CLIPTextModel", ("prompt_embeds", "pooled_prompt_embeds")),
    "clip-projection": ("CLIPTextModelWithProjection", ("prompt_embeds", "pooled_prompt_embeds")),
    "t5": ("T5EncoderModel", ("prompt_embeds", "attention_mask")),
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "spiece.model")
#: Above this a tokenizer's ``model_max_length`` is transformers' "unset" sentinel (1e30).
MAX_SANE_LENGTH = 1_000_000


def factory(arg: str | None) -> TransformersText:
    """The entry point: ``transformers-text:PATH[@dtype]``."""
    require_modules("torch", "transformers")
    path, dtype = split_dtype(require_arg(NAME, arg, "text_encoder"))
    return TransformersText(path, dtype=dtype)


class TransformersText(Encoder):
    """A CLIP or T5 text encoder and its tokenizer, chosen by config.json's ``model_type``.

    ``max_length`` overrides the tokenizer's ``model_max_length`` (Flux schnell caches 256 T5
    tokens, its tokenizer says 512); the spec string has no syntax for it, so only Python
    callers (a custom factory) can set it.
    """

    name = NAME
    modality = Modality.TEXT

    def __init__(self, path: str | Path, *, dtype: str = "float32", max_length: int | None = None) -> None:
        self.path = Path(path)
        self.dtype = check_dtype(dtype)
        self.max_length = max_length
        self.model_dir = _model_dir(self.path)
        self.kind = _kind(self.model_dir / "config.json")
        self.tokenizer_dir = _tokenizer_dir(self.model_dir)
        self.class_name, self.output_keys = KINDS[self.kind]
        self._model: Any = None
        self._tokenizer: Any = None
        self._device = "cpu"

    def fingerprint(self) -> str:
        configs = {self.model_dir / "config.json"}
        configs.update(p for p in self.tokenizer_dir.iterdir() if p.is_file() and _is_tokenizer_file(p))
        return fingerprint(self.name, self.model_dir, configs, weight_files(self.model_dir), self.dtype)

    def load(self, device: str) -> None:
        import torch
        import transformers

        cls = getattr(transformers, self.class_name)
        bars = transformers.utils.logging.is_progress_bar_enabled()
        transformers.utils.logging.disable_progress_bar()  # one bar per worker would garble the CLI's
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(self.tokenizer_dir, local_files_only=True)
            model, info = cls.from_pretrained(
                self.model_dir,
                local_files_only=True,
                output_loading_info=True,
                **{_dtype_kwarg(): getattr(torch, self.dtype)},
            )
        except (OSError, ValueError, RuntimeError, KeyError, ImportError) as e:
            raise EncoderError(
                str(self.path), f"transformers could not load it ({type(e).__name__}: {e}); {WHAT_TO_PASS}"
            ) from e
        finally:
            if bars:
                transformers.utils.logging.enable_progress_bar()
        missing = sorted(info.get("missing_keys") or ())
        if missing:
            raise EncoderError(
                str(self.model_dir),
                f"{len(missing)} tensors are missing from the weights (first: {missing[0]}); transformers would fill "
                f"them with random values, so these are not this model's weights; {WHAT_TO_PASS}",
            )
        length = self.max_length or tokenizer.model_max_length
        if not length or length > MAX_SANE_LENGTH:
            raise EncoderError(
                str(self.tokenizer_dir), "the tokenizer sets no model_max_length; add it to tokenizer_config.json"
            )
        self._max_length = int(length)
        self._tokenizer = tokenizer
        model.requires_grad_(False)
        self._model = model.to(device, getattr(torch, self.dtype)).eval()
        self._device = device

    def encode(self, batch: list[str]) -> dict[str, torch.Tensor]:
        import torch

        if self._model is None:
            raise RuntimeError("TransformersText.encode before load(device)")
        if isinstance(batch, str) or not all(isinstance(s, str) for s in batch):
            raise TypeError("TransformersText.encode takes a list of prompt strings")
        tokens = self._tokenizer(
            list(batch), padding="max_length", max_length=self._max_length, truncation=True, return_tensors="pt"
        )
        with torch.inference_mode():
            out = self._model(input_ids=tokens.input_ids.to(self._device))
            result = {"prompt_embeds": out.last_hidden_state}
            if self.kind == "clip":
                result["pooled_prompt_embeds"] = out.pooler_output
            elif self.kind == "clip-projection":
                result["pooled_prompt_embeds"] = out.text_embeds
        # Copied outside inference mode: ordinary tensors the caller may modify in place.
        result = {k: v.to("cpu", torch.float32, copy=True) for k, v in result.items()}
        if self.kind == "t5":
            result["attention_mask"] = tokens.attention_mask.to("cpu", torch.int64, copy=True)
        return result


def _dtype_kwarg() -> str:
    """``from_pretrained``'s dtype argument: ``dtype`` since transformers 4.56, ``torch_dtype`` before."""
    import transformers

    major, minor = (int(part) for part in transformers.__version__.split(".")[:2])
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"


def _model_dir(path: Path) -> Path:
    """The folder holding the encoder's config.json and weights, or an error saying what to pass."""
    if not path.exists():
        raise EncoderError(str(path), f"no such folder; {WHAT_TO_PASS}")
    if not path.is_dir():
        raise EncoderError(str(path), f"not a folder; {WHAT_TO_PASS}")
    for model in (path, path / "text_encoder"):
        if (model / "config.json").is_file():
            if not weight_files(model):
                raise EncoderError(str(model), f"config.json but no weights beside it; {WHAT_TO_PASS}")
            return model
    raise EncoderError(str(path), f"no model folder here (no config.json, no text_encoder/config.json); {WHAT_TO_PASS}")


def _tokenizer_dir(model: Path) -> Path:
    """The tokenizer beside the weights, else the pipeline sibling (``text_encoder_2`` -> ``tokenizer_2``)."""
    tokenizer = model
    if not _has_tokenizer(model) and model.name.startswith("text_encoder"):
        tokenizer = model.parent / model.name.replace("text_encoder", "tokenizer", 1)
    if not (tokenizer.is_dir() and _has_tokenizer(tokenizer)):
        raise EncoderError(str(tokenizer), f"no tokenizer files ({', '.join(TOKENIZER_FILES)}); {WHAT_TO_PASS}")
    return tokenizer


def _has_tokenizer(folder: Path) -> bool:
    return any((folder / name).is_file() for name in TOKENIZER_FILES)


def _is_tokenizer_file(path: Path) -> bool:
    """Small files that decide tokenization, hashed by content in the fingerprint."""
    return path.suffix in (".json", ".txt", ".model") and not path.name.endswith(".index.json")


def _kind(config_path: Path) -> str:
    """The supported model kind config.json describes (read with json: no transformers import)."""
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise EncoderError(str(config_path), f"unreadable config.json ({e}); {WHAT_TO_PASS}") from e
    if not isinstance(config, dict):
        raise EncoderError(str(config_path), f"config.json is not a JSON object; {WHAT_TO_PASS}")
    model_type = config.get("model_type")
    if model_type == "clip_text_model":
        return "clip-projection" if "CLIPTextModelWithProjection" in (config.get("architectures") or ()) else "clip"
    if model_type == "t5":
        return "t5"
    raise EncoderError(
        str(config_path),
        f"model_type {model_type!r} is not supported (clip_text_model, t5); pass a CLIP or T5 text encoder, "
        "or write an adapter for this model (see cachedoctor/encoders/EXAMPLE.md)",
    )
