"""A manifest that is not UTF-8 text (a binary file passed by mistake) is one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import peers
from test_layouts import cli


@pytest.mark.parametrize("name", ["manifest.jsonl", "manifest.csv"])
def test_a_binary_manifest_is_one_line_exit_2(tmp_path: Path, name: str) -> None:
    peers(tmp_path / "cache", 2)
    manifest = tmp_path / name
    manifest.write_bytes(b'{"source": "a.png", "cache": "a.pt"}\n' + bytes(range(128, 256)) + b"\n")
    code, out, err = cli("scan", "cache", "--manifest", str(manifest), cwd=tmp_path)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"{manifest}: not UTF-8 text; a manifest is JSON lines or CSV in UTF-8" in err
