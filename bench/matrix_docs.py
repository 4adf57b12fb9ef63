#!/usr/bin/env python3
"""Write the matrix figures into docs/performance.md from ``matrix_bench.py --json``'s file, so the
documented figures are the bench's, never typed by hand.

    python bench/matrix_bench.py --json bench/out/matrix.json
    python bench/matrix_docs.py bench/out/matrix.json [--doc docs/performance.md]

Replaces what lies between the two marker lines (BEGIN, END) in the document.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matrix_bench
from runner import REPO

from fixtures.builders.matrix import ROWS

BEGIN = "<!-- matrix figures: written by bench/matrix_docs.py from bench/matrix_bench.py --json; do not edit -->"
END = "<!-- end of matrix figures -->"
COLUMNS = [  # (method key, column)
    ("quick_1", "quick -j1"),
    ("quick_w", "quick -jW"),
    ("deep_1", "deep -j1"),
    ("deep_w", "deep -jW"),
    ("rescan", "rescan"),
    ("read", "read loop"),
    ("cd", "CD loop"),
    ("loader", "loader loop"),
]


def seconds(f: dict | None) -> str:
    if f is None:
        return ""
    est = f.get("whole_set_seconds")
    return f"{f['seconds_best']:.2f}" if est is None else f"{est:.2f}&nbsp;({f['items']:,})"


def render(doc: dict) -> str:
    figures, goals = doc["figures"], {g["goal"]: g for g in doc["goals"]}
    keys = list(dict.fromkeys(f["group"] for f in figures.values()))
    m = doc["machine"]
    w = next((f["label"].rsplit("-j", 1)[1] for k, f in figures.items() if k.endswith(".quick_w")), "W")
    lines = [
        f"{m.get('date', '')}, {m['cpu_count']} CPUs, Python {m['python']}, torch {m.get('torch')}, "
        f"numpy {m.get('numpy')}, safetensors {m.get('safetensors')}, cachedoctor {m.get('commit')}; "
        f"`python bench/matrix_bench.py {' '.join(doc['argv'])}`. Warm page cache; every column a fresh "
        f"process timed end to end, best of the row's rounds (fewer than {doc['repeat']} where a row's "
        f"rounds would pass --budget), W = {w}. Seconds for the whole row; "
        "the loader loop (torch.load, np.load + every key, safe_open + get_tensor) was timed on the "
        "number of files in parentheses and its loop time scaled to the row.",
        "",
        "| set | files | MB | rounds | " + " | ".join(c for _, c in COLUMNS) + " |",
        "| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in COLUMNS) + " |",
    ]
    for k in keys:
        quick = figures[f"{k}.quick_1"]
        cells = [seconds(figures.get(f"{k}.{key}")) for key, _ in COLUMNS]
        lines.append(
            f"| {ROWS[k].title}, `{k}` | {quick['items']:,} | {quick['bytes'] / 1e6:,.0f} | "
            + f"{len(quick['seconds_all'])} | "
            + " | ".join(cells)
            + " |"
        )
    lines += ["", "| set | " + " | ".join(column for *_, column in matrix_bench.GOALS) + " |"]
    lines.append("| --- | " + " | ".join("---" for _ in matrix_bench.GOALS) + " |")
    for k in keys:
        cells = []
        for key, *_ in matrix_bench.GOALS:
            g = goals.get(matrix_bench.goal_label(k, key, ROWS[k]))
            cells.append("" if g is None or g["value"] is None else f"{g['value']:.2f}x {g['result']}")
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    for note in doc.get("notes", []):
        if "WARNING" in note or "other processes" in note:
            lines += ["", f"Note: {note}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("json", type=Path, help="the file of matrix_bench.py --json")
    p.add_argument("--doc", type=Path, default=REPO / "docs" / "performance.md")
    args = p.parse_args(argv)
    doc = json.loads(args.json.read_text())
    if not doc.get("schema", "").startswith("cachedoctor.bench.matrix/"):
        p.error(f"{args.json} is not matrix_bench.py's JSON")
    text = args.doc.read_text()
    if BEGIN not in text or END not in text:
        p.error(f"{args.doc} has no matrix figures block (the lines {BEGIN!r} and {END!r})")
    head, rest = text.split(BEGIN, 1)
    text = head + BEGIN + "\n" + render(doc) + END + rest.split(END, 1)[1]
    args.doc.write_text(text)
    print(f"matrix figures written to {args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
