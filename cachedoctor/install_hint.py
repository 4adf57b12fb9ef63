"""The command that adds an extra to *this* installation of cachedoctor, as a user would type it.

cachedoctor is installed from a clone, a git URL or a built wheel until it is on a package index,
so ``pip install "cachedoctor[repair]"`` (what a missing torch used to suggest) fails for most
users with "no matching distribution". pip records where a distribution came from in its
``direct_url.json`` (PEP 610): a local folder (editable or not), a VCS URL with the revision asked
for, or an archive. The hint installs the extra from the same place: ``pip install -e
"/src/cachedoctor[repair]"``, ``pip install "cachedoctor[repair] @ git+https://host/cachedoctor.git@v0.2.0"``.
Installed from an index (no ``direct_url.json``), or from a place that is gone, it is the plain
``pip install "cachedoctor[repair]"``.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlparse


def install_command(extra: str, tool: str = "pip") -> str:
    """``tool install ...`` that adds ``extra`` to this installation (``tool``: pip or pipx)."""
    return command_for(_direct_url(), extra, tool)


def command_for(direct_url: Mapping[str, Any] | None, extra: str, tool: str = "pip") -> str:
    """The command for an installation whose PEP 610 record is ``direct_url`` (``None``: from an index)."""
    plain = f'{tool} install "cachedoctor[{extra}]"'
    if not direct_url or not isinstance(direct_url.get("url"), str):
        return plain
    url = direct_url["url"]
    vcs = direct_url.get("vcs_info")
    if isinstance(vcs, Mapping):
        revision = vcs.get("requested_revision")
        ref = f"{vcs.get('vcs', 'git')}+{url}" + (f"@{revision}" if revision else "")
        return f'{tool} install "cachedoctor[{extra}] @ {ref}"'
    local = _local_path(url)
    if isinstance(direct_url.get("dir_info"), Mapping):
        if local is None or not os.path.isdir(local):
            return plain
        editable = bool(direct_url["dir_info"].get("editable")) and tool == "pip"
        return f'{tool} install {"-e " if editable else ""}"{local}[{extra}]"'
    if local is not None and not os.path.isfile(local):  # the wheel or sdist it came from is gone
        return plain
    return f'{tool} install "cachedoctor[{extra}] @ {url}"'


def _local_path(url: str) -> str | None:
    parsed = urlparse(url)
    return unquote(parsed.path) if parsed.scheme == "file" else None


@functools.lru_cache(maxsize=1)
def _direct_url() -> Mapping[str, Any] | None:
    """This installation's ``direct_url.json``, or ``None`` (from an index, or unreadable).

    Every ``cachedoctor`` distribution on the path is asked, not only the first: an editable
    install leaves a ``cachedoctor.egg-info`` (no PEP 610 record) in the source folder, which
    comes first on the path whenever the command runs there."""
    import importlib.metadata

    for dist in importlib.metadata.distributions(name="cachedoctor"):
        try:
            text = dist.read_text("direct_url.json")
            found = json.loads(text) if text else None
        except (OSError, ValueError):
            continue
        if isinstance(found, Mapping):
            return found
    return None


__all__ = ["command_for", "install_command"]
