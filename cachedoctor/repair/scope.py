"""What narrowed a repair run (``--only``, ``--keep-blocked``), as its journal keeps it: a
resume by ``recover --apply`` does no more than the run it finishes was asked to do."""

from __future__ import annotations

import json


def run_scope(only: frozenset[str] | None, keep_blocked: bool) -> str:
    """The run record's ``scope`` column (JSON)."""
    return json.dumps({"only": sorted(only) if only is not None else None, "keep_blocked": keep_blocked})


def _fields(text: str | None) -> dict:
    try:
        raw = json.loads(text) if text else {}
    except ValueError:
        return {}
    return raw if isinstance(raw, dict) else {}


def scope_only(text: str | None) -> frozenset[str] | None:
    """The recorded ``--only`` kinds (``None``: every kind)."""
    kinds = _fields(text).get("only")
    return frozenset(str(k) for k in kinds) if isinstance(kinds, list) else None


def scope_keeps_blocked(text: str | None) -> bool:
    return bool(_fields(text).get("keep_blocked"))


__all__ = ["run_scope", "scope_keeps_blocked", "scope_only"]
