"""What every layout's :meth:`~cachedoctor.layouts.interface.Layout.recompute_spec` shares: the
healthy peer that shows the format (:class:`TemplateFinder`), the caption of a text entry, and
the generic specs a layout starts from.

A template is looked for among a few files of the same folder and kind (the layout's
:meth:`~cachedoctor.layouts.interface.Layout.template_kind`: role and suffix by default) that the scan
found nothing wrong with and whose quick read is clean; repair copies its container, keys and
dtypes. Reads here are metadata only (``deep=False``): planning a repair must stay cheap.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from cachedoctor import keynames
from cachedoctor.layouts.model import Expected, RecomputeSpec, SpecOrWhy, Template

if TYPE_CHECKING:
    from cachedoctor.formats.interface import FileMeta

#: Text-encoder outputs beside latents in one folder, both ``.npz`` (kohya's names; a manifest
#: describing a kohya cache has the same files): a latent's template must not be one of these.
_NPZ_TEXT = ("_te_outputs.npz", "_te.npz")
_TEMPLATE_TRIES = 12
#: Healthy peers a recompute is verified against (repair runs the scan's peer checks on the new
#: file among them: a strict majority of 8 catches an encoder with other channels).
_PEERS = 8
NO_SIZE = "the layout does not record this entry's latent size (no bucket metadata for it)"


class TellsKinds(Protocol):
    """What a template search asks of the layout that planned an entry: ``Layout`` calls this
    module for its defaults, so it is named here by the one method used, not imported."""

    def template_kind(self, name: str, role: str) -> str: ...


class TemplateFinder:
    """A healthy peer per (folder, kind of entry), remembered for the whole plan, and up to
    ``_PEERS`` of its healthy neighbours. ``bad`` holds the paths with findings, never templates.

    The kind of an entry is the layout's to say (:meth:`Layout.template_kind`): a file of the same
    folder and suffix is not always the same kind of file (musubi-tuner keeps a latent
    ``_zi.safetensors`` and a text embed ``_zi_te.safetensors`` side by side, of several
    architectures), and a latent must never be made in the shape of a text embed."""

    #: Healthy peers picked per template (a finder whose verification cannot list the folder
    #: itself, a bucket's, asks for enough to judge a recompute's scale: ``repair/peer_scale.py``).
    peers = _PEERS

    def __init__(self, bad: set[str]) -> None:
        self.bad = bad
        self.cache: dict[tuple[str, str], Template | None] = {}

    def find(self, folder: str, kind: str, kind_of: KindOf) -> Template | None:
        """A template among ``folder``'s files whose ``kind_of(name)`` is ``kind``."""
        key = (folder, kind)
        if key not in self.cache:
            self.cache[key] = self._search(folder, kind, kind_of)
        return self.cache[key]

    def for_entry(self, path: str, expected: Expected, layout: TellsKinds | None = None) -> Template | None:
        """The template for the entry at ``path`` (``layout``: the one that planned it)."""
        role = role_of(expected)

        def kind_of(name: str) -> str:
            return layout.template_kind(name, role) if layout is not None else default_kind(name, role)

        return self.find(os.path.dirname(path), kind_of(os.path.basename(path)), kind_of)

    def _search(self, folder: str, kind: str, kind_of: KindOf) -> Template | None:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            return None
        return self._pick(((name, os.path.join(folder, name)) for name in names), kind, kind_of, _healthy_file)

    def _pick(
        self,
        entries: Iterable[tuple[str, str]],
        kind: str,
        kind_of: KindOf,
        load: Callable[[str], tuple[str, FileMeta] | None],
    ) -> Template | None:
        """The template from ``(name, key)`` entries in name order: up to :attr:`peers` that ``load``
        finds healthy (as ``(local path, meta)``), after at most ``_TEMPLATE_TRIES`` candidates
        (more by as many as :attr:`peers` exceeds ``_PEERS``).
        A folder on disk and a prefix in a bucket differ only in their entries and ``load``."""
        tries = 0
        healthy: list[tuple[str, FileMeta]] = []
        for name, key in entries:
            if key in self.bad or name.startswith(".") or kind_of(name) != kind:
                continue
            tries += 1
            found = load(key)
            if found is not None:
                healthy.append(found)
                if len(healthy) >= self.peers:
                    break
            if tries >= _TEMPLATE_TRIES + self.peers - _PEERS:
                break
        if not healthy:
            return None
        return Template(
            healthy[0][0], healthy[0][1], tuple(p for p, _ in healthy), tuple(m.metadata for _, m in healthy)
        )


#: A file name -> the kind of entry it is, for templates (``Layout.template_kind`` with the role bound).
KindOf = Callable[[str], str]


def default_kind(name: str, role: str) -> str:
    """The kind of entry ``name`` is when its layout says nothing more: its suffix, with ``role``
    (the entry's); kohya's text-encoder outputs (``_te_outputs.npz``, ``_te.npz``) are told from
    its latents (``.npz`` too) by name."""
    suffix = suffix_of(name)
    if suffix == ".npz":
        return ("text" if name.endswith(_NPZ_TEXT) else "latent") + suffix
    return role + suffix


def _healthy_file(path: str) -> tuple[str, FileMeta] | None:
    """``(path, meta)`` of a local file fit to be a template: it reads, trusts and holds tensors."""
    meta = own_meta(path)
    return (path, meta) if meta is not None and meta.tensors else None


def role_of(expected: Expected) -> str:
    return "text" if expected.role == "text" else "latent"


def suffix_of(path: str) -> str:
    return os.path.splitext(path)[1] or ".pt"


def keys_of(template: Template | None) -> tuple[str, ...]:
    return tuple(t.key for t in template.meta.tensors) if template else ()


def dtypes_of(template: Template | None) -> dict[str, str]:
    return {t.key: t.dtype for t in template.meta.tensors} if template else {}


def format_of(template: Template | None, path: str) -> str:
    """The container format to write: the template's, else the one the name implies."""
    if template is not None:
        return template.meta.format
    return "npz" if path.endswith(".npz") else "safetensors" if path.endswith(".safetensors") else "torch-zip"


def metadata_of(template: Template | None) -> tuple[tuple[tuple[str, str], ...], str | None]:
    """The safetensors metadata a recompute writes where the layout does not say what the trainer
    writes for the entry: what every healthy peer holds alike; or why not, when a key's value
    differs between peers (a value of the entry's own, such as an image size, that this layout
    cannot know: a guess from a peer would be wrong)."""
    if template is None or not any(template.metadata):
        return (), None
    first = dict(template.metadata[0])
    varying = sorted(
        {k for m in template.metadata for k, v in m if first.get(k) != v}
        | {k for m in template.metadata for k in first if k not in dict(m)}
    )
    if varying:
        return (), (
            f"its healthy peers' safetensors metadata differs per entry ({', '.join(varying)}), which this layout "
            "cannot know for the entry; re-cache it with the trainer, or repair with the trainer's layout"
        )
    return template.metadata[0], None


def latent_hw_of(expected: Expected) -> tuple[int, int] | None:
    """The latent's spatial size the layout recorded (or the last two sizes of its shape)."""
    if expected.latent_hw is not None:
        return expected.latent_hw
    return (expected.shape[-2], expected.shape[-1]) if expected.shape and len(expected.shape) >= 2 else None


def caption(expected: Expected) -> str | None:
    """The caption a text entry encodes: recorded by the layout, or read from its caption file."""
    if expected.text is not None:
        return expected.text
    if expected.source.lower().endswith((".txt", ".caption")):
        try:
            with open(expected.source, encoding="utf-8") as handle:
                return handle.read().strip()
        except (OSError, UnicodeDecodeError):
            return None
    return None


def own_meta(path: str) -> FileMeta | None:
    """The broken entry's own quick read, when it still has one (kohya keeps the bucket in it).
    A file with a pickle outside the allow-list is untrusted: nothing of it is believed."""
    from cachedoctor.formats import ReadError, read_file

    try:
        meta = read_file(path, deep=False)
    except (ReadError, OSError):
        return None
    if meta is None or meta.foreign_globals or meta.unreadable_reason:
        return None
    return meta


def precondition(expected: Expected | None) -> str | None:
    """Why no layout can recompute this entry (its source unknown or gone), else ``None``."""
    if expected is None:
        return "its source is unknown: repair with the dataset (--config, --layout or --manifest)"
    remote = "://" in expected.source  # an image in a bucket: the dataset's listing saw it (source_exists)
    if not expected.source_exists or not (remote or os.path.exists(expected.source)):
        return f"its source {expected.source} is gone"
    return None


def text_spec(expected: Expected, template: Template | None, path: str) -> SpecOrWhy:
    """A text entry: the caption encoded, in the template's container and keys."""
    text = caption(expected)
    if text is None:
        return None, "no caption is recorded for it (the layout keeps captions this repair cannot read)"
    metadata, why = metadata_of(template)
    if why is not None:
        return None, why
    return RecomputeSpec(
        "text",
        expected.source,
        "dict",
        format_of(template, path),
        "",
        "float32",
        False,
        None,
        text=text,
        keys=keys_of(template),
        template=template.path if template else None,
        metadata=metadata,
    ), None


def generic_latent_spec(expected: Expected, template: Template | None, path: str) -> SpecOrWhy:
    """A raw latent under the key the layout names, else the template's container: a bare tensor,
    or the template's largest tensor."""
    hw = latent_hw_of(expected)
    if hw is None:
        return None, NO_SIZE
    metadata, why = metadata_of(template)
    if why is not None:
        return None, why
    meta = template.meta if template else None
    if expected.latent_key is not None and expected.latent_key.endswith(("_HxW", "_FxHxW")):
        # a key family (musubi's latents_FxHxW): the entry's own key is a peer's, spelled for its size
        found = next((t for t in meta.tensors if keynames.family(t.key) == expected.latent_key), None) if meta else None
        spelled = keynames.parse(found.key).dims if found is not None else None
        if found is None or spelled is None:
            return (
                None,
                f"its key is named by size and dtype ({expected.latent_key}), and no healthy peer shows the name",
            )
        key = keynames.spell(found.key, (*spelled[:-2], hw[0], hw[1]))
    elif expected.latent_key is not None:
        key = expected.latent_key
    elif meta is None or meta.container == "tensor":
        key = ""
    else:
        key = max(meta.tensors, key=lambda t: t.numel).key
    container = format_of(template, path)
    if key == "" and container not in ("torch-zip", "torch-gzip", "torch-legacy"):
        return None, (
            f"a {container} file holds named tensors, and neither the layout nor a healthy peer names the key "
            "of its latent; re-cache it with the trainer, or name the key (a manifest's key column)"
        )
    return RecomputeSpec(
        "latent",
        expected.source,
        "bare-tensor" if key == "" else "dict",
        container,
        key,
        dtypes_of(template).get(key, "float32"),
        False,
        hw,
        keys=keys_of(template),
        template=template.path if template else None,
        metadata=metadata,
    ), None
