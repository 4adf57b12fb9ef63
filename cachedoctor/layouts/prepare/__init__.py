"""How each trainer turns a source image into the pixels it encodes (see ``interface.py``)."""

from cachedoctor.layouts.prepare.interface import PREPARERS, Prepared, prepare_image

__all__ = ["PREPARERS", "Prepared", "prepare_image"]
