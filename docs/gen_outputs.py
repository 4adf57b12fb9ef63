#!/usr/bin/env python3
"""Keep the sample outputs in README.md, CONTRIBUTING.md and docs/*.md true to the program.

Every sample output sits under a marker naming the command that prints it::

    <!-- output: cachedoctor scan fixtures/caches/kohya -->
    ```
    $ cachedoctor scan fixtures/caches/kohya
    cachedoctor scan (quick): 9 files read in 1 folder, ...
    ```

The command runs with bash in a fresh copy of ``fixtures/`` (``fixtures/touch.py`` applied, so
the dataset comparisons see the recorded file times), with ``cachedoctor`` on ``PATH`` meaning
``python -m cachedoctor`` of this interpreter, a 100-column terminal, no colour and no
``CACHEDOCTOR_*`` variables; stdout and stderr together make the block, less the progress lines
a log gets (``--progress auto`` writes them to a pipe; on the terminal the samples stand for, the
bar is erased and leaves nothing). The copy's folder is shown as ``/home/you/cachedoctor``.

    python docs/gen_outputs.py           # run every command and rewrite the blocks
    python docs/gen_outputs.py --check   # exit 1 when a block differs (what tests/e2e/test_docs.py does)

Comparisons ignore only what varies from run to run: timings, timestamps, repair run ids,
cachedoctor's version and trailing blanks.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHOWN_ROOT = "/home/you/cachedoctor"
WIDTH = "100"
TIMEOUT_S = 300

#: A progress line (``cachedoctor/cli/progress_lines.py``), as a log gets it.
PROGRESS_LINE = re.compile(
    r"^cachedoctor: (?:scan|repair|recover): (?:list|scan|plan|lossless|recompute|rescan) \d+.*\n", re.M
)
MARKER = re.compile(r"^<!-- output: (?P<cmd>.+?) -->\n```[a-z]*\n(?P<body>.*?)^```$", re.M | re.S)


@dataclass(frozen=True)
class Sample:
    path: Path
    line: int
    command: str
    body: str  # the block's text, ending with a newline
    span: tuple[int, int]  # of the body in the file's text

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def documents() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]


def samples(path: Path) -> list[Sample]:
    text = path.read_text(encoding="utf-8")
    return [
        Sample(path, text.count("\n", 0, m.start()) + 1, m["cmd"], m["body"], m.span("body"))
        for m in MARKER.finditer(text)
    ]


def all_samples() -> list[Sample]:
    return [s for doc in documents() if doc.exists() for s in samples(doc)]


_VOLATILE = [
    (re.compile(r"\b\d+\.\d+s\b"), "<T>s"),  # 0.04s
    (re.compile(r'"elapsed_s": [0-9.e-]+'), '"elapsed_s": <T>'),
    (re.compile(r'\b(time|timestamp)="[^"]*"'), r'\1="<T>"'),  # junit
    (re.compile(r"\b\d{8}-\d{6}-[0-9a-f]{6}\b"), "<RUN>"),  # repair run ids
    (re.compile(r"\(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\)"), "(<WHEN>)"),  # a quarantine run's time (list)
    (re.compile(r'("version": |cachedoctor\.version" value=)"[^"]*"'), r'\1"<V>"'),
    (re.compile(r"cachedoctor \d+\.\d+\.\d+\S*"), "cachedoctor <V>"),  # --version
]


def normalise(text: str) -> str:
    """What may differ between two runs of one command, made equal; trailing blanks dropped."""
    for pattern, repl in _VOLATILE:
        text = pattern.sub(repl, text)
    return "\n".join(line.rstrip() for line in text.splitlines()).strip("\n") + "\n"


def _sandbox(command: str) -> Path:
    """A copy of ``fixtures/`` to run ``command`` in; the trainers' goldens (half its files) only
    when the command names them."""
    box = Path(tempfile.mkdtemp(prefix="cachedoctor-docs-"))
    skip = [".cachedoctor", "__pycache__"] + ([] if "fixtures/trainers" in command else ["trainers"])
    shutil.copytree(ROOT / "fixtures", box / "fixtures", ignore=shutil.ignore_patterns(*skip))
    subprocess.run(
        [sys.executable, str(box / "fixtures" / "touch.py"), str(box / "fixtures" / "datasets")],
        check=True,
        capture_output=True,
    )
    bindir = box / ".bin"
    bindir.mkdir()
    shim = bindir / "cachedoctor"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m cachedoctor "$@"\n')
    shim.chmod(0o755)
    return box


@lru_cache(maxsize=None)
def run(command: str) -> str:
    """The block for ``command``: ``$ command`` and what it prints, paths shown under SHOWN_ROOT.
    Each command runs once per process in its own fresh copy: several documents show the same one."""
    box = _sandbox(command)
    try:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("CACHEDOCTOR_") and k not in ("GITHUB_STEP_SUMMARY", "FORCE_COLOR")
        }
        env.update(
            PATH=f"{box / '.bin'}{os.pathsep}{env.get('PATH', '')}",
            COLUMNS=WIDTH,
            LINES="50",
            NO_COLOR="1",
            TERM="dumb",
            PYTHONIOENCODING="utf-8",
            PYTHONPATH=str(ROOT),
            HOME=str(box),
        )
        proc = subprocess.run(
            ["bash", "-c", command],
            cwd=box,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=TIMEOUT_S,
        )
        out = PROGRESS_LINE.sub("", proc.stdout.decode("utf-8", "replace"))
        for root in {str(box.resolve()), str(box)}:
            out = out.replace(root, SHOWN_ROOT)
        return "\n".join(line.rstrip() for line in f"$ {command}\n{out}".splitlines()).strip("\n") + "\n"
    finally:
        shutil.rmtree(box, ignore_errors=True)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = 0
    for doc in documents():
        if not doc.exists():
            continue
        text = doc.read_text(encoding="utf-8")
        pieces, at = [], 0
        for sample in samples(doc):
            fresh = run(sample.command)
            if normalise(fresh) != normalise(sample.body):
                stale += 1
                print(f"{sample.id}: the output of `{sample.command}` changed", file=sys.stderr)
            start, end = sample.span
            pieces += [text[at:start], fresh if normalise(fresh) != normalise(sample.body) else sample.body]
            at = end
        new = "".join(pieces) + text[at:]
        if not check and new != text:
            doc.write_text(new, encoding="utf-8")
            print(f"updated {doc.relative_to(ROOT)}")
    if check and stale:
        print("run `python docs/gen_outputs.py` to refresh the blocks", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
