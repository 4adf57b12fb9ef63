"""The documentation cannot drift from the program.

* ``docs/kinds.md``'s table is what ``docs/gen_kinds.py`` renders from the check classes.
* Every sample output in README.md, CONTRIBUTING.md and docs/*.md (a fenced block under an
  ``output:`` marker naming its command) is what that command prints today, run by
  ``docs/gen_outputs.py`` in a copy of ``fixtures/``; only timings, timestamps, repair run ids
  and the version are ignored.
* Every relative link in those files points to a file that exists, and to a heading that exists
  when it names an anchor in a markdown file.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_docs_{name}", ROOT / "docs" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


gen_kinds = _load("gen_kinds")
gen_outputs = _load("gen_outputs")
SAMPLES = gen_outputs.all_samples()
DOCUMENTS = [p for p in gen_outputs.documents() if p.exists()]


def test_kinds_table_matches_the_checks() -> None:
    current = gen_kinds.KINDS_MD.read_text(encoding="utf-8")
    assert gen_kinds.rendered_document(current) == current, (
        "docs/kinds.md differs from the check classes' texts: run `python docs/gen_kinds.py`"
    )


def test_kinds_table_lists_every_check() -> None:
    from cachedoctor.checks import CHECKS

    text = gen_kinds.KINDS_MD.read_text(encoding="utf-8")
    assert all(f"| `{c.kind}` |" in text for c in CHECKS)


def test_there_are_samples() -> None:
    assert len(SAMPLES) >= 10
    assert any(s.path.name == "README.md" for s in SAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("sample", SAMPLES, ids=[s.id for s in SAMPLES])
def test_sample_output_is_what_the_command_prints(sample) -> None:
    fresh = gen_outputs.run(sample.command)
    assert gen_outputs.normalise(sample.body) == gen_outputs.normalise(fresh), (
        f"{sample.id}: the sample output of `{sample.command}` differs from what it prints now: "
        "run `python docs/gen_outputs.py` (and read the diff before committing it)"
    )


def test_normalise_ignores_only_what_varies() -> None:
    a = 'cachedoctor scan (quick): 9 files, 0.04s\n"elapsed_s": 0.019\nrun 20261123-122742-d2da0c  \n'
    b = 'cachedoctor scan (quick): 9 files, 1.50s\n"elapsed_s": 2.5\nrun 20270101-000000-ffffff\n'
    assert gen_outputs.normalise(a) == gen_outputs.normalise(b)
    assert gen_outputs.normalise("9 files") != gen_outputs.normalise("8 files")


_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|<img [^>]*src=\"([^\"]+)\"")
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _links(path: Path) -> list[str]:
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)
    return [a or b for a, b in _LINK.findall(text)]


@pytest.mark.parametrize("doc", DOCUMENTS, ids=[str(p.relative_to(ROOT)) for p in DOCUMENTS])
def test_relative_links_resolve(doc: Path) -> None:
    broken = []
    for link in _links(doc):
        if re.match(r"^[a-z][a-z0-9+.-]*:", link):  # http:, https:, mailto:
            continue
        target, _, anchor = link.partition("#")
        path = (doc.parent / target).resolve() if target else doc
        if not path.exists():
            broken.append(f"{link} (no such file)")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{link} (no heading #{anchor} in {path.relative_to(ROOT)})")
    assert not broken, f"{doc.relative_to(ROOT)}: broken relative links: {', '.join(broken)}"


def test_the_readme_is_a_front_page_of_at_most_350_lines() -> None:
    """The reference lives in docs/ (linked from the README's table), the front page stays short;
    its first commands stay the ones a new contributor types."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 350, "README.md is over 350 lines: move the detail into docs/"
    linked = {link.partition("#")[0] for link in _links(ROOT / "README.md")}
    assert {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")} <= linked
    develop = readme.split("\n## Develop\n", 1)[1]
    commands = re.findall(r"^make (\w+)", develop.split("```sh\n", 1)[1], re.M)
    assert commands[:2] == ["demo", "test"]
