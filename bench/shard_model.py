#!/usr/bin/env python3
"""The cost model of a sharded scan, from what ``shard_bench.py`` measured (docs/performance.md).

A scan split over R = N nodes x M processes splits the reads and repeats the listing:

    local:  T = t_launch + E * c_walk + ceil(E / R) * c_file          (c_file: quick or deep)
    S3:     T = t_launch + ceil(E / 1000) * c_list + ceil(E / R) * c_get

``c_walk``: the walk's listing per entry, which every rank repeats whole (it lists every folder,
then keeps the ones it owns); ``c_file``: the rest of a scan per file and process (stat, read,
judge), from the one-process baseline; ``c_list``: one LIST request of 1,000 keys, one after
another (a listing is a chain of continuation tokens), which every rank repeats; ``c_get``: one
object's request on one process's thread pool; ``t_launch``: a ``torchrun`` job's fixed time
(launcher, imports, rendezvous, exchange, exit), its wall time less rank 0's scan.

``python bench/shard_model.py FIGURES.json`` prints the constants and the table of
docs/performance.md (``--entries``, ``--procs``, ``--nodes``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys

LIST_PAGE = 1000  # keys per LIST request (S3's most; S3Store.page_size)
S3_GETS_PER_PREFIX = 5500  # S3's documented GET/HEAD rate per partitioned prefix, per second


def _ranks(key: str) -> int:
    return int(key.rsplit("_r", 1)[1])


def _widest(figures: dict[str, dict], group: str) -> tuple[int, dict] | None:
    """The torchrun row with the most ranks in ``group``."""
    rows = [(_ranks(k), f) for k, f in figures.items() if k.startswith(f"{group}_r") and f.get("scan_s") is not None]
    return max(rows, key=lambda row: row[0]) if rows else None


def constants(figures: dict[str, dict]) -> dict[str, float]:
    """The model's constants, in seconds, from the fastest timing of each row (its extras)."""
    c: dict[str, float] = {}
    files = next((f["items"] for k, f in figures.items() if k.startswith(("quick_", "deep_"))), 0)
    walk = figures.get("quick_walk")
    if walk:
        c["c_walk"] = walk["seconds_best"] / files
    walked = c.get("c_walk", 0.0) * files
    for group in ("quick", "deep"):
        base = figures.get(f"{group}_1")
        if base and base.get("scan_s") is not None:
            c[f"c_{group}"] = max(0.0, base["scan_s"] - walked) / files
            c[f"t_start_{group}"] = base["seconds_best"] - base["scan_s"]
        widest = _widest(figures, group)
        if widest:
            ranks, f = widest
            c[f"t_launch_{group}"] = f["seconds_best"] - f["scan_s"]
            c[f"ranks_{group}"] = ranks
            shards = [s for s in f.get("shards", []) if s["files_read"]]
            if shards:  # the slowest rank's own rate, its ranks sharing this machine
                c[f"c_{group}_shared"] = max((s["seconds"] - walked) / s["files_read"] for s in shards)
    listing = figures.get("s3_list")
    if listing and listing.get("requests", {}).get("LIST"):
        c["c_list"] = listing["seconds_best"] / listing["requests"]["LIST"]
        if listing.get("server_cpu_s") is not None:
            c["server_cpu_per_list"] = listing["server_cpu_s"] / listing["requests"]["LIST"]
    base = figures.get("s3_1")
    if base and base.get("scan_s") is not None and base.get("requests", {}).get("GET"):
        asked = base["requests"]
        lists = asked.get("LIST", 0) * c.get("c_list", 0.0)
        c["c_get"] = max(0.0, base["scan_s"] - lists) / asked["GET"]
        c["requests_per_object"] = sum(asked.values()) / base["items"]
        c["delay_ms"] = base.get("delay_ms", 0.0)
        c["t_start_s3"] = base["seconds_best"] - base["scan_s"]
        if base.get("server_cpu_s") is not None:
            c["server_cpu_per_request"] = base["server_cpu_s"] / sum(asked.values())
        if base.get("client_cpu_s") is not None:
            c["client_cpu_per_request"] = base["client_cpu_s"] / sum(asked.values())
    widest = _widest(figures, "s3")
    if widest:
        c["t_launch_s3"] = widest[1]["seconds_best"] - widest[1]["scan_s"]
        c["ranks_s3"] = widest[0]
    return c


def notes(c: dict[str, float]) -> list[str]:
    """The constants as the runner's notes (printed under the table, kept in the JSON)."""
    us, ms = 1e6, 1e3
    out = []
    if "c_walk" in c:
        out.append(f"model: c_walk {c['c_walk'] * us:.2f} us per entry (the walk's listing; every rank repeats it)")
    for group in ("quick", "deep"):
        if f"c_{group}" in c:
            line = f"model: c_{group} {c[f'c_{group}'] * us:.1f} us per file per process (one process, walk excluded)"
            if f"c_{group}_shared" in c:
                line += f"; {c[f'c_{group}_shared'] * us:.1f} us on the slowest of {c[f'ranks_{group}']:.0f} ranks sharing this machine"
            out.append(line)
        if f"t_launch_{group}" in c:
            out.append(
                f"model: t_launch {c[f't_launch_{group}']:.2f} s (torchrun, {c[f'ranks_{group}']:.0f} ranks, {group}: "
                f"wall less rank 0's scan); one process {c.get(f't_start_{group}', 0.0):.2f} s"
            )
    if "c_list" in c:
        out.append(
            f"model: c_list {c['c_list'] * ms:.1f} ms per LIST of up to {LIST_PAGE} keys ({c.get('delay_ms', 0):g} ms delay a request; "
            f"server CPU {c.get('server_cpu_per_list', 0) * ms:.0f} ms a LIST)"
        )
    if "c_get" in c:
        out.append(
            f"model: c_get {c['c_get'] * ms:.2f} ms per object per process on the scan's threads "
            f"({c['requests_per_object']:.3f} requests an object; server CPU "
            f"{c.get('server_cpu_per_request', 0) * ms:.2f} ms, client tree CPU {c.get('client_cpu_per_request', 0) * ms:.2f} "
            "ms a request, start-up included)"
        )
    if "t_launch_s3" in c:
        out.append(f"model: t_launch {c['t_launch_s3']:.2f} s (torchrun, {c['ranks_s3']:.0f} ranks, s3)")
    return out


def local_seconds(c: dict[str, float], group: str, entries: int, ranks: int) -> float:
    return c.get(f"t_launch_{group}", 0.0) + entries * c["c_walk"] + math.ceil(entries / ranks) * c[f"c_{group}"]


def s3_seconds(c: dict[str, float], entries: int, ranks: int, listing: bool = True) -> float:
    lists = math.ceil(entries / LIST_PAGE) * c["c_list"] if listing else 0.0
    return c.get("t_launch_s3", 0.0) + lists + math.ceil(entries / ranks) * c["c_get"]


def shown(seconds: float) -> str:
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def table(c: dict[str, float], entries: int, procs: int, nodes: list[int]) -> list[str]:
    """The markdown table of the model for ``entries`` over ``nodes`` x ``procs``."""
    lines = [
        "| nodes x processes | ranks | local quick | local deep | S3 quick, LIST | S3 quick, inventory | GETs/s, all ranks |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n in nodes:
        r = n * procs
        rate = r / c["c_get"] if c.get("c_get") else 0.0
        flag = " (over 5,500/prefix)" if rate > S3_GETS_PER_PREFIX else ""
        lines.append(
            f"| {n} x {procs} | {r:,} | {shown(local_seconds(c, 'quick', entries, r))} | "
            f"{shown(local_seconds(c, 'deep', entries, r))} | {shown(s3_seconds(c, entries, r))} | "
            f"{shown(s3_seconds(c, entries, r, listing=False))} | {rate:,.0f}{flag} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("figures", help="the JSON of `shard_bench.py --json FILE`")
    p.add_argument("--entries", type=float, default=1e8, help="entries in the cache (default 1e8)")
    p.add_argument("--procs", type=int, default=8, help="processes per node (default 8)")
    p.add_argument("--nodes", default="1,2,8,32", help="node counts (default 1,2,8,32)")
    args = p.parse_args(argv)
    with open(args.figures) as f:
        doc = json.load(f)
    c = constants(doc["figures"])
    for line in notes(c):
        print(line)
    print()
    for line in table(c, int(args.entries), args.procs, [int(x) for x in args.nodes.split(",")]):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
