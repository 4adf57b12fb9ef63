#!/usr/bin/env python3
"""Write every benchmark's goals into docs/performance.md from the benchmarks' ``--json`` files,
so the documented verdicts are the run's, never typed by hand: one row per goal (value, target,
PASS/FAIL), with the run's date, commit and the share of the machine other processes used
during its timing beside it.

    python bench/rescan_bench.py --json bench/out/final/rescan.json   # ... one file per bench
    python bench/goals_docs.py bench/out/final/*.json [--doc docs/performance.md]

Replaces what lies between the two marker lines (BEGIN, END) in the document.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from runner import REPO

BEGIN = "<!-- goal figures: written by bench/goals_docs.py from the benchmarks' --json; do not edit -->"
END = "<!-- end of goal figures -->"


def value_and_target(goal: dict) -> tuple[str, str]:
    """As the bench's own table printed them (``text``), or rebuilt for an older JSON."""
    if "text" in goal:
        value, _, target = goal["text"].partition(" vs ")
        return value, target
    value = "n/a" if goal.get("value") is None else f"{goal['value']:.2f}"
    return value, f"{goal.get('target')}"


def busy_text(doc: dict) -> str:
    busy = doc.get("machine_busy")
    return "?" if busy is None else f"{busy:.0%}"


def table(docs: list[tuple[str, dict]]) -> list[str]:
    out = [
        "| bench | run (UTC), commit | machine used by others | goal | value | target | result |",
        "| --- | --- | ---: | --- | ---: | ---: | --- |",
    ]
    for name, doc in docs:
        machine = doc.get("machine", {})
        run = f"{machine.get('date', '?')}, {machine.get('commit', '?')}"
        if "--quick" in doc.get("argv", []):
            run += " (`--quick`: small sizes, not a measurement)"
        for goal in doc.get("goals", []):
            if goal.get("target") is None:
                continue  # (info) rows: the bench's own table has them
            value, target = value_and_target(goal)
            out.append(
                f"| `{name}` | {run} | {busy_text(doc)} | {goal['goal']} | {value} | {target} | {goal['result']} |"
            )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument("--doc", type=Path, default=REPO / "docs" / "performance.md")
    args = p.parse_args(argv)
    docs = []
    for path in args.files:
        doc = json.loads(path.read_text())
        docs.append((str(doc.get("schema", path.stem)).split(".")[2].split("/")[0], doc))
    text = args.doc.read_text()
    if BEGIN not in text or END not in text:
        print(f"{args.doc}: no {BEGIN!r} ... {END!r} markers to write between", file=sys.stderr)
        return 2
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    args.doc.write_text(head + BEGIN + "\n" + "\n".join(table(docs)) + "\n" + END + tail)
    print(f"{args.doc}: {sum(len(d.get('goals', [])) for _, d in docs)} goals from {len(docs)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
