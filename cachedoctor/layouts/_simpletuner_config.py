"""Read SimpleTuner's ``multidatabackend.json`` the way SimpleTuner does, and say what was skipped.

Relative paths in the config are relative to the directory SimpleTuner runs in (its checkout);
cachedoctor tries the current directory, the config's folder and that folder's parent, and uses
the first under which a dataset folder exists. ``{id}``, ``{model_family}`` and ``{output_dir}``
come from the dataset, ``--model-family``/``--output-dir``, or the ``config.json`` beside the
data-backend config.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from cachedoctor.layouts.interface import LayoutError, LayoutOptions

_CHECKED_TYPES = ("image", "text_embeds")


@dataclass(frozen=True, slots=True)
class Backend:
    """One dataset of the config, with placeholders filled and paths absolute."""

    id: str
    dataset_type: str
    raw: dict[str, Any]
    instance_data_dir: str | None
    cache_dir_vae: str | None
    cache_dir: str | None  # text_embeds datasets
    text_embeds: str | None  # the text_embeds dataset this image dataset uses (None: default)
    kind: str = "local"  # the backend ``type``: "local", or "aws" (its paths are keys in its bucket)


@dataclass(slots=True)
class SimpleTunerConfig:
    path: str
    base: str
    model_family: str | None
    backends: list[Backend]
    skipped: list[str]
    notes: list[str]
    validation_prompts: list[str]
    remote_links: list[str | None]  # text_embeds links of image datasets not on this disk (None: default)
    latent_dtype: str = "bfloat16"  # what the VAE cache holds: the VAE's dtype (``--vae_dtype``)
    compressed: bool = False  # ``--compress_disk_cache``: every cache file is gzip(torch.save(...))


def load(options: LayoutOptions) -> SimpleTunerConfig:
    assert options.config is not None
    path = os.path.abspath(options.config)
    entries = _read_json(path)
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise LayoutError(path, "not a SimpleTuner data-backend config: expected a JSON list of dataset objects")
    trainer = _trainer_config(path)
    model_family = options.model_family or _option(trainer, "model_family")
    output_dir = options.output_dir or _option(trainer, "output_dir")
    bases = list(dict.fromkeys([os.getcwd(), os.path.dirname(path), os.path.dirname(os.path.dirname(path))]))
    base = _choose_base(entries, bases)
    notes: list[str] = []
    if base != os.getcwd():
        notes.append(f"relative paths in {os.path.basename(path)} resolved against {base}")
    skipped: list[str] = []
    remote_links: list[str | None] = []
    backends: list[Backend] = []
    for n, entry in enumerate(entries):
        ident = str(entry.get("id") or f"#{n}")
        dataset_type = str(entry.get("dataset_type") or "image")
        why = _skip_reason(entry, dataset_type)
        if why is None:
            fill = {"id": ident, "model_family": model_family, "output_dir": output_dir}
            try:
                if str(entry.get("type") or "local") == "aws":
                    backends.append(_aws_backend(ident, dataset_type, entry, fill))
                    continue
                backends.append(
                    Backend(
                        ident,
                        dataset_type,
                        entry,
                        _path(entry.get("instance_data_dir"), fill, base),
                        _path(entry.get("cache_dir_vae"), fill, base),
                        _path(entry.get("cache_dir"), fill, base),
                        entry.get("text_embeds") if isinstance(entry.get("text_embeds"), str) else None,
                    )
                )
                continue
            except KeyError as exc:
                why = f"its paths use {{{exc.args[0]}}}, which is unknown (pass --{exc.args[0].replace('_', '-')})"
        skipped.append(ident)
        notes.append(f"dataset {ident!r} skipped: {why}")
        if dataset_type == "image" and not entry.get("disabled") and str(entry.get("type") or "local") != "local":
            link = entry.get("text_embeds")
            remote_links.append(link if isinstance(link, str) else None)
    prompts = [p for p in (_option(trainer, "validation_prompt"),) if isinstance(p, str)]
    return SimpleTunerConfig(
        path,
        base,
        model_family,
        backends,
        skipped,
        notes,
        prompts,
        remote_links,
        _latent_dtype(trainer),
        _option(trainer, "compress_disk_cache") in (True, "true", "True", 1),
    )


def _latent_dtype(trainer: dict[str, Any]) -> str:
    """SimpleTuner caches latents in the VAE's dtype: ``models/common.py`` moves the VAE to the
    accelerator as float32 for ``--vae_dtype fp32`` and as bfloat16 otherwise (``bf16``,
    ``default``, ``none``, unset). (A VAE already on the accelerator's device is not cast: on a
    CPU-only run it stays float32.)"""
    return "float32" if str(_option(trainer, "vae_dtype") or "").lower() == "fp32" else "bfloat16"


def _read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        raise LayoutError(path, "no such config file; pass the path of your multidatabackend.json") from None
    except OSError as exc:
        raise LayoutError(path, f"cannot read the config ({exc.strerror or exc})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f" at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise LayoutError(path, f"not valid JSON{where}; fix the file (SimpleTuner would refuse it too)") from None
    except RecursionError:
        raise LayoutError(path, "JSON nested too deeply to read; fix the file") from None
    except ValueError as exc:  # e.g. an integer too long to convert
        raise LayoutError(path, f"not valid JSON ({exc}); fix the file") from None


def _trainer_config(path: str) -> dict[str, Any]:
    """SimpleTuner's own ``config.json`` beside the data-backend config, if there is one."""
    candidate = os.path.join(os.path.dirname(path), "config.json")
    if os.path.abspath(candidate) == path or not os.path.isfile(candidate):
        return {}
    try:
        with open(candidate, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _option(trainer: dict[str, Any], name: str) -> Any:
    for key in (name, f"--{name}"):
        if trainer.get(key) not in (None, ""):
            return trainer[key]
    return None


def _skip_reason(entry: dict[str, Any], dataset_type: str) -> str | None:
    if entry.get("disabled") or entry.get("disable"):
        return "disabled in the config"
    kind = str(entry.get("type") or "local")
    if kind == "aws":
        missing = [
            k for k in ("aws_bucket_name", "aws_endpoint_url") if not isinstance(entry.get(k), str) or not entry[k]
        ]
        if missing:  # SimpleTuner refuses it too (builders/aws.py:53-74): we cannot tell which server it meant
            return f"type 'aws' without {' and '.join(missing)} (SimpleTuner refuses it too)"
    elif kind != "local":
        return f"type {kind!r} is not on this machine's disk"
    if dataset_type not in _CHECKED_TYPES:
        return f"dataset_type {dataset_type!r} is not compared yet"
    return None


def _aws_backend(ident: str, dataset_type: str, entry: dict[str, Any], fill: dict[str, Any]) -> Backend:
    """An ``aws`` dataset: its ``cache_dir_vae`` and text ``cache_dir`` stay key prefixes, as
    SimpleTuner uses them with an S3 cache backend (``caching/vae.py:170-176`` and
    ``caching/text_embeds.py:93-94`` make only local ones absolute); a text_embeds dataset's
    prefix is ``aws_data_prefix``, else ``cache_dir`` (``data_backend/factory.py:2466-2472``).
    ``instance_data_dir`` holds ``aws_data_prefix``."""
    vae = entry.get("cache_dir_vae")
    text = entry.get("aws_data_prefix") if dataset_type == "text_embeds" else None
    text = text if isinstance(text, str) and text else entry.get("cache_dir")
    prefix = entry.get("aws_data_prefix")
    return Backend(
        ident,
        dataset_type,
        entry,
        _fill(prefix, fill) if isinstance(prefix, str) else "",
        _fill(vae, fill).rstrip("/") if isinstance(vae, str) and vae else None,
        _fill(text, fill).rstrip("/") if isinstance(text, str) and text else None,
        entry.get("text_embeds") if isinstance(entry.get("text_embeds"), str) else None,
        "aws",
    )


def _fill(value: str, fill: dict[str, Any]) -> str:
    for key, replacement in fill.items():
        token = "{" + key + "}"
        if token in value:
            if replacement is None:
                raise KeyError(key)
            value = value.replace(token, str(replacement))
    return value


def _path(value: Any, fill: dict[str, Any], base: str) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    value = os.path.expanduser(_fill(value, fill))
    return os.path.normpath(value if os.path.isabs(value) else os.path.join(base, value))


def _choose_base(entries: list[dict[str, Any]], bases: list[str]) -> str:
    dirs: list[str] = [
        d
        for e in entries
        if isinstance(d := e.get("instance_data_dir"), str)
        and not e.get("disabled")
        and str(e.get("type") or "local") == "local"
    ]
    relative = [d for d in dirs if not os.path.isabs(d) and "{" not in d]
    for base in bases:
        if any(os.path.isdir(os.path.join(base, d)) for d in relative):
            return base
    return bases[0]
