"""Encoder adapters for ``repair --encoder SPEC``: the registry and :func:`load_encoder`.

A spec is ``NAME[:ARG]`` for a registered adapter (``diffusers-vae:/models/sdxl/vae``), or
``module.path:factory[:ARG]`` for any importable factory. Adapters register under the
entry-point group :data:`ENTRY_POINT_GROUP`; see ``EXAMPLE.md`` beside this file for a complete
third-party adapter and its ``pyproject.toml`` lines.

The spec string, not the encoder object, is what travels to repair workers: each rebuilds its
encoder with :func:`load_encoder`, so loading a spec is deterministic and cheap (no weights).
This package imports neither torch nor the model libraries; the adapters import them when
they load weights.
"""

from __future__ import annotations

import functools
import importlib
from importlib.metadata import entry_points
from typing import Any

from cachedoctor.encoders.interface import API_VERSION, Encoder, EncoderError, EncoderFactory, Modality, Scaling
from cachedoctor.extras import ENCODERS_EXTRA
from cachedoctor.lifetime import reraise_interrupt

#: The entry-point group adapters register in; its version changes only when the interface breaks.
ENTRY_POINT_GROUP = f"cachedoctor.encoders.v{API_VERSION}"

#: The built-in adapters, found even when cachedoctor's package metadata is not installed.
BUILTINS: dict[str, str] = {
    "diffusers-vae": "cachedoctor.encoders.diffusers_vae:factory",
    "transformers-text": "cachedoctor.encoders.transformers_text:factory",
}


def available() -> dict[str, str]:
    """Registered adapter names -> ``"module:attr"``, sorted by name.

    Built-in names always mean the built-in adapters, so a third-party package cannot change
    what ``diffusers-vae`` runs; among third parties the first distribution found wins.
    """
    found: dict[str, str] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.attr:  # a module-only entry point names no factory
            found.setdefault(ep.name, f"{ep.module}:{ep.attr}")
    found.update(BUILTINS)
    return dict(sorted(found.items()))


def load_encoder(spec: str) -> Encoder:
    """The encoder a spec names, constructed (path checked) but without weights loaded.

    Raises :class:`EncoderError` (path: the spec) saying what went wrong and what to do.
    """
    target, arg = _target(spec)
    factory = _import_factory(spec, target)
    try:
        encoder = factory(arg)
    except EncoderError:
        raise
    except ImportError as e:
        raise EncoderError(spec, f"{_missing(e)} is not installed; {_install_hint(target)}") from e
    except Exception as e:  # a factory bug or a bad ARG: exit 2 with the reason, not a traceback
        reraise_interrupt(e)
        raise EncoderError(
            spec, f"the factory {target} failed: {type(e).__name__}: {e}; check the ARG after ':'"
        ) from e
    _check(spec, target, encoder)
    return encoder


def _target(spec: str) -> tuple[str, str | None]:
    """``(module:attr, ARG or None)``: a registered name splits at the first ':'; else module:attr[:ARG]."""
    name, sep, rest = spec.partition(":")
    registry = available()
    if name in registry:
        return registry[name], (rest or None)
    attr, sep2, arg = rest.partition(":")
    if sep and _dotted(name) and _dotted(attr):
        return f"{name}:{attr}", (arg or None) if sep2 else None
    known = ", ".join(registry) or "none"
    raise EncoderError(
        spec,
        f"unknown encoder {name!r}; use one of {known} as NAME[:ARG], or module.path:factory[:ARG] "
        "for an importable factory",
    )


def _dotted(text: str) -> bool:
    return bool(text) and all(part.isidentifier() for part in text.split("."))


def _import_factory(spec: str, target: str) -> EncoderFactory:
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        if e.name is not None and _is_prefix(e.name, module_name):
            raise EncoderError(
                spec, f"no module named {e.name!r}; check the spelling, or install the package that provides it"
            ) from e
        raise EncoderError(
            spec, f"{module_name} needs {_missing(e)}, which is not installed; {_install_hint(target)}"
        ) from e
    except Exception as e:
        reraise_interrupt(e)
        raise EncoderError(
            spec, f"importing {module_name} failed: {type(e).__name__}: {e}; fix or reinstall that module"
        ) from e
    try:
        factory = functools.reduce(getattr, attr.split("."), module)
    except AttributeError as e:
        raise EncoderError(
            spec, f"module {module_name} has no attribute {attr!r}; name its factory function after ':'"
        ) from e
    if not callable(factory):
        raise EncoderError(
            spec, f"{target} is not callable ({type(factory).__name__}); name a factory function taking ARG"
        )
    return factory


def _is_prefix(missing: str, module_name: str) -> bool:
    """Whether the module that failed to import is ``module_name`` or one of its parents."""
    return module_name == missing or module_name.startswith(missing + ".")


def _missing(e: ImportError) -> str:
    return repr(e.name) if e.name else str(e)


def _install_hint(target: str) -> str:
    if target in BUILTINS.values():  # the [encoders] extra holds torch, diffusers and transformers
        from cachedoctor.install_hint import install_command

        return f"install it with: {install_command(ENCODERS_EXTRA)}"
    return "install the packages that adapter needs"


def _check(spec: str, target: str, encoder: Any) -> None:
    """Refuse what would fail later inside a worker: not an Encoder, another API version, bad attributes."""
    if not isinstance(encoder, Encoder):
        raise EncoderError(
            spec,
            f"{target} returned {type(encoder).__name__!r}, not a cachedoctor.encoders.Encoder; "
            "its factory must return an Encoder subclass instance",
        )
    if encoder.api_version != API_VERSION:
        raise EncoderError(
            spec,
            f"adapter speaks encoder API v{encoder.api_version}, this cachedoctor v{API_VERSION}; upgrade one of them",
        )
    problems = []
    if not isinstance(getattr(encoder, "name", None), str):
        problems.append("name")
    if not isinstance(getattr(encoder, "modality", None), Modality):
        problems.append("modality")
    keys = getattr(encoder, "output_keys", None)
    if not (isinstance(keys, tuple) and keys and all(isinstance(k, str) for k in keys)):
        problems.append("output_keys")
    if problems:
        raise EncoderError(
            spec, f"{target} built an Encoder without a valid {', '.join(problems)}; set them in its __init__ or class"
        )


__all__ = [
    "BUILTINS",
    "ENTRY_POINT_GROUP",
    "Encoder",
    "EncoderError",
    "EncoderFactory",
    "Modality",
    "Scaling",
    "available",
    "load_encoder",
]
