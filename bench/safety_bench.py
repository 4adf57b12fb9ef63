#!/usr/bin/env python3
"""The scanner under attack (issue 27, bench/README.md): the whole attack corpus scanned by the
command line, quick and deep, with ``--workers 1`` and the default, each scan a fresh process
whose whole process tree is measured.

The set: ``tests/exploits.py``'s corpus, every bomb of ``fixtures/builders/bombs.py`` in each
container, the scanner bombs of ``fixtures/builders/scanner_bombs.py`` (a 2 MB gzip and a 2 MB
npz inflating to 2 GiB, 100,000 memo copies, a 240,000-key hash flood, bytearray copies), and
the parser and gadget corpora of ``tests/exploits_parsers.py`` and ``tests/exploits_gadgets.py``
where they exist (each ``build_cases(marker)``). Built in a child process: this one never
imports torch.

Measured per scan: wall time; the peak RSS of the process tree (``VmRSS`` of the scan and all
its descendants, summed, sampled every 20 ms; and the same for ``Pss``, which counts the pages a
forked worker shares with its parent once); the largest single process's peak
(``RUSAGE_CHILDREN``); which files got a finding. Goals: the default quick scan within 60 s;
every scan's peak tree RSS within 512 MiB; every scan finishes (exit 0 or 1); every bomb (the
bombs and scanner bombs) reported. What the other corpora's files got is a note, not a goal:
their detection is the readers' work, tested in ``tests/e2e``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import runner
from runner import Bench, Goal, Method, fail, opt

BUILD = r"""
import importlib, json, sys
from pathlib import Path
root = Path(sys.argv[1])
sys.path[:0] = [sys.argv[2], sys.argv[3]]  # the repository, tests/
from fixtures.builders import scanner_bombs as sb
from fixtures.builders.bombs import BOMB_CONTAINERS, BOMBS, write_bomb
made = []
def add(path, group, expect):
    made.append({"path": str(path), "group": group, "expect": expect, "bytes": path.stat().st_size})
corpus = root / "corpus"
marker = root / "marker"
import exploits
groups = [("exploits", exploits.build_corpus)]
for name in ("exploits_parsers", "exploits_gadgets"):
    try:
        module = importlib.import_module(name)
    except ImportError:
        continue
    groups.append((name, module.build_cases))
for group, build in groups:
    for case in build(marker):
        add(exploits.write_case(case, corpus / group / case.id), group, case.expect)
for kind in BOMBS:
    for container in BOMB_CONTAINERS:
        add(write_bomb(kind, container, corpus / "bombs" / f"{kind}-{container}"), "bombs", "bomb")
scanner = corpus / "scanner"
for name, make in (
    ("gzip-2gib", lambda d: sb.gzip_bomb(d / "latent.pt")),
    ("npz-2gib", lambda d: sb.npz_bomb(d / "latent.npz")),
    ("memo-copies", lambda d: sb.in_torch_zip(sb.memo_copies(), d / "latent.pt")),
    ("hash-flood-zip", lambda d: sb.in_torch_zip(sb.hash_flood(), d / "latent.pt")),
    ("hash-flood-plain", lambda d: d.joinpath("latent.pt").write_bytes(sb.hash_flood()) and d / "latent.pt"),
    ("bytearray-copies", lambda d: sb.in_torch_zip(sb.bytearray_copies(), d / "latent.pt")),
):
    folder = scanner / name
    folder.mkdir(parents=True, exist_ok=True)
    add(make(folder), "scanner", "bomb")
(root / "files.json").write_text(json.dumps(made))
print(json.dumps({"files": len(made), "bytes": sum(f["bytes"] for f in made)}))
"""

# One scan of the corpus by the command line, its process tree sampled until it exits.
MEASURE = r"""
import json, os, subprocess, sys, threading, time
corpus, deep, workers, timeout, report = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4], sys.argv[5]
files, limit = json.load(open(sys.argv[6])), float(sys.argv[7])
if os.path.exists(report):
    os.unlink(report)  # a scan that is killed leaves none: never judge it by an older one
argv = [sys.executable, "-m", "cachedoctor", "scan", corpus, "--no-state", "--format", "json", "-o", report,
        "--file-timeout", timeout, "--fail-on", "never", "-q"] + (["--deep"] if deep else [])
if workers != "default":
    argv += ["--workers", workers]
def tree(root):
    kids = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, []))
    return out
def kib(pid, path, field):
    try:
        with open(f"/proc/{pid}/{path}") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0
peak = {"rss": 0, "pss": 0, "processes": 0}
started = time.perf_counter()
proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
done = threading.Event()
def sample():
    while not done.is_set():
        pids = tree(proc.pid)
        peak["rss"] = max(peak["rss"], sum(kib(p, "status", "VmRSS:") for p in pids))
        peak["pss"] = max(peak["pss"], sum(kib(p, "smaps_rollup", "Pss:") for p in pids))
        peak["processes"] = max(peak["processes"], len(pids))
        done.wait(0.02)
thread = threading.Thread(target=sample, daemon=True)
thread.start()
killer = threading.Timer(limit, proc.kill)  # a scan that does not finish is measured as such
killer.start()
_, status, usage = os.wait4(proc.pid, 0)
killer.cancel()
wall = time.perf_counter() - started
done.set()
thread.join()
stderr = proc.stderr.read().decode(errors="replace")
code = os.waitstatus_to_exitcode(status)
found = {}
try:
    with open(report) as f:
        data = json.load(f)
    for finding in data.get("findings", []):
        found.setdefault(finding["path"], []).append([finding["kind"], finding.get("details", {}).get("problem")])
    errors = [e.get("path") for e in data.get("errors", [])]
except (OSError, ValueError):
    errors = None
missed, dangerous = {}, {}
for f in files:
    if f["expect"] in ("unsafe", "bomb"):
        dangerous[f["group"]] = dangerous.get(f["group"], 0) + 1
        if not any(k in ("unsafe-pickle", "read-timeout") for k, _ in found.get(f["path"], [])):
            missed.setdefault(f["group"], []).append(os.path.relpath(f["path"], corpus))
false_alarms = [os.path.relpath(f["path"], corpus) for f in files if f["expect"] in ("clean", "uppercase_benign")
                and any(k == "unsafe-pickle" for k, _ in found.get(f["path"], []))]
print(json.dumps({"wall_s": wall, "exit": code, "peak_tree_rss_mib": peak["rss"] / 1024,
                  "peak_tree_pss_mib": peak["pss"] / 1024, "max_processes": peak["processes"],
                  "largest_process_maxrss_mib": usage.ru_maxrss / 1024, "dangerous": dangerous, "missed": missed,
                  "false_alarms": false_alarms, "errors": errors, "killed_after_s": limit if code == -9 else None,
                  "stderr_tail": stderr[-300:]}))
"""

RUNS = (("quick", False), ("deep", True))


def child_env() -> dict[str, str]:
    paths = [str(runner.REPO), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def build(args, root):
    proc = subprocess.run(
        [sys.executable, "-c", BUILD, str(root), str(runner.REPO), str(runner.REPO / "tests")],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=str(root),
    )
    if proc.returncode:
        fail(f"cannot build the corpus: {proc.stderr.strip()[-600:]}")
    if (root / "marker").exists():
        fail("a payload ran while the corpus was built")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def methods(args, ctx):
    corpus, files = str(ctx.root / "corpus"), str(ctx.root / "files.json")
    out = []
    for mode, deep in RUNS:
        for workers in ("default", "1"):
            key = f"{mode}-{'default' if workers == 'default' else 'w' + workers}"
            shown = f"{workers} (os.cpu_count() = {os.cpu_count()})" if workers == "default" else workers
            limit = str(args.scan_limit)
            report = str(ctx.root / f"report-{key}.json")
            flags = ["1" if deep else "0", workers, str(args.file_timeout), report, files, limit]
            out.append(
                Method(
                    key,
                    f"scan {mode}, --workers {shown}",
                    command=[sys.executable, "-c", MEASURE, corpus, *flags],
                    items=ctx.facts["files"],
                    nbytes=ctx.facts["bytes"],
                    env=child_env(),
                    cwd=str(ctx.root),
                )
            )
    return out


def worst(key):
    def value(figures):
        values = [f.get(key) for f in figures.values()]
        return None if not values or any(v is None for v in values) else max(values)

    return value


def finish(args, ctx, figures):
    notes = []
    for key, fig in figures.items():
        if fig.get("exit") not in (0, 1):
            notes.append(f"{key}: the scan did not finish (exit {fig.get('exit')}): {fig.get('stderr_tail', '')}")
        for group, paths in sorted((fig.get("missed") or {}).items()):
            total = (fig.get("dangerous") or {}).get(group, 0)
            notes.append(f"{key}: {group}: {len(paths)} of {total} dangerous files not flagged: {', '.join(paths[:5])}")
        if fig.get("false_alarms"):
            notes.append(f"{key}: unsafe-pickle on benign files: {', '.join(fig['false_alarms'][:5])}")
    return notes


def _bombs_missed(figures):
    if any("missed" not in f for f in figures.values()):
        return None
    return float(max(sum(len(f["missed"].get(g, [])) for g in ("bombs", "scanner")) for f in figures.values()))


def _unfinished(figures):
    return float(sum(1 for f in figures.values() if f.get("exit") not in (0, 1)))


BENCH = Bench(
    name="safety_bench",
    title="cachedoctor under attack: the whole exploit corpus, bounded in time and memory",
    schema="cachedoctor.bench.safety/1",
    build=build,
    methods=methods,
    finish=finish,
    repeat=1,
    statistic="best",
    budget=900,
    options=[
        opt("--file-timeout", type=float, default=10.0, metavar="S", help="the scans' --file-timeout (default 10)"),
        opt(
            "--scan-limit",
            type=float,
            default=300.0,
            metavar="S",
            help="kill a scan still running after S seconds, measured as unfinished (default 300)",
        ),
    ],
    quick={},
    kept_name=lambda args: "safety",
    describe=lambda args: {"version": 2},
    detail=lambda f: (
        f"{f.get('wall_s', 0):.1f} s, tree RSS {f.get('peak_tree_rss_mib', 0):.0f} MiB "
        f"(PSS {f.get('peak_tree_pss_mib', 0):.0f}), largest process {f.get('largest_process_maxrss_mib', 0):.0f} MiB, "
        f"exit {f.get('exit')}"
    ),
    goals=[
        Goal(
            "default quick scan of the whole corpus, seconds",
            value=lambda fs: fs.get("quick-default", {}).get("wall_s"),
            target=60.0,
            unit=" s",
        ),
        Goal(
            "largest peak RSS of a scan's process tree, MiB", value=worst("peak_tree_rss_mib"), target=512, unit=" MiB"
        ),
        Goal("scans that did not finish (exit 2, killed)", value=_unfinished, target=0, unit=""),
        Goal("bombs not reported (unsafe-pickle or read-timeout), worst scan", value=_bombs_missed, target=0, unit=""),
    ],
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCH))
