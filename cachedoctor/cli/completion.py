"""Shell completion for the arguments that take finding kinds (``explain KIND``, ``repair --only``).

Typer completes commands, options and enum choices by itself; a kind is a plain string (``explain``
also accepts ``batch_leak``), so its candidates come from here. They are read through
:mod:`cachedoctor.explain`, which imports no check or reader: a completion runs on every <TAB>
and must stay instant.
"""

from __future__ import annotations

_HELP_WIDTH = 60  # zsh and fish show the help beside each candidate: its first clause, cut short


def _short(summary: str) -> str:
    first = summary.split(";")[0].split(", ")[0].strip()
    return first if len(first) <= _HELP_WIDTH else first[: _HELP_WIDTH - 1].rstrip() + "…"


def complete_kind(incomplete: str) -> list[tuple[str, str]]:
    """The kinds that start with ``incomplete``, each with its summary (Typer keeps only prefix matches)."""
    from cachedoctor.explain import kinds

    return [(name, _short(info.summary)) for name, info in sorted(kinds().items()) if name.startswith(incomplete)]


def complete_kind_list(incomplete: str) -> list[tuple[str, str]]:
    """For a comma-separated list of kinds: complete the last name, keep the ones before it."""
    done, _, last = incomplete.rpartition(",")
    prefix = done + "," if done else ""
    given = {k.strip() for k in done.split(",")} if done else set()
    return [(prefix + name, text) for name, text in complete_kind(last) if name not in given]


__all__ = ["complete_kind", "complete_kind_list"]
