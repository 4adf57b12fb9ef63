"""``--config FILE``: which trainer a configuration file belongs to, told by its content.

Each trainer describes its datasets in a file of its own, and users have the file at hand long
before they know what cachedoctor calls the trainer. So one option takes any of them and the
content decides (never the name alone: every trainer calls its file ``config.toml`` or
``dataset.toml`` somewhere):

- SimpleTuner: ``multidatabackend.json``, a JSON list of data backends (``id``, ``type``, ...);
- kohya sd-scripts: a dataset TOML whose ``[[datasets]]`` hold ``[[datasets.subsets]]`` with
  ``image_dir`` (``library/config_util.py``);
- musubi-tuner: a dataset TOML whose ``[[datasets]]`` name ``image_directory``,
  ``video_directory`` or a ``..._jsonl_file`` (``dataset/config_utils.py``);
- diffusion-pipe: a dataset TOML of ``[[directory]]`` tables with ``path``, or its training TOML
  (``[model]`` and ``dataset = "dataset.toml"``), which also names the model the cache is for;
- ai-toolkit: a job file (YAML, or JSON) with ``config.process[*].datasets[*].folder_path``.

The older ``--kohya-config`` keeps working. A file none of these fits is one line naming it.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from typing import Any

from cachedoctor.errors import UsageError
from cachedoctor.layouts.interface import LayoutError, LayoutOptions

#: Read at most this much of a config file: they are kilobytes; a multi-gigabyte file named
#: ``--config`` by mistake is not parsed into memory.
MAX_CONFIG_BYTES = 1024 * 1024
KNOWN = (
    "a SimpleTuner multidatabackend.json, a kohya or musubi-tuner dataset TOML, a diffusion-pipe dataset "
    "or training TOML, or an ai-toolkit job YAML"
)


def identify(path: str) -> tuple[str, str]:
    """``(layout name, what in the file shows it)`` for the config file at ``path``; a
    :class:`LayoutError` when it cannot be read or is no trainer's config cachedoctor knows."""
    data = _read(path)
    suffix = os.path.splitext(path)[1].lower()
    parsed = _parse(path, data, suffix)
    found = _classify(parsed)
    if found is not None:
        return found
    if suffix == ".json" or isinstance(parsed, list):  # SimpleTuner's own loader says what is wrong with it
        return "simpletuner", "a JSON list of data backends"
    raise LayoutError(path, f"not a trainer config cachedoctor knows; pass {KNOWN}")


def routed(options: LayoutOptions) -> LayoutOptions:
    """``options`` with its ``config`` (``--config``, any trainer's file) where that trainer's
    layout reads it: SimpleTuner's stays in ``config``, sd-scripts' goes to ``kohya_config``, the
    others to ``trainer_config``. Identified once; routed options are returned as they are."""
    if not options.config or options.config_sign is not None:
        return options
    path = os.path.abspath(options.config)
    layout, sign = identify(path)
    if layout == "simpletuner":
        return replace(options, config_sign=sign)
    if layout == "kohya":
        if options.kohya_config and os.path.abspath(options.kohya_config) != path:
            raise UsageError("--config and --kohya-config name two sd-scripts dataset configs; pass one")
        return replace(options, config=None, kohya_config=path, config_sign=sign)
    return replace(options, config=None, trainer_config=(layout, path), config_sign=sign)


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except IsADirectoryError:
        raise LayoutError(path, "is a folder; --config takes the trainer's config file") from None
    except FileNotFoundError:
        raise LayoutError(path, "no such file; check the --config path") from None
    except OSError as exc:
        raise LayoutError(path, f"cannot be read ({exc.strerror or exc}); check its permissions") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise LayoutError(path, f"is over {MAX_CONFIG_BYTES // 2**20} MiB: not a trainer config; check the path")
    return data


def _parse(path: str, data: bytes, suffix: str) -> Any:
    """The file's content as JSON, TOML or YAML: by suffix first, then whichever parses."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise LayoutError(path, f"is not text (not UTF-8); pass {KNOWN}") from None
    order = {".json": ("json",), ".toml": ("toml",), ".yaml": ("yaml",), ".yml": ("yaml",)}.get(suffix, ())
    for kind in (*order, *(k for k in ("json", "toml", "yaml") if k not in order)):
        try:
            return _PARSERS[kind](text)
        except Exception:  # each parser raises its own error types; the next one is tried
            continue
    if suffix == ".json":
        return None  # SimpleTuner's loader reports the JSON error with its line
    raise LayoutError(path, f"is neither JSON, TOML nor YAML; pass {KNOWN}")


def _json(text: str) -> Any:
    return json.loads(text)


def _toml(text: str) -> Any:
    import io

    from cachedoctor.toml import load

    return load(io.BytesIO(text.encode("utf-8")))


def _yaml(text: str) -> Any:
    import yaml

    value = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml's parser where built
    if not isinstance(value, dict):  # a plain word parses as YAML too: only a mapping is a job file
        raise ValueError("not a mapping")
    return value


_PARSERS = {"json": _json, "toml": _toml, "yaml": _yaml}


def _classify(value: Any) -> tuple[str, str] | None:
    if isinstance(value, list):
        if value and all(isinstance(d, dict) for d in value) and any(_simpletuner_backend(d) for d in value):
            return "simpletuner", "a JSON list of data backends"
        return None
    if not isinstance(value, dict):
        return None
    datasets = value.get("datasets")
    if isinstance(datasets, list) and datasets and all(isinstance(d, dict) for d in datasets):
        if any(isinstance(d.get("subsets"), list) for d in datasets):
            return "kohya", "[[datasets.subsets]] (sd-scripts' dataset config)"
        musubi = ("image_directory", "video_directory", "image_jsonl_file", "video_jsonl_file")
        if any(any(k in d for k in musubi) for d in datasets):
            return "musubi", "[[datasets]] with image_directory/video_directory (musubi-tuner's dataset config)"
    directories = value.get("directory")
    if isinstance(directories, list) and directories and all(isinstance(d, dict) and "path" in d for d in directories):
        return "diffusion-pipe", "[[directory]] tables with path (diffusion-pipe's dataset config)"
    if isinstance(value.get("model"), dict) and isinstance(value.get("dataset"), str):
        return "diffusion-pipe", "[model] and dataset = ... (diffusion-pipe's training config)"
    config = value.get("config")
    processes = config.get("process") if isinstance(config, dict) else None
    if isinstance(processes, list) and any(
        isinstance(p, dict) and isinstance(p.get("datasets"), list) for p in processes
    ):
        return "ai-toolkit", "config.process[].datasets (an ai-toolkit job)"
    return None


def _simpletuner_backend(entry: dict[str, Any]) -> bool:
    return any(k in entry for k in ("instance_data_dir", "cache_dir_vae", "dataset_type", "cache_dir")) or (
        "id" in entry and "type" in entry
    )


__all__ = ["KNOWN", "MAX_CONFIG_BYTES", "identify", "routed"]
