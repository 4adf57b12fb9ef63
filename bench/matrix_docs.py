#!/usr/bin/env python3
"""Write the matrix figures into docs/performance.md from ``matrix_bench.py --json``'s files, so the
documented figures are the bench's, never typed by hand.

    python bench/matrix_bench.py --json bench/out/matrix.json
    python bench/matrix_docs.py bench/out/matrix.json [more.json ...] [--doc docs/performance.md]

A row in a later file replaces the same row of an earlier one (re-run a disturbed row with
``--rows``). Replaces what lies between the two marker lines (BEGIN, END) in the document.
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


def merge(docs: list[dict]) -> dict:
    """One document of several runs: later runs' rows replace earlier ones'."""
    out = {**docs[0], "figures": {}, "goals": [], "notes": [], "runs": []}
    rows: dict[str, dict] = {}
    for doc in docs:
        keys = {f["group"] for f in doc["figures"].values()}
        for k in keys:
            rows[k] = {
                "figures": {n: f for n, f in doc["figures"].items() if f["group"] == k},
                "goals": [g for g in doc["goals"] if g["goal"].startswith(f"{k}: ")],
            }
        out["runs"].append(doc)
    for k in [k for k in ROWS if k in rows]:
        out["figures"].update(rows[k]["figures"])
        out["goals"] += rows[k]["goals"]
    return out


def run_line(doc: dict) -> str:
    m = doc["machine"]
    rows = sorted({f["group"] for f in doc["figures"].values()}, key=list(ROWS).index)
    others = next((n for n in doc.get("notes", []) if n.startswith("other processes")), "")
    return (
        f"{m.get('date', '')}, cachedoctor {m.get('commit')}, rows {', '.join(rows)}: "
        f"`python bench/matrix_bench.py {' '.join(doc['argv'])}`" + (f" ({others})" if others else "")
    )


def render(doc: dict) -> str:
    figures, goals = doc["figures"], {g["goal"]: g for g in doc["goals"]}
    keys = list(dict.fromkeys(f["group"] for f in figures.values()))
    m = doc["machine"]
    w = next((f["label"].rsplit("-j", 1)[1] for k, f in figures.items() if k.endswith(".quick_w")), "W")
    lines = [
        f"{m['cpu_count']} CPUs, Python {m['python']}, torch {m.get('torch')}, numpy {m.get('numpy')}, "
        f"safetensors {m.get('safetensors')}. Warm page cache; every column a fresh process timed end to "
        f"end, best of the row's rounds (fewer than {doc['repeat']} where a row's rounds would pass "
        f"--budget), W = {w}. Seconds for the whole row; the loader loop (torch.load, np.load + every key, "
        "safe_open + get_tensor) was timed on the number of files in parentheses and its loop time "
        "scaled to the row. Runs:",
        "",
        *[f"- {run_line(run)}" for run in doc["runs"]],
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
    warnings = [n for run in doc["runs"] for n in run.get("notes", []) if "WARNING" in n and "other" not in n]
    lines += [""] + [f"Note: {n}." for n in warnings] if warnings else []
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("json", type=Path, nargs="+", help="files of matrix_bench.py --json (later rows win)")
    p.add_argument("--doc", type=Path, default=REPO / "docs" / "performance.md")
    args = p.parse_args(argv)
    docs = [json.loads(path.read_text()) for path in args.json]
    for path, doc in zip(args.json, docs, strict=True):
        if not doc.get("schema", "").startswith("cachedoctor.bench.matrix/"):
            p.error(f"{path} is not matrix_bench.py's JSON")
    text = args.doc.read_text()
    if BEGIN not in text or END not in text:
        p.error(f"{args.doc} has no matrix figures block (the lines {BEGIN!r} and {END!r})")
    head, rest = text.split(BEGIN, 1)
    text = head + BEGIN + "\n" + render(merge(docs)) + END + rest.split(END, 1)[1]
    args.doc.write_text(text)
    print(f"matrix figures written to {args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
