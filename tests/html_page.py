"""Read an HTML report back with the standard library's parser, as the tests check it: its tables
(by id: rows of cell texts, with each row's ``data-*`` attributes), its tags and attributes, and
every ``<title>`` of the SVG charts (each bar segment and dot names its number there)."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser


@dataclass
class Row:
    attrs: dict[str, str]
    cells: list[str] = field(default_factory=list)


@dataclass
class Page:
    tables: dict[str, list[Row]] = field(default_factory=dict)
    table_attrs: dict[str, dict[str, str]] = field(default_factory=dict)
    tags: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    titles: list[str] = field(default_factory=list)  # SVG <title> texts
    text: list[str] = field(default_factory=list)  # every text node, unescaped

    def rows(self, table: str, **attrs: str) -> list[Row]:
        return [r for r in self.tables[table] if all(r.attrs.get(f"data-{k}") == v for k, v in attrs.items())]

    def by_class(self, css: str) -> list[tuple[dict[str, str], list[Row]]]:
        """The tables of class ``css``: each one's attributes and rows, in page order."""
        return [
            (self.table_attrs[k], rows) for k, rows in self.tables.items() if self.table_attrs[k].get("class") == css
        ]

    def cell(self, row_id: str) -> str:
        """The value cell of a ``<tr id=...>`` (the summary table's rows)."""
        for rows in self.tables.values():
            for row in rows:
                if row.attrs.get("id") == row_id:
                    return row.cells[-1]
        raise KeyError(row_id)


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page = Page()
        self.table: list[Row] | None = None
        self.row: Row | None = None
        self.cell: list[str] | None = None
        self.title: list[str] | None = None
        self.svg = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        self.page.tags.append((tag, values))
        if tag == "table":
            key = values.get("id") or f"table-{len(self.page.tables)}"
            self.page.table_attrs[key] = values
            self.table = self.page.tables.setdefault(key, [])
        elif tag == "tr" and self.table is not None:
            self.row = Row(values)
            self.table.append(self.row)
        elif tag in ("td", "th") and self.row is not None:
            self.cell = []
        elif tag == "svg":
            self.svg += 1
        elif tag == "title" and self.svg:
            self.title = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self.row is not None and self.cell is not None:
            self.row.cells.append("".join(self.cell).strip())
            self.cell = None
        elif tag == "tr":
            self.row = None
        elif tag == "table":
            self.table = None
        elif tag == "svg":
            self.svg -= 1
        elif tag == "title" and self.title is not None:
            self.page.titles.append("".join(self.title))
            self.title = None

    def handle_data(self, data: str) -> None:
        self.page.text.append(data)
        if self.cell is not None:
            self.cell.append(data)
        if self.title is not None:
            self.title.append(data)


def read_page(html: str) -> Page:
    reader = _Reader()
    reader.feed(html)
    reader.close()
    return reader.page
