"""No import circle inside a package folder (issue 29): two modules that import each other, at the
top, in a function or under ``TYPE_CHECKING``, cannot be read, tested or moved one without the
other. The graph is read from the source by ``tests/import_graph.py``; nothing is imported."""

from __future__ import annotations

from pathlib import Path

import pytest
from import_graph import Graph, build, circles

import cachedoctor

GRAPH = build(Path(cachedoctor.__file__).resolve().parent)

#: Every package folder is held to no circle at all.
PACKAGES = tuple(sorted(GRAPH.all_folders()))


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circle_inside(package: str) -> None:
    assert circles(GRAPH, package) == []


def test_every_package_is_held() -> None:
    for package in (
        "cachedoctor",
        "cachedoctor.formats",
        "cachedoctor.layouts",
        "cachedoctor.repair",
        "cachedoctor.scan",
        "cachedoctor.stores",
    ):
        assert package in PACKAGES


def test_replace_and_shards_do_not_import_each_other() -> None:
    replace, shards = "cachedoctor.repair.replace", "cachedoctor.repair.shards"
    assert [c for c in circles(GRAPH, "cachedoctor.repair") if replace in c and shards in c] == []


def _tree(tmp_path: Path, files: dict[str, str]) -> Graph:
    """A package ``pkg`` of ``files`` (path below it -> source), as a graph."""
    for name, source in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return build(tmp_path / "pkg")


def test_a_type_checking_import_back_is_a_circle(tmp_path: Path) -> None:
    graph = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from pkg.b import thing\n",
            "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import Other\nthing = 1\n",
        },
    )
    assert circles(graph, "pkg") == [["pkg.a", "pkg.b"]]


def test_a_function_level_import_back_is_a_circle(tmp_path: Path) -> None:
    graph = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from pkg import b\n",
            "b.py": "def f():\n    from .a import name\n    return name\n",
            "c.py": "import pkg.a\n",  # imports into the circle, none back: not in it
        },
    )
    assert circles(graph, "pkg") == [["pkg.a", "pkg.b"]]


def test_a_circle_through_another_folder_is_not_this_folders(tmp_path: Path) -> None:
    graph = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from pkg.sub.x import y\n",
            "sub/__init__.py": "",
            "sub/x.py": "from pkg.a import z\n",
        },
    )
    assert graph.all_folders() == ["pkg", "pkg.sub"]
    assert circles(graph, "pkg") == [] and circles(graph, "pkg.sub") == []
    assert graph.edges["pkg.a"] == {"pkg.sub.x"} and graph.edges["pkg.sub.x"] == {"pkg.a"}
