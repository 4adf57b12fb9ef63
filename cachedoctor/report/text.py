"""Text helpers the machine-read formats share: paths relative to the cwd, and strings any
UTF-8 writer accepts.

File names are bytes on POSIX; Python hands undecodable bytes over as lone surrogates
(``surrogateescape``), which a strict UTF-8 writer (``--output`` uses one) refuses. The JSON
formats escape them; the text formats show each such byte as U+FFFD instead of crashing.
"""

from __future__ import annotations

import os
import re

from cachedoctor.stores.interface import is_remote

_SURROGATE = re.compile("[\ud800-\udfff]")


def displayable(text: str) -> str:
    """``text`` with each lone surrogate (an undecodable file-name byte) shown as U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """A path as a terminal may show it: each control character (a newline, an escape sequence,
    a carriage return) written ``\\xNN``, so a file or key name can neither forge a line of the
    report ("repaired: the rescan is clean") nor drive the terminal. Other names are unchanged."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def relative(path: str, cwd: str) -> str:
    """``path`` relative to ``cwd`` when it lies below it, else as given (as the table shows it;
    each machine format then escapes it its own way, a terminal with :func:`terminal_safe`)."""
    if is_remote(path):  # an s3:// URL is shown whole
        return path
    try:
        rel = os.path.relpath(path, cwd)
    except ValueError:  # another drive on Windows
        return path
    return path if rel == ".." or rel.startswith(".." + os.sep) else rel


def shown_path(path: str, cwd: str) -> str:
    """As the scan table and the repair report show a path: relative to ``cwd`` when it lies below
    it, else absolute (an object store's URL whole), terminal-safe."""
    if is_remote(path):  # an s3:// URL is shown whole
        return terminal_safe(path)
    rel = os.path.relpath(path, cwd)
    return terminal_safe(path if rel.startswith("..") else rel)


def human_size(n: float) -> str:
    """Bytes for people, in binary units (what the scan table and repair's plan print)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def wrap_line(line: str, width: int, indent: str | None = None) -> str:
    """``line`` wrapped at word boundaries to ``width`` columns; continuation lines keep its own
    indentation (plus ``indent``, default two spaces); a text of several lines keeps its breaks. A word is never broken: a path longer
    than the width stands alone on its line (it can still be copied whole)."""
    import textwrap

    if "\n" in line:  # several lines (a layout line per part): each wrapped on its own
        return "\n".join(wrap_line(part, width, indent) for part in line.split("\n"))
    if len(line) <= width:
        return line
    lead = line[: len(line) - len(line.lstrip())]
    return textwrap.fill(
        line.strip(),
        width=width,
        initial_indent=lead,
        subsequent_indent=lead + ("  " if indent is None else indent),
        break_long_words=False,
        break_on_hyphens=False,
    )
