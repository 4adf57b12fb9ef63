"""ostris/ai-toolkit's job config and model families, read as ai-toolkit reads them (commit 27a03a9).

The cache names hash settings (``_aitoolkit_rules``), so each dataset's settings are needed *after*
ai-toolkit's own resolution (file:line at 27a03a9):

* ``toolkit/config.py:75-117``: ``.yaml``/``.yml`` or ``.json``; ``${VAR}`` from the environment
  (unset: an error); ``[name]`` replaced everywhere by ``config.name`` or ``run.py --name`` (l.38-51).
* ``jobs/process/BaseSDTrainProcess.py:112-180``: ``model.dtype`` forced to ``train.dtype`` (default
  ``fp32``, config_modules.py:395); ``train.cache_text_embeddings`` and ``diff_output_preservation``
  copied into every dataset; the process ``trigger_word`` fills datasets without one; ``datasets``
  split per ``resolution`` entry (``preprocess_dataset_raw_config``, config_modules.py:1095-1113).
* ``toolkit/config_modules.py:911-1092`` ``DatasetConfig`` defaults (a dot added to ``caption_ext``;
  augments turn latent caching off), ``ModelConfig`` (l.626-819) resolves ``arch``.
* ``toolkit/data_loader.py:395``: the dataset's ``bucket_tolerance`` is *replaced* by the model's
  ``get_bucket_divisibility()``; the YAML's value is never used.

A relative ``folder_path`` is relative to the folder ai-toolkit runs in; here to ``cwd`` when given,
else to the YAML's folder. PyYAML is imported only when a YAML file is read.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from cachedoctor.layouts._aitoolkit_families import FAMILIES, Family
from cachedoctor.layouts.configs import MAX_CONFIG_BYTES
from cachedoctor.layouts.interface import LayoutError

#: latent_space_version set by the model class (ltx2.py:236, minimax_h3.py:200)
_CLASS_LATENT_SPACE = {"ltx2": "ltx2_v2", "ltx2.3": "ltx2.3_v2", "ltx2.5": "ltx2.5_v2"}
_CLASS_LATENT_SPACE.update(minimax_h3="minimax_h3_v1", minimax_h3_ref2va="minimax_h3_v1")
#: text_embedding_space_version overrides (ideogram4.py:199, boogu_image.py:136, boogu_image_edit.py:79);
#: minimax_h3_ref2va's depends on model_kwargs (minimax_h3.py:1278): None
_TEXT_SPACE: dict[str, str | None] = {"ideogram4": "ideogram4_te_v2", "boogu_image": "boogu_image_v1"}
_TEXT_SPACE.update(boogu_image_edit="boogu_image_edit_v1", minimax_h3_ref2va=None)
#: models that put control images into the text embeddings (so their paths into its info dict)
CONTROL_IN_TEXT = frozenset(
    {"qwen_image_edit", "qwen_image_edit_plus", "boogu_image_edit", "minimax_h3", "minimax_h3_ref2va"}
)


def latent_space_version(arch: str, model: Mapping[str, Any]) -> Any:
    """As ``AiToolkitDataset.__init__`` sets it (data_loader.py:503-520): ``model.latent_space_version``,
    else the model class's, else sdxl->"sdxl", sd3->"sd3", auraflow->"sdxl", flux->"flux1",
    pixart_sigma->"sdxl", else the arch."""
    if model.get("latent_space_version") is not None:
        return model["latent_space_version"]
    if arch in _CLASS_LATENT_SPACE:
        return _CLASS_LATENT_SPACE[arch]
    if model.get("is_pixart_sigma") or arch == "pixart_sigma":
        return "sdxl"
    return {"sdxl": "sdxl", "sd3": "sd3", "auraflow": "sdxl", "flux": "flux1"}.get(arch, arch)


def text_space_version(arch: str) -> str | None:
    """``sd.text_embedding_space_version``: the arch (stable_diffusion_model.py:282), but for overrides."""
    return _TEXT_SPACE.get(arch, arch)


#: ai-toolkit's dtype names -> safetensors dtype (toolkit/train_tools.py:37-49 get_torch_dtype)
DTYPES = dict.fromkeys(("float", "fp32", "single", "float32"), "F32") | dict.fromkeys(
    ("fp16", "half", "float16"), "F16"
)
DTYPES |= dict.fromkeys(("bf16", "bfloat16"), "BF16") | dict.fromkeys(("8bit", "e4m3fn", "float8"), "F8_E4M3")
_LEGACY = [
    ("is_v2", "sd2"),
    ("is_v3", "sd3"),
    ("is_xl", "sdxl"),
    ("is_pixart", "pixart"),
    ("is_pixart_sigma", "pixart_sigma"),
]
_LEGACY += [
    ("is_auraflow", "auraflow"),
    ("is_flux", "flux"),
    ("is_lumina2", "lumina2"),
    ("is_vega", "vega"),
    ("is_ssd", "ssd"),
]
_FLOAT = re.compile(
    r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+))$"
)


def resolve_arch(model: Mapping[str, Any]) -> str:
    """``model.arch`` as ModelConfig resolves it (config_modules.py:764-819): a ``:tag`` dropped,
    ``flex1`` -> ``flux``; without one the first legacy ``is_*`` flag set, else ``sd1``."""
    arch = model.get("arch")
    if arch is not None:
        arch = str(arch).split(":")[0]
        return "flux" if arch == "flex1" else arch
    return next((name for flag, name in _LEGACY if model.get(flag, False)), "sd1")


@dataclass(frozen=True)
class ModelInfo:
    """What the cache names and encodings depend on, from one process's ``model`` and ``train``."""

    arch: str
    family: Family | None  # None: an arch unknown here (a newer ai-toolkit, a user extension)
    latent_space_version: Any  # a str unless the YAML's model.latent_space_version is another type
    text_embedding_space_version: str | None  # None: decided by the model at run time
    dtype: str  # train.dtype
    vae_dtype: str  # model.vae_dtype, default the dtype: the cached latents' dtype
    latent_dtype: str | None  # safetensors dtype of the cached latents (None: unknown name)

    @property
    def bucket_divisibility(self) -> int | None:
        return self.family.bucket_divisibility if self.family else None


@dataclass(frozen=True)
class AiToolkitDataset:
    """One ``datasets:`` entry of one process, ai-toolkit's defaults and overrides applied."""

    config_path: str
    process_index: int
    process_type: str
    index: int  # position in the process's datasets list
    folder_path: str  # resolved; for a JSON dataset_path its folder (caches go beside each listed image)
    dataset_json: str | None  # dataset_path when it is a JSON caption file
    model: ModelInfo
    resolutions: tuple[int, ...]  # one ai-toolkit dataset per entry, all caching into the same folders
    caption_ext: str = ".txt"
    default_caption: str | None = None
    trigger_word: str | None = None
    is_reg: bool = False
    buckets: bool = True
    square_crop: bool = False
    random_crop: bool = False
    random_scale: bool = False
    scale: float = 1.0
    flip_x: bool = False
    flip_y: bool = False
    num_repeats: int = 1
    cache_latents: bool = False
    cache_latents_to_disk: bool = False
    cache_text_embeddings: bool = False
    cache_tensors_to_disk: bool = False
    caption_dropout_rate: float = 0.0
    shuffle_tokens: bool = False
    random_triggers: tuple[str, ...] = ()
    diff_output_preservation: bool = False
    diff_output_preservation_class: str = ""
    standardize_images: bool = False
    alpha_mask: bool = False
    fast_image_size: bool = False
    num_frames: int = 1
    auto_frame_count: bool = False
    trim_auto_frame_count_tail: bool = True
    fps: int = 24
    do_i2v: bool = False
    do_audio: bool = False
    audio_normalize: bool = False
    audio_preserve_pitch: bool = False
    bucket_tolerance: int = 64  # the YAML's value, which ai-toolkit ignores (model.bucket_divisibility is used)

    @property
    def is_video(self) -> bool:
        return self.num_frames > 1 or self.auto_frame_count

    def hazards(self) -> tuple[str, ...]:
        """Settings that keep the cache names from being predicted from the config, one line each."""
        out = []
        if self.random_crop and self.buckets:
            out.append("random_crop: crop_x/crop_y are drawn at start-up (read them from each file's metadata)")
        if self.cache_text_embeddings and (self.shuffle_tokens or self.random_triggers):
            out.append("shuffle_tokens/random_triggers: the cached caption, so its text-embed name, is random")
        if self.standardize_images:
            out.append("standardize_images: a per-channel pixel normalisation that a recompute does not repeat")
        if not self.buckets and len(set(self.resolutions)) > 1:
            out.append("buckets off: every resolution maps to the same latent name (the first one cached wins)")
        if self.model.family is None:
            out.append(f"arch {self.model.arch!r}: unknown to cachedoctor (bucket size, encoding)")
        return tuple(out)


_PLAIN: dict[str, Any] = {
    f.name: f.default for f in fields(AiToolkitDataset) if f.name not in ("resolutions", "random_triggers")
}
for _key in ("config_path", "process_index", "process_type", "index", "folder_path", "dataset_json", "model"):
    del _PLAIN[_key]


def load_job_config(path: str, cwd: str | None = None, name: str | None = None) -> list[AiToolkitDataset]:
    """Every dataset of every process in the job file at ``path`` (``name``: ``run.py --name``)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_CONFIG_BYTES + 1)
    except UnicodeDecodeError:
        raise LayoutError(path, "is not UTF-8 text: not an ai-toolkit job config; check the path") from None
    except OSError as exc:
        raise LayoutError(path, f"cannot read the ai-toolkit job config ({exc.strerror}); check the path") from exc
    if len(text) > MAX_CONFIG_BYTES:
        raise LayoutError(
            path, f"is over {MAX_CONFIG_BYTES // 2**20} MiB: not an ai-toolkit job config; check the path"
        )
    unset = sorted({v for v in re.findall(r"\$\{([^}]+)\}", text) if v not in os.environ})
    if unset:
        raise LayoutError(path, f"uses ${{{unset[0]}}}, which is not set; export it as ai-toolkit would need")
    text = re.sub(r"\$\{([^}]+)\}", lambda m: os.environ[m.group(1)], text)
    if path.lower().endswith((".json", ".jsonc")):
        try:
            config = json.loads(text)
        except ValueError as exc:
            raise LayoutError(path, f"not valid JSON ({exc}); fix the file") from exc
    else:
        import yaml  # PyYAML: only to read an ai-toolkit YAML job

        class Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]  # libyaml where built
            """SafeLoader plus ai-toolkit's float resolver (``1e-4`` is a float; toolkit/config.py:54-65)."""

        Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))
        try:
            config = yaml.load(text, Loader=Loader)
        except yaml.YAMLError as exc:
            raise LayoutError(path, f"not valid YAML ({str(exc).splitlines()[0]}); fix the file") from exc
    return datasets_from_config(config, path, cwd, name)


def _dumped(config: Any, path: str) -> str:
    """``json.dumps`` of the job, as ai-toolkit makes it to fill in ``[name]``: a value YAML reads as
    something JSON has no type for (an unquoted date) stops ai-toolkit there, and this read too."""

    def refuse(value: Any) -> Any:
        raise LayoutError(
            path,
            f"holds {str(value)[:40]!r}, which YAML reads as a {type(value).__name__} and ai-toolkit cannot "
            "handle (it json-dumps the job, toolkit/config.py:46-50); quote it",
        )

    return json.dumps(config, default=refuse)


def datasets_from_config(
    config: Any, path: str, cwd: str | None = None, name: str | None = None
) -> list[AiToolkitDataset]:
    """The datasets of a parsed job config (``path`` names it in errors)."""
    if not isinstance(config, Mapping) or "job" not in config or not isinstance(config.get("config"), Mapping):
        raise LayoutError(path, "not an ai-toolkit job config (needs 'job' and a 'config' section); check the file")
    name = name if name is not None else config["config"].get("name")
    if name is None:
        raise LayoutError(path, "has no config.name, which ai-toolkit requires; add one")
    config = json.loads(_dumped(config, path).replace("[name]", str(name)))  # toolkit/config.py:46-50
    processes = config["config"].get("process")
    if not isinstance(processes, list) or not processes:
        raise LayoutError(path, "config.process must be a non-empty list; check the file")
    base = cwd if cwd is not None else os.path.dirname(os.path.abspath(path))
    out: list[AiToolkitDataset] = []
    for p, process in enumerate(processes):
        if not isinstance(process, Mapping) or "type" not in process:
            raise LayoutError(path, f"config.process[{p}] has no type; check the file")
        raw, model, train = process.get("datasets"), process.get("model") or {}, process.get("train") or {}
        if not raw:
            continue
        if not isinstance(raw, list) or not all(isinstance(d, Mapping) for d in raw):
            raise LayoutError(path, f"config.process[{p}].datasets must be a list of mappings")
        if not isinstance(model, Mapping) or not isinstance(train, Mapping):
            raise LayoutError(path, f"config.process[{p}].model and .train must be mappings")
        arch = resolve_arch(model)
        dtype = str(train.get("dtype", "fp32"))
        vae_dtype = str(model.get("vae_dtype", dtype))
        info = ModelInfo(
            arch,
            FAMILIES.get(arch),
            latent_space_version(arch, model),
            text_space_version(arch),
            dtype,
            vae_dtype,
            DTYPES.get(vae_dtype),
        )
        for d, dataset in enumerate(raw):
            out.append(_dataset(path, base, (p, d), process, train, info, dict(dataset)))
    return out


def _dataset(
    path: str,
    base: str,
    at: tuple[int, int],
    process: Mapping[str, Any],
    train: Mapping[str, Any],
    model: ModelInfo,
    d: dict[str, Any],
) -> AiToolkitDataset:
    where = f"config.process[{at[0]}].datasets[{at[1]}]"
    if train.get("cache_text_embeddings"):
        d["cache_text_embeddings"] = True
    if train.get("diff_output_preservation"):
        d["diff_output_preservation"] = True
        d["diff_output_preservation_class"] = train.get("diff_output_preservation_class", "")
    resolution = d.get("resolution", 512)
    resolutions = resolution if isinstance(resolution, list) else [resolution]
    if not resolutions or not all(isinstance(r, int) and not isinstance(r, bool) and r > 0 for r in resolutions):
        raise LayoutError(path, f"{where}.resolution must be a positive integer or a list of them; fix it")
    caption_ext = str(d.get("caption_type") or d.get("caption_ext", ".txt"))
    d["caption_ext"] = caption_ext if not caption_ext or caption_ext.startswith(".") else "." + caption_ext
    if bool(d.get("augments")) or bool(d.get("augmentations")):  # config_modules.py:1021-1026
        d["cache_latents"] = d["cache_latents_to_disk"] = False
    d.setdefault("trigger_word", process.get("trigger_word"))
    folder = d.get("dataset_path") or d.get("folder_path")
    if not folder:
        raise LayoutError(path, f"{where} has neither folder_path nor dataset_path; add one")
    folder, dataset_json = os.path.join(base, str(folder)), None
    if d.get("dataset_path") and not os.path.isdir(folder):
        folder, dataset_json = os.path.dirname(folder), folder
    plain: dict[str, Any] = {}
    for key, default in _PLAIN.items():
        value = d.get(key, default)
        if default is None:  # default_caption, trigger_word
            plain[key] = None if value is None else str(value)
        else:
            plain[key] = type(default)(value)
    triggers = d.get("random_triggers", [])
    return AiToolkitDataset(
        config_path=path,
        process_index=at[0],
        process_type=str(process["type"]),
        index=at[1],
        folder_path=os.path.normpath(folder),
        dataset_json=dataset_json,
        model=model,
        resolutions=tuple(resolutions),
        random_triggers=tuple(triggers) if isinstance(triggers, list) else (str(triggers),),
        **plain,
    )
