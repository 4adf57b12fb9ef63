"""``diffusers-vae``: recompute image latents with a local diffusers ``AutoencoderKL``.

``ARG`` is one of, optionally followed by ``@float32`` (the default), ``@float16`` or
``@bfloat16`` to pick the compute dtype (SDXL's VAE overflows to NaN in float16: its config's
``force_upcast`` says so):

* a diffusers VAE folder (``config.json`` + ``diffusion_pytorch_model.safetensors``);
* a pipeline folder whose ``vae/`` subfolder is one;
* a single weights file (``.safetensors``, ``.ckpt``, ...) with the VAE's diffusers
  ``config.json`` beside it. The weights may use diffusers names or the original (LDM) ones,
  also inside a whole-model checkpoint (``first_stage_model.*``).

A single file without a ``config.json`` beside it is refused: diffusers 0.42's
``AutoencoderKL.from_single_file`` guesses the model from the checkpoint's keys and fetches that
model's config from the Hugging Face Hub, which fails offline (unless the Hub cache happens to
hold it) and would download otherwise. cachedoctor never downloads weights or configs.

Loading is strict where diffusers is lenient: ``from_pretrained`` and ``from_single_file`` both
leave tensors missing from the weights randomly initialised (when accelerate is not installed)
with only a log warning, which
would make a repair write plausible-looking garbage; here any missing tensor is an error.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachedoctor.encoders._local import (
    NEVER_DOWNLOADS,
    WEIGHT_SUFFIXES,
    check_dtype,
    fingerprint,
    require_arg,
    require_modules,
    split_dtype,
    weight_files,
)
from cachedoctor.encoders.interface import Encoder, EncoderError, Modality, Scaling

if TYPE_CHECKING:
    import torch

NAME = "diffusers-vae"
WHAT_TO_PASS = (
    "pass a local diffusers VAE folder (config.json + weights), a pipeline folder with a vae/ subfolder, "
    f"or a weights file with its config.json beside it ({NEVER_DOWNLOADS}; a Hub repo id does not work)"
)
#: Weight files of a folder without a variant; otherwise a lone variant (``fp16``) is loaded.
PLAIN_WEIGHTS = {
    f"diffusion_pytorch_model.{ext}" for ext in ("safetensors", "bin", "safetensors.index.json", "bin.index.json")
}
#: ``AutoencoderKL.__init__`` defaults, for configs that omit a key (diffusers writes them all).
DEFAULTS = {"block_out_channels": [64], "latent_channels": 4, "scaling_factor": 0.18215, "shift_factor": None}


def factory(arg: str | None) -> DiffusersVAE:
    """The entry point: ``diffusers-vae:PATH[@dtype]``."""
    require_modules("torch", "diffusers")
    path, dtype = split_dtype(require_arg(NAME, arg, "vae"))
    return DiffusersVAE(path, dtype=dtype)


class DiffusersVAE(Encoder):
    """A diffusers ``AutoencoderKL``: the posterior's mean as ``latent``, its std as ``latent_std``.

    The adapter never samples: ``latent_dist.sample()`` draws from torch's global generator, so
    two repairs of one image would write different bytes. ``repair --posterior sample`` draws
    from mean and std itself, with a seed per entry (``repair/posterior.py``).
    """

    name = NAME
    modality = Modality.IMAGE
    output_keys = ("latent", "latent_std")
    posterior_std = True

    def __init__(self, path: str | Path, *, dtype: str = "float32") -> None:
        self.path = Path(path)
        self.dtype = check_dtype(dtype)
        self.config_dir, self.weights_file = _resolve(self.path)
        config = {**DEFAULTS, **_read_config(self.config_dir / "config.json")}
        self.config = config
        shift = config["shift_factor"]
        self.scaling = Scaling(factor=float(config["scaling_factor"]), shift=0.0 if shift is None else float(shift))
        self.downscale = 2 ** (len(config["block_out_channels"]) - 1)
        self.latent_channels = int(config["latent_channels"])
        self._model: Any = None
        self._device = "cpu"

    def fingerprint(self) -> str:
        weights = [self.weights_file] if self.weights_file else weight_files(self.config_dir)
        model = self.weights_file or self.config_dir
        return fingerprint(self.name, model, [self.config_dir / "config.json"], weights, self.dtype)

    def load(self, device: str) -> None:
        import torch

        dtype = getattr(torch, self.dtype)
        try:
            if self.weights_file is None:
                model = _load_folder(self.config_dir, dtype)
            else:
                model = _load_single_file(self.weights_file, self.config_dir).to(dtype)
        except EncoderError:
            raise
        except (OSError, ValueError, RuntimeError, KeyError) as e:
            where = str(self.weights_file or self.config_dir)
            raise EncoderError(
                where, f"diffusers could not load this VAE ({type(e).__name__}: {e}); {WHAT_TO_PASS}"
            ) from e
        model.requires_grad_(False)
        self._model = model.to(device).eval()
        self._device = device

    def encode(self, batch: torch.Tensor) -> dict[str, torch.Tensor]:
        import torch

        if self._model is None:
            raise RuntimeError("DiffusersVAE.encode before load(device)")
        if batch.ndim != 4 or batch.shape[1] != 3 or batch.shape[2] % self.downscale or batch.shape[3] % self.downscale:
            raise ValueError(
                f"expected [B, 3, H, W] with H and W multiples of {self.downscale}, got {list(batch.shape)}"
            )
        with torch.inference_mode():
            x = batch.to(self._device, getattr(torch, self.dtype))
            dist = self._model.encode(x).latent_dist
        # Copied outside inference mode: ordinary tensors the caller may modify in place.
        return {
            "latent": dist.mode().to("cpu", torch.float32, copy=True),
            "latent_std": dist.std.to("cpu", torch.float32, copy=True),
        }


def _resolve(path: Path) -> tuple[Path, Path | None]:
    """``(folder holding config.json, single weights file or None)``, or an error saying why not."""
    if not path.exists():
        raise EncoderError(str(path), f"no such file or folder; {WHAT_TO_PASS}")
    if path.is_dir():
        for folder in (path, path / "vae"):
            if (folder / "config.json").is_file():
                if not any(p.name.startswith("diffusion_pytorch_model") for p in weight_files(folder)):
                    raise EncoderError(
                        str(folder), f"config.json but no diffusion_pytorch_model weights beside it; {WHAT_TO_PASS}"
                    )
                return folder, None
        raise EncoderError(str(path), f"no model folder here (no config.json, no vae/config.json); {WHAT_TO_PASS}")
    if path.suffix not in WEIGHT_SUFFIXES:
        raise EncoderError(
            str(path), f"not a model: expected a folder or a {'/'.join(WEIGHT_SUFFIXES)} weights file; {WHAT_TO_PASS}"
        )
    if not (path.parent / "config.json").is_file():
        raise EncoderError(
            str(path),
            "a single weights file needs its VAE's diffusers config.json beside it (diffusers would fetch one "
            f"from the Hugging Face Hub); put it in {path.parent} or pass the diffusers VAE folder instead ({NEVER_DOWNLOADS})",
        )
    if path.suffix == ".safetensors":
        _check_safetensors_header(path)
    return path.parent, path


def _read_config(path: Path) -> dict[str, Any]:
    """config.json as a dict, checked to describe an ``AutoencoderKL`` (read with json: no weights)."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise EncoderError(str(path), f"unreadable config.json ({e}); {WHAT_TO_PASS}") from e
    if not isinstance(config, dict):
        raise EncoderError(str(path), f"config.json is not a JSON object; {WHAT_TO_PASS}")
    cls = config.get("_class_name", "AutoencoderKL")
    if cls != "AutoencoderKL":
        raise EncoderError(
            str(path),
            f"describes a {cls}, not an AutoencoderKL; pass the VAE's folder, or write an adapter for this model "
            "(see cachedoctor/encoders/EXAMPLE.md)",
        )
    return config


def _check_safetensors_header(path: Path) -> None:
    """Fail at construction, not in a worker, on a ``.safetensors`` file that is not one."""
    try:
        with open(path, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(size)) if 2 <= size <= 100_000_000 else None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        header = None
    if not isinstance(header, dict):
        raise EncoderError(str(path), f"not a safetensors file (no valid header); {WHAT_TO_PASS}")


def _load_folder(folder: Path, dtype: torch.dtype) -> Any:
    from diffusers import AutoencoderKL

    names = {p.name for p in weight_files(folder)}
    variant = None if names & PLAIN_WEIGHTS else _only_variant(names)
    model, info = AutoencoderKL.from_pretrained(
        folder,
        local_files_only=True,
        torch_dtype=dtype,
        variant=variant,
        output_loading_info=True,
        low_cpu_mem_usage=importlib.util.find_spec("accelerate") is not None,
    )
    _refuse_missing(folder, info["missing_keys"], len(model.state_dict()))
    return model


def _only_variant(names: set[str]) -> str | None:
    """The variant (``fp16``) of ``diffusion_pytorch_model.fp16.safetensors`` when it is the only one."""
    variants = {n.split(".")[1] for n in names if n.startswith("diffusion_pytorch_model.") and n.count(".") >= 2}
    variants.discard("safetensors")
    variants.discard("bin")
    return variants.pop() if len(variants) == 1 else None


def _load_single_file(path: Path, config_dir: Path) -> Any:
    """Build the model from config.json, then load ``path`` strictly (diffusers or LDM names)."""
    from diffusers import AutoencoderKL

    model = AutoencoderKL.from_config(AutoencoderKL.load_config(config_dir, local_files_only=True))
    expected = model.state_dict().keys()
    state = _read_weights(path)
    if not expected <= state.keys():  # LDM names, or not this VAE: keep whichever naming matches more
        from diffusers.loaders.single_file_utils import convert_ldm_vae_checkpoint

        converted = convert_ldm_vae_checkpoint(state, model.config)
        if len(expected & converted.keys()) > len(expected & state.keys()):
            state = converted
    _refuse_missing(path, sorted(expected - state.keys()), len(expected))
    model.load_state_dict({k: state[k] for k in expected}, strict=True)
    return model


def _read_weights(path: Path) -> dict[str, Any]:
    """A state dict from safetensors, or from a torch pickle with ``weights_only=True`` (no code runs)."""
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(path)
    import torch

    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise EncoderError(str(path), f"holds a {type(state).__name__}, not a state dict; {WHAT_TO_PASS}")
    return state


def _refuse_missing(where: Path, missing: list[str], total: int) -> None:
    if missing:
        raise EncoderError(
            str(where),
            f"{len(missing)} of the VAE's {total} tensors are not in the weights (first: {missing[0]}); "
            f"these are not this VAE's weights (diffusers would fill them with random values); {WHAT_TO_PASS}",
        )
