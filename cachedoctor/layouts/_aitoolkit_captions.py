"""ostris/ai-toolkit's captions as its text-embedding cache hashes them (commit 27a03a9):
``CaptionProcessingDTOMixin.load_caption``/``get_caption`` (``toolkit/dataloader_mixins.py``
l.333-459) and ``inject_trigger_into_prompt`` (``toolkit/prompt_utils.py:715-748``). A caption's
text is part of its embedding's file name (``_aitoolkit_rules.text_info``), so it must be read
exactly as ai-toolkit reads it: nothing stripped, commas respaced, the trigger put in front.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cachedoctor.layouts._aitoolkit_config import AiToolkitDataset


def inject_trigger(prompt: str, trigger: str | None, add_if_not_present: bool = True) -> str:
    """``inject_trigger_into_prompt``: ``[name]``/``[trigger]`` become the trigger (or nothing),
    and the trigger is put in front, with a space, when the prompt lacks it."""
    trigger = trigger or ""
    out = prompt.replace("[name]", trigger).replace("[trigger]", trigger)
    if trigger.strip() != "" and out.count(trigger) == 0 and add_if_not_present:
        out = trigger + " " + out
    return out


def raw_caption(image_path: str, dataset: AiToolkitDataset) -> str:
    """The caption file's text as ai-toolkit reads it (text mode: ``\\r\\n`` -> ``\\n``; nothing
    stripped), the default_caption for a missing or blank file, else ''."""
    caption_path = os.path.splitext(image_path)[0] + dataset.caption_ext
    try:
        with open(caption_path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return dataset.default_caption if dataset.default_caption is not None else ""
    if text.strip() == "" and dataset.default_caption is not None:
        return dataset.default_caption
    return text


def cache_caption(raw: str, dataset: AiToolkitDataset) -> str:
    """The caption ai-toolkit encodes and hashes when caching text embeddings (``get_caption`` with
    caption/token dropout off, as caching turns them off): commas get a following space
    (``', '.join(raw.split(','))``), then the trigger word. ``shuffle_tokens`` and
    ``random_triggers`` would be random here: see ``AiToolkitDataset.hazards``."""
    caption = ", ".join(raw.split(","))
    return inject_trigger(caption, dataset.trigger_word, dataset.trigger_word is not None and not dataset.is_reg)


def dropout_caption(dataset: AiToolkitDataset) -> str:
    """The caption of the blank embedding cached when ``caption_dropout_rate > 0`` (l.2188-2193)."""
    if dataset.trigger_word is not None and not dataset.is_reg:
        return inject_trigger("", dataset.trigger_word, True)
    return ""


def dop_caption(caption: str, dataset: AiToolkitDataset) -> str:
    """The diff-output-preservation caption: the trigger word replaced by the class (l.373-380)."""
    if dataset.trigger_word is None:
        return caption
    return caption.replace(dataset.trigger_word, dataset.diff_output_preservation_class)


__all__ = ["cache_caption", "dop_caption", "dropout_caption", "inject_trigger", "raw_caption"]
