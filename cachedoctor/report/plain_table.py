"""A table of plain ASCII cells written as rich writes it, without importing rich (some 35 ms).

The table report's findings-by-kind table is a ``rich.table.Table(show_edge=False,
pad_edge=False)`` with rich's default box (``HEAVY_HEAD``): columns one space of padding either
side except at the outer edges, ``┃`` between the header cells, a ``━``/``╇`` rule under them,
``│`` between the body cells. When every cell is printable ASCII (one line, one column a
character) and the table fits its width at its natural column widths, rich neither wraps nor
collapses a column, and its lines are the cells left-justified in those widths; this module
writes exactly those lines. Anything else (a cell rich measures or wraps otherwise, a table too
wide for the width) is left to rich: :func:`plain_table` answers ``None``. The caller decides
whether the output may carry the box characters at all (no colour, a UTF-8 stream).
"""

from __future__ import annotations

from collections.abc import Sequence

_HEAD_VERTICAL, _HEAD_RULE, _HEAD_CROSS, _BODY_VERTICAL = "┃", "━", "╇", "│"


def plain_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], min_widths: Sequence[int | None], width: int
) -> list[str] | None:
    """The lines (trailing spaces stripped) rich writes for a table of these ``headers`` and
    ``rows`` in ``width`` columns, ``min_widths[i]`` the ``min_width`` of column ``i`` (whether a
    column may wrap does not matter: none has to); ``None`` where rich would have to do more than
    lay the cells out."""
    last = len(headers) - 1
    if last < 0 or any(len(row) != len(headers) for row in rows):
        return None
    contents: list[int] = []  # each column's width, its padding excluded
    for index, header in enumerate(headers):
        cells = [header, *(row[index] for row in rows)]
        if not all(cell.isascii() and cell.isprintable() for cell in cells):
            return None  # tabs, controls, wide or combining characters: rich measures them itself
        padding = (index > 0) + (index < last)
        natural = max(len(cell) for cell in cells)
        least = min_widths[index]
        if least is not None:  # rich clamps the column to min_width + its padding
            natural = max(natural, least)
        contents.append(max(natural, 1 - padding))  # (a column rich measures as 0 is 1 wide)
    padded = [content + (index > 0) + (index < last) for index, content in enumerate(contents)]
    if sum(padded) + last > width:  # rich would collapse or wrap a column
        return None

    def line(cells: Sequence[str], vertical: str) -> str:
        parts = [cell.ljust(contents[index]) for index, cell in enumerate(cells)]
        return f" {vertical} ".join(parts).rstrip()

    rule = _HEAD_CROSS.join(_HEAD_RULE * w for w in padded)
    return [line(headers, _HEAD_VERTICAL), rule, *(line(row, _BODY_VERTICAL) for row in rows)]
