#!/usr/bin/env python3
"""Render the finding-kinds table of ``docs/kinds.md`` from the checks' own texts.

    python docs/gen_kinds.py            # rewrite the table between the markers in docs/kinds.md
    python docs/gen_kinds.py --check    # exit 1 when docs/kinds.md is not what this renders

Each check class in ``cachedoctor/checks/`` carries its ``kind``, default ``severity``, ``fix``,
``summary`` (what it means) and ``repair`` (what ``cachedoctor repair`` does); ``cachedoctor
explain KIND`` prints the same texts. ``tests/e2e/test_docs.py`` fails when the table drifts.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
KINDS_MD = DOCS / "kinds.md"
START, END = "<!-- kinds:start -->", "<!-- kinds:end -->"


def _cell(text: str) -> str:
    """One table cell: whitespace collapsed; pipes, asterisks and angle brackets escaped."""
    text = " ".join(text.split())
    for raw, escaped in (("|", "\\|"), ("*", "\\*"), ("<", "&lt;"), (">", "&gt;")):
        text = text.replace(raw, escaped)
    return text


def render() -> str:
    """The markdown table, one row per registered check, in the scan's order."""
    sys.path.insert(0, str(DOCS.parent))
    from cachedoctor.checks import CHECKS

    lines = ["| kind | severity | fix | what it means | what repair does |", "| --- | --- | --- | --- | --- |"]
    for check in CHECKS:
        lines.append(
            f"| `{check.kind}` | {check.severity.value} | `{check.fix.value}` | "
            f"{_cell(check.summary)} | {_cell(check.repair)} |"
        )
    return "\n".join(lines) + "\n"


def rendered_document(current: str) -> str:
    """``current`` with the text between the markers replaced by :func:`render`."""
    head, sep, rest = current.partition(START)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise SystemExit(f"{KINDS_MD}: the markers {START} / {END} are missing")
    return f"{head}{START}\n{render()}{END}{tail}"


def main(argv: list[str]) -> int:
    current = KINDS_MD.read_text(encoding="utf-8")
    wanted = rendered_document(current)
    if "--check" in argv:
        if wanted != current:
            print(f"{KINDS_MD} is out of date: run `python docs/gen_kinds.py`", file=sys.stderr)
            return 1
        return 0
    if wanted != current:
        KINDS_MD.write_text(wanted, encoding="utf-8")
        print(f"updated {KINDS_MD}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
