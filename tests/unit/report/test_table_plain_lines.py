"""The table report writes a plain line without rich exactly as rich writes it (``report/table.py``).

A report without colour writes its plain ASCII lines itself (a clean ``-q`` scan then never
imports rich); every other line goes through rich's console. Each line here is written both
ways, the plain way and rich's, at two widths and three styles, and must come out the same,
byte for byte: short and long lines (longer than the width: never wrapped), blank ones,
trailing and leading spaces, several lines in one, and what the plain way leaves to rich
(a tab, a control character, non-ASCII text).
"""

from __future__ import annotations

import io
import random

import pytest

from cachedoctor.report.table import _Console

_LINES = [
    "", " ", "No findings.", "x  ", "  y", "a\nb", "a\n\nb\n", "\n", "a " * 100, "p" * 300, "a \n b  \n",
    "tab\there", "ü", "中文 wide", "\x1b[31mred", "a\rb", "\x7f", "[bold]not markup[/bold]", ":smile: not an emoji",
    "0 error(s), 1 warning(s) in 1 file(s). `cachedoctor repair` can fix 1 file(s): 1 to rewrite.",
]  # fmt: skip


def _written(text: str, style: str, width: int, *, plain: bool) -> str:
    out = io.StringIO()
    console = _Console(out, False, width)
    console.plain = plain
    console.line(text, style)
    console.blank()
    return out.getvalue()


@pytest.mark.parametrize("width", [20, 80])
def test_a_plain_line_is_written_as_rich_writes_it(width: int) -> None:
    rng = random.Random(31)
    lines = _LINES + ["".join(rng.choice("ab \n.:-/[]()") for _ in range(rng.randint(0, 200))) for _ in range(500)]
    for text in lines:
        for style in ("", "bold", "dim"):
            assert _written(text, style, width, plain=True) == _written(text, style, width, plain=False), text


def test_a_report_without_colour_and_with_nothing_but_plain_lines_imports_no_rich() -> None:
    """In a fresh interpreter: a clean quiet report's one line, written without rich."""
    import subprocess
    import sys

    code = (
        "import io, sys\n"
        "from cachedoctor.report.table import _Console\n"
        "out = io.StringIO(); c = _Console(out, False, 80); c.line('No findings.'); c.blank()\n"
        "print(repr(out.getvalue()), [m for m in sys.modules if m.split('.')[0] == 'rich'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "'No findings.\\n\\n' []\n"


def test_colour_goes_through_rich() -> None:
    out = io.StringIO()
    _Console(out, True, 80).line("No findings.", "bold")
    assert out.getvalue() == "\x1b[1mNo findings.\x1b[0m\n"
