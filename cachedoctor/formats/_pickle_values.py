"""The values the static pickle walk keeps on its stack and in its memo in place of the objects a
loader would build: a resolved global, the size of a bytes value (never its content), a container
being built (references to what went in), or the result of a call it does not follow. Nothing
here allocates in proportion to what the loader would allocate.
"""

from __future__ import annotations


class Global:
    """A global the walk resolved (``module.name`` as the unpickler resolves it)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


class Blob:
    """A ``bytes`` or ``bytearray`` of ``size`` bytes; its content is never kept."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size


class Box:
    """A list, dict or set the pickle builds; ``items`` (a dict's keys and values alternate)
    holds the walk's values of what was put in, references only."""

    __slots__ = ("kind", "items")

    def __init__(self, kind: str, items: list[object] | None = None) -> None:
        self.kind = kind
        self.items: list[object] = items if items is not None else []


class Made:
    """The result of a call whose value the walk does not follow (a tensor, a device)."""

    __slots__ = ()


MADE = Made()


__all__ = ["MADE", "Blob", "Box", "Global", "Made"]
