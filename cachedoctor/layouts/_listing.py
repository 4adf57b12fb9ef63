"""A folder's names as ``--layout auto`` hands them to each layout's ``claim`` and ``resembles``.

Every layout asks the same kind of question of a folder: is there any name ending ``.npz``,
any image, any name starting ``shard_`` or ``variation-``? Asked as a Python loop over the
names, that is about 0.1 us a name, per layout and per question: 15-20 ms over the 20,000
names the scout lists (``_images.DETECT_ENTRIES``), paid by every scan and rescan of a large
cache folder (issue 31). :class:`Listing` is still the set of names, and also holds them
joined once, each followed by NUL (no file name holds one), so that each question is one
substring search in C. The layouts ask it first and loop over the names only where it says
yes: their answers are the loops' answers.
"""

from __future__ import annotations

from collections.abc import Iterable

from cachedoctor.layouts._images import IMAGE_SUFFIXES


class Listing(set[str]):
    """A folder's entry names; :meth:`text` and :meth:`folded` are built on first use."""

    __slots__ = ("_folded", "_text")

    def __init__(self, names: Iterable[str] = ()) -> None:
        super().__init__(names)
        self._text: str | None = None
        self._folded: str | None = None

    def text(self) -> str:
        """``NUL`` + every name followed by ``NUL``: ``NUL + prefix`` finds a name's start,
        ``suffix + NUL`` its end."""
        if self._text is None:
            self._text = "\0" + "\0".join(self) + "\0"
        return self._text

    def folded(self) -> str:
        """:meth:`text` lower-cased, for the case-insensitive questions (image suffixes).
        ``str.lower`` maps each name's characters as it would the name alone: a separator is no
        letter, so the context rules (a final sigma) see each name's own ends."""
        if self._folded is None:
            self._folded = self.text().lower()
        return self._folded


def any_ending(names: set[str], *suffixes: str) -> bool:
    """Whether a name ends with one of ``suffixes`` (case-sensitive, as ``str.endswith``):
    ``False`` means no loop over the names can find one."""
    if isinstance(names, Listing):
        text = names.text()
        return any(suffix + "\0" in text for suffix in suffixes)
    return any(name.endswith(suffixes) for name in names)


def any_starting(names: set[str], prefix: str) -> bool:
    """Whether a name starts with ``prefix`` (case-sensitive)."""
    if isinstance(names, Listing):
        return "\0" + prefix in names.text()
    return any(name.startswith(prefix) for name in names)


def any_image(names: set[str]) -> bool:
    """Whether a name is an image's (``_images.is_image``: its suffix in any letter case)."""
    if isinstance(names, Listing):
        folded = names.folded()
        return any(suffix + "\0" in folded for suffix in IMAGE_SUFFIXES)
    return any(name.lower().endswith(IMAGE_SUFFIXES) for name in names)


__all__ = ["Listing", "any_ending", "any_image", "any_starting"]
