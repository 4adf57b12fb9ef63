#!/usr/bin/env python3
"""The benchmark matrix (bench/README.md): caches as trainers write them, one row per kind of file,
every column a fresh process timed end to end: cachedoctor's quick and deep scans with one worker
and all workers, a rescan through the state database, and the loops a user would write."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys

import runner
from runner import Bench, Goal, Method, fail, opt

from fixtures.builders.matrix import LAYOUT_VERSION, ROWS, Row, build_row

LOOPS = str(runner.REPO / "bench" / "matrix_loops.py")
ROWS_JSON = "rows.json"  # beside the row folders: what each holds, so a kept row is reused
LOADER = {"pt": "torch", "npz": "npz", "safetensors": "safetensors"}
LOADER_SHORT = {"torch": "torch.load loop", "npz": "np.load loop", "safetensors": "safe_open loop"}
LOADER_TEXT = {
    "torch": "torch.load(weights_only=True) loop",
    "npz": "np.load + every key loop",
    "safetensors": "safe_open + get_tensor loop",
}


def chosen(args) -> list[Row]:
    keys = [k.strip() for k in args.rows.split(",") if k.strip()] if args.rows else list(ROWS)
    unknown = [k for k in keys if k not in ROWS]
    if unknown:
        fail(f"--rows: no row {', '.join(unknown)} (rows: {', '.join(ROWS)})")
    return [ROWS[k] for k in keys]


def count(args, row: Row) -> int:
    return args.files or (row.quick_files if args.quick else row.files)


def describe(args) -> dict:
    return {"version": LAYOUT_VERSION, "rows": {r.key: count(args, r) for r in chosen(args)}}


def build(args, root):
    """Build each chosen row that the folder does not hold already (rows.json says what it holds);
    other rows' folders are left alone, so one kept folder serves any choice of --rows."""
    path = root / ROWS_JSON
    held = json.loads(path.read_text()) if path.exists() else {}
    facts: dict = {}
    for row in chosen(args):
        n, folder = count(args, row), root / row.key
        have = held.get(row.key)
        if not (have and have.get("files") == n and have.get("version") == LAYOUT_VERSION and folder.is_dir()):
            shutil.rmtree(folder, ignore_errors=True)
            held.pop(row.key, None)
            path.write_text(json.dumps(held, indent=2) + "\n")
            print(f"building {row.key}: {n:,} files ...", flush=True)
            held[row.key] = {**build_row(row.key, folder, n), "version": LAYOUT_VERSION}
            path.write_text(json.dumps(held, indent=2) + "\n")
        h = held[row.key]
        facts[row.key] = f"{row.title}: {h['files']:,} files, {h['file_bytes']:,} bytes each, {h['bytes'] / 1e9:.2f} GB"
    return facts


def file_bytes(ctx, key: str) -> int:
    return json.loads((ctx.root / ROWS_JSON).read_text())[key]["file_bytes"]


def cli() -> list[str]:
    """The cachedoctor of the interpreter running the bench: its venv's script, else -m."""
    exe = shutil.which("cachedoctor", path=os.path.dirname(sys.executable))
    return [exe] if exe else [sys.executable, "-m", "cachedoctor"]


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CACHEDOCTOR_")}


def warm(folder) -> None:
    """Read every file under ``folder`` (the state database too). Untimed, before every timing:
    a VM's page cache may give back pages soon after they were read (this project's machine runs
    DAMON reclaim: pages untouched for about 30 s are paged out), so a row read once at the start
    would be cold again by its later timings."""
    buf = bytearray(1 << 22)
    for dirpath, _, names in os.walk(folder):
        for name in names:
            with open(os.path.join(dirpath, name), "rb", buffering=0) as f:
                while f.readinto(buf) == len(buf):
                    pass


def before_group(args, ctx, key):
    """Untimed: for the rescan column, a first scan (records every file), a second (settles racy
    files), and a check that a third reuses every file."""
    folder = ctx.root / key
    if key == "tiny":
        return
    warm(folder)
    shutil.rmtree(folder / ".cachedoctor", ignore_errors=True)
    for _ in range(2):
        subprocess.run([*cli(), "scan", str(folder), "-q"], capture_output=True, env=env(), cwd=ctx.root)
    proc = subprocess.run(
        [*cli(), "scan", str(folder), "--format", "json"], capture_output=True, text=True, env=env(), cwd=ctx.root
    )
    stats = json.loads(proc.stdout).get("summary", {}) if proc.stdout.startswith("{") else {}
    n = count(args, ROWS[key])
    if stats.get("files_reused") != n:
        fail(f"{key}: a rescan after two scans reused {stats.get('files_reused')} of {n} files: {proc.stderr[-300:]}")


def methods(args, ctx):
    out: list[Method] = []
    w = args.workers
    for row in chosen(args):
        k, n, folder = row.key, count(args, row), str(ctx.root / row.key)
        size = file_bytes(ctx, k)
        m = args.loader_files if 0 < args.loader_files < n else n

        def scan(key: str, label: str, *flags: str, k=k, n=n, folder=folder, size=size) -> Method:
            cmd = [*cli(), "scan", folder, *flags]
            return Method(f"{k}.{key}", f"{k}: {label}", command=cmd, items=n, nbytes=n * size, group=k, env=env())

        def loop(key: str, label: str, kind: str, limit: int = 0, k=k, n=n, folder=folder, size=size) -> Method:
            cmd = [sys.executable, LOOPS, kind, folder, *([str(limit)] if limit else [])]
            items = limit or n
            return Method(f"{k}.{key}", f"{k}: {label}", command=cmd, items=items, nbytes=items * size, group=k)

        out.append(scan("quick_1", "scan --no-state -q -j1", "--no-state", "-q", "-j", "1"))
        if k != "tiny":  # the tiny row: quick -j1 against the loops only (its -jW scan is 30 s a round)
            out.append(scan("quick_w", f"scan --no-state -q -j{w}", "--no-state", "-q", "-j", str(w)))
            out.append(scan("deep_1", "scan --deep --no-state -q -j1", "--deep", "--no-state", "-q", "-j", "1"))
            out.append(scan("deep_w", f"scan --deep --no-state -q -j{w}", "--deep", "--no-state", "-q", "-j", str(w)))
            out.append(scan("rescan", "scan -q (rescan, state database)", "-q"))
            out.append(loop("read", "open(p,'rb').read() loop", "read"))
        if row.zip_based:
            out.append(loop("cd", "zipfile.ZipFile(p).infolist() loop", "cd"))
        kind = LOADER[row.container]
        label = LOADER_TEXT[kind] + (f" ({m:,} of {n:,})" if m < n else "")
        out.append(loop("loader", label, kind, m if m < n else 0))
    for method in out:
        method.cwd = str(ctx.root)
        method.prepare = functools.partial(warm, ctx.root / method.group)
    return out


# --------------------------------------------------------------------------- goals


def best(figures, key: str) -> float | None:
    f = figures.get(key)
    return None if f is None else f["seconds_best"]


def loader_seconds(figures, k: str) -> float | None:
    """The loader loop's whole-process seconds for the whole row: timed on a subset, its loop time
    scaled to every file (start-up, imports and the listing counted once, as measured)."""
    f = figures.get(f"{k}.loader")
    n = figures.get(f"{k}.quick_1", {}).get("items")
    if f is None or not n or not f.get("files") or "loop_s" not in f:
        return None
    return f["seconds_best"] + f["loop_s"] * (n / f["files"] - 1)


def data_part(k: str):
    def value(figures):
        d, q, r = best(figures, f"{k}.deep_1"), best(figures, f"{k}.quick_1"), best(figures, f"{k}.read")
        return None if None in (d, q, r) else (d - q) / r

    return value


def deep_all(k: str):
    def value(figures):
        d, q, r = best(figures, f"{k}.deep_w"), best(figures, f"{k}.quick_w"), best(figures, f"{k}.read")
        return None if None in (d, q, r) else d / (q + r)

    return value


def vs_loader(k: str):
    def value(figures):
        q, lo = best(figures, f"{k}.quick_1"), loader_seconds(figures, k)
        return None if q is None or lo is None else lo / q  # same files: the ratio of files/s

    return value


# (key, what is compared, target, the docs' column): each row's goals, where it has the methods.
GOALS = [
    ("data", "(deep -j1 - quick -j1) / read loop, seconds", "<= 2x", "deep data part vs read loop (<= 2x)"),
    ("deep_w", "deep -jW / (quick -jW + read loop), seconds", "<= 1.25x", "deep -jW vs quick -jW + read (<= 1.25x)"),
    ("loader", "quick -j1 vs the loader loop, files/s", ">= 5x", "quick -j1 vs loader loop (>= 5x, .pt)"),
    ("cd", "quick -j1 vs the central-directory loop, files/s", ">= 0.8x", "quick -j1 vs CD loop (>= 0.8x)"),
]


def goal_label(k: str, key: str, row: Row) -> str:
    text = next(t for g, t, _, _ in GOALS if g == key)
    return f"{k}: {text}".replace("the loader loop", LOADER_SHORT[LOADER[row.container]])


def goals(args) -> list[Goal]:
    out = []
    for row in chosen(args):
        k = row.key
        if k != "tiny":
            out.append(Goal(goal_label(k, "data", row), value=data_part(k), target=2.0))
            out.append(Goal(goal_label(k, "deep_w", row), value=deep_all(k), target=1.25))
        pt = row.container == "pt"  # for npz and safetensors rows the ratio is for information
        out.append(
            Goal(
                goal_label(k, "loader", row), value=vs_loader(k), target=5.0 if pt else 0.0, at_most=False, info=not pt
            )
        )
        if row.zip_based:
            out.append(Goal(goal_label(k, "cd", row), f"{k}.quick_1", f"{k}.cd", 0.8))
    return out


def detail(f: dict) -> str:
    est = f.get("whole_set_seconds")
    return "" if est is None else f"scaled to the row: {est:.2f} s"


def finish(args, ctx, figures):
    notes = []
    for key, f in figures.items():
        if "." not in key:
            continue
        out = f.get("stdout_tail", "").strip()
        if f["label"].split(": ", 1)[1].startswith("scan") and (f.get("exit_code") != 0 or out != "No findings."):
            notes.append(
                f"{f['label']}: WARNING: exit code {f.get('exit_code')} and {out[:300]!r} on a clean set "
                "(a false alarm of the scanner, or the set is not what it should be)"
            )
        if "files" in f and f["files"] != f["items"]:
            notes.append(f"{f['label']}: WARNING: the loop saw {f['files']} files, expected {f['items']}")
        k = key.split(".")[0]
        quick = figures.get(f"{k}.quick_1", {}).get("seconds_best", 0.0)
        if key.endswith(".deep_1") and f["seconds_best"] < quick:
            notes.append(f"{k}: WARNING: deep -j1 was faster than quick -j1: the row's figures are disturbed")
        if key.endswith(".loader") and f.get("files", 0) < figures[f"{k}.quick_1"]["items"]:
            f["whole_set_seconds"] = loader_seconds(figures, k)
    return notes


BENCH = Bench(
    name="matrix_bench",
    title="cachedoctor benchmark matrix",
    schema="cachedoctor.bench.matrix/1",
    build=build,
    methods=methods,
    goals=goals,
    before_group=before_group,
    finish=finish,
    detail=detail,
    workers=True,
    repeat=3,
    statistic="best",
    budget=180,
    alternate=True,
    wipe=False,
    options=[
        opt("--rows", metavar="A,B", help=f"the rows to run (default all: {','.join(ROWS)})"),
        opt("--files", type=int, metavar="N", help="files in every chosen row (default: each row's own count)"),
        opt(
            "--loader-files",
            type=int,
            default=2000,
            metavar="M",
            help="time the loader loop (torch.load, np.load, safe_open) on the first M files of each row "
            "and scale it to the row (0 = all; default 2000)",
        ),
    ],
    quick={"repeat": 1, "loader_files": 100},
    describe=describe,
    reusable=lambda a, root: all((root / r.key).is_dir() for r in chosen(a)),
    kept_name=lambda a: "matrix",
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCH))
