"""The runner every benchmark shares; a benchmark script is a declaration handed to :func:`main`.

A :class:`Bench` names its options, how its file set is built (with ``fixtures.builders``), its
methods (:class:`Method`: an in-process callable, or a command timed as a whole fresh process)
and its goals (:class:`Goal`: a ratio to a baseline method, or a figure against a limit). The
runner parses the arguments (``--quick``, ``--repeat``, ``--budget``, ``--dir``, ``--keep``,
``--json`` and the bench's own), builds or reuses the set, times every method in rounds
(untimed ``prepare`` before each timing, ``gc.collect()``, optionally alternating the order),
keeps every time, prints a table (best and median), the goals and notes, writes JSON, and exits:

    0  every goal met          1  a goal missed          2  could not run / meaningless figures

Run from the repository root (``python bench/scan_bench.py``): this module puts the repository
root on ``sys.path`` (appended, so an installed cachedoctor keeps its place) for
``fixtures.builders`` and, without an install, the checkout's ``cachedoctor``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NoReturn

REPO = Path(__file__).resolve().parent.parent
# The repository (not tests/): fixtures.builders, and the checkout's cachedoctor when none is installed.
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))

MARKER = "bench-set.json"
MB = 1_000_000


class CannotRun(Exception):
    """The benchmark cannot run, or its figures would be meaningless: exit 2 with this message."""


def fail(message: str) -> NoReturn:
    raise CannotRun(message)


@dataclass
class Method:
    """One timed method. Exactly one of ``run`` (in-process: ``run(state)`` with ``prepare()``'s
    result, returns a dict of extra figures or None) and ``command`` (a fresh process, timed
    end to end; a JSON object on the last line of its stdout becomes its extra figures)."""

    key: str
    label: str
    run: Callable[[Any], dict | None] | None = None
    prepare: Callable[[], Any] | None = None  # untimed, before every timing
    items: int = 0  # what the rate counts (files, images, entries)
    nbytes: int = 0  # bytes covered, for MB/s (0: no MB/s column)
    cleanup: Callable[[Any], None] | None = None  # untimed, after every timing, with prepare()'s result
    command: list[str] | None = None
    late: bool = False  # timed in rounds of their own after the others (separate processes that write)
    env: dict[str, str] | None = None  # the command's whole environment (None: inherit)
    cwd: str | None = None
    group: str = ""  # methods of one group are timed in rounds of their own, group after group


@dataclass
class Goal:
    """``method`` against ``baseline``: ``per="items"``/``"bytes"`` compares rates (ratio >=
    target), ``per="seconds"`` times (ratio <= target). Or ``value(figures)`` against ``target``
    (``at_most``). ``info``: printed, never PASS/FAIL."""

    label: str
    method: str = ""
    baseline: str = ""
    target: float = 0.0
    per: str = "items"
    value: Callable[[dict[str, dict]], float | None] | None = None
    at_most: bool = True
    unit: str = "x"
    info: bool = False


@dataclass
class Bench:
    name: str
    title: str
    schema: str
    build: Callable[[argparse.Namespace, Path], dict]  # writes the set under a folder; returns its facts
    methods: Callable[[argparse.Namespace, SimpleNamespace], list[Method]]
    goals: list[Goal] | Callable[[argparse.Namespace], list[Goal]]  # or the goals of these options
    options: list[tuple[tuple[str, ...], dict]] = field(default_factory=list)
    quick: dict[str, Any] = field(default_factory=dict)  # option values of --quick
    describe: Callable[[argparse.Namespace], dict] | None = None  # the set's identity: kept sets reused
    reusable: Callable[[argparse.Namespace, Path], bool] | None = None
    kept_name: Callable[[argparse.Namespace], str] | None = None  # bench/out/<name> with --keep
    setup: Callable[[argparse.Namespace, SimpleNamespace], None] | None = None  # untimed, after the set
    finish: Callable[[argparse.Namespace, SimpleNamespace, dict[str, dict]], list[str]] | None = None  # notes
    repeat: int = 3
    statistic: str = "best"  # or "median": what the goals compare
    budget: float = 150.0
    alternate: bool = False
    workers: bool = False  # offer --workers
    cli: bool = False  # offer --no-cli
    detail: Callable[[dict], str] | None = None  # a last column of the table
    # Untimed, before each group's rounds (warm-up reads, first scans): a group's files are read
    # into the page cache and timed before the next group's, so a set larger than the memory's
    # share for the page cache can still be timed warm, one group at a time.
    before_group: Callable[[argparse.Namespace, SimpleNamespace, str], None] | None = None
    wipe: bool = True  # False: a set that does not match is handed to build() as it is (it reuses parts)


def options(*specs: tuple[tuple[str, ...], dict]) -> list[tuple[tuple[str, ...], dict]]:
    return list(specs)


def opt(*flags: str, **kw: Any) -> tuple[tuple[str, ...], dict]:
    return flags, kw


def parser(bench: Bench) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=bench.name, description=bench.title)
    for flags, kw in bench.options:
        p.add_argument(*flags, **kw)
    p.add_argument(
        "--quick",
        action="store_true",
        help="a small, fast run to check the benchmark works: "
        + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in bench.quick.items()),
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=bench.repeat,
        metavar="K",
        help=f"time every method K times; goals compare the {bench.statistic} (default {bench.repeat})",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=bench.budget,
        metavar="S",
        help=f"stop repeating once another round would end past S seconds of timing "
        f"(default {bench.budget:g}; one round always runs)" + ("; per group of methods" if bench.before_group else ""),
    )
    if bench.workers:
        p.add_argument(
            "--workers",
            type=int,
            default=os.cpu_count() or 1,
            metavar="W",
            help="worker count of the W-worker rows (default os.cpu_count() = %(default)s)",
        )
    if bench.cli:
        p.add_argument("--no-cli", action="store_true", help="skip the command-line rows")
    p.add_argument(
        "--dir",
        type=Path,
        metavar="DIR",
        help="build the set in DIR (empty, or a set of this bench), or reuse it; never deleted",
    )
    p.add_argument(  # every bench takes it, so that `make bench BENCH_ARGS=--keep` runs them all
        "--keep",
        action="store_true",
        help="keep the set in bench/out/ and reuse it next time"
        if bench.kept_name
        else "accepted for `make bench BENCH_ARGS=--keep`; this bench keeps no set",
    )
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the figures as JSON to FILE")
    return p


def parse(bench: Bench, argv: list[str] | None) -> argparse.Namespace:
    p = parser(bench)
    args = p.parse_args(argv)
    if args.quick:
        given = set(argv if argv is not None else sys.argv[1:])
        for key, value in bench.quick.items():
            if not any(a == f"--{key.replace('_', '-')}" or a.startswith(f"--{key.replace('_', '-')}=") for a in given):
                setattr(args, key, value)
    for key in ("repeat", "workers"):
        if getattr(args, key, 1) < 1:
            p.error(f"--{key} must be at least 1")
    return args


# --------------------------------------------------------------------------- the set


def set_root(bench: Bench, args: argparse.Namespace) -> tuple[Path, bool]:
    """Where the set goes and whether it is deleted at the end."""
    if args.dir is not None:
        return args.dir.resolve(), False
    if getattr(args, "keep", False) and bench.kept_name:
        return REPO / "bench" / "out" / bench.kept_name(args), False
    return Path(tempfile.mkdtemp(prefix=f"cachedoctor-{bench.name}-")), True


def prepare_set(bench: Bench, args: argparse.Namespace, root: Path) -> dict:
    root.mkdir(parents=True, exist_ok=True)
    want = bench.describe(args) if bench.describe else None
    listed = os.listdir(root)
    have = None
    if MARKER in listed:
        try:
            have = json.loads((root / MARKER).read_text())
        except (OSError, ValueError):
            have = None
    if listed and have is None:
        fail(f"{root} holds files that are not a benchmark set (no {MARKER}); use an empty folder")
    if (
        want is not None
        and have is not None
        and have.get("set") == want
        and (bench.reusable is None or bench.reusable(args, root))
    ):
        return {**have.get("facts", {}), "reused": True, "build_seconds": 0.0}
    for name in listed if bench.wipe else [MARKER] if MARKER in listed else []:
        path = root / name
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    t0 = time.perf_counter()
    facts = bench.build(args, root)
    seconds = time.perf_counter() - t0
    (root / MARKER).write_text(json.dumps({"bench": bench.name, "set": want, "facts": facts}, indent=2) + "\n")
    return {**facts, "reused": False, "build_seconds": seconds}


# --------------------------------------------------------------------------- timing


def cpu_snapshot() -> tuple[float, float] | None:
    """(CPU-s the machine was busy, CPU-s of this process and its reaped children) since boot."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    busy = sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)
    t = os.times()
    return busy / os.sysconf("SC_CLK_TCK"), t.user + t.system + t.children_user + t.children_system


def time_method(m: Method) -> tuple[float, dict]:
    state = m.prepare() if m.prepare else None
    gc.collect()
    if m.command is not None:
        env = dict(m.env if m.env is not None else os.environ)  # the whole environment of the process
        # stderr is a pipe here, where --progress auto writes lines (and a first scan lists its
        # files for their total): the benches time the work, as on a terminal with -q
        env.setdefault("CACHEDOCTOR_PROGRESS", "none")
        t0 = time.perf_counter()
        proc = subprocess.run(m.command, capture_output=True, text=True, env=env, cwd=m.cwd)
        dt = time.perf_counter() - t0
        extra: dict = {"exit_code": proc.returncode}
        lines = proc.stdout.strip().splitlines()
        if lines and lines[-1].startswith("{"):
            try:
                extra.update(json.loads(lines[-1]))
            except ValueError:
                pass
        else:
            extra["stdout_head"], extra["stdout_tail"] = proc.stdout[:2000], proc.stdout[-2000:]
        if proc.returncode not in (0, 1):
            extra["stderr_tail"] = proc.stderr.strip()[-300:]
        return dt, extra
    assert m.run is not None
    t0 = time.perf_counter()
    extra = m.run(state) or {}
    dt = time.perf_counter() - t0
    if m.cleanup:
        m.cleanup(state)
    return dt, extra


def rounds(methods: list[Method], times: dict, extras: dict, repeat: int, budget: float, alternate: bool) -> int:
    t_timing = time.perf_counter()
    done = 0
    for r in range(repeat):
        t_round = time.perf_counter()
        for m in methods[::-1] if alternate and r % 2 else methods:
            dt, extra = time_method(m)
            if not times[m.key] or dt < min(times[m.key]):
                extras[m.key] = extra  # the extra figures of the fastest timing
            times[m.key].append(dt)
        done += 1
        round_s = time.perf_counter() - t_round
        print(f"round {r + 1}/{repeat}: {round_s:.1f} s", flush=True)
        if r + 1 < repeat and time.perf_counter() - t_timing + round_s > budget:
            print(f"     stopping after {done} round(s): another would pass --budget {budget:g} s")
            break
    return done


# --------------------------------------------------------------------------- goals


def goal_value(g: Goal, figures: dict[str, dict], stat: str) -> float | None:
    if g.value is not None:
        return g.value(figures)
    a, b = figures.get(g.method), figures.get(g.baseline)
    if a is None or b is None:
        return None
    key = f"seconds_{stat}"
    if g.per == "seconds":
        return a[key] / b[key]
    if g.per == "bytes":
        return (a["bytes"] / a[key]) / (b["bytes"] / b[key])
    return (a["items"] / a[key]) / (b["items"] / b[key])


def judge(g: Goal, value: float | None) -> str:
    if g.info:
        return "(info)"
    if value is None:
        return "FAIL (no figure)" if g.value is not None else "SKIP"
    ok = value <= g.target if (g.per == "seconds" or (g.value is not None and g.at_most)) else value >= g.target
    near = g.target and abs(value - g.target) <= 0.10 * abs(g.target)
    return ("PASS" if ok else "FAIL") + (" (borderline)" if near else "")


def target_text(g: Goal) -> str:
    if g.info:
        return ""
    at_most = g.per == "seconds" or (g.value is not None and g.at_most)
    return ("<= " if at_most else ">= ") + f"{g.target:g}{g.unit}"


# --------------------------------------------------------------------------- main


def machine(**versions: Any) -> dict[str, Any]:
    from importlib import metadata

    found = {}
    for dist in ("cachedoctor", "torch", "numpy", "safetensors"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    try:
        commit = subprocess.run(
            ["git", "-C", str(REPO), "describe", "--always", "--dirty"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {
        "python": platform.python_version(),
        **found,
        **versions,
        "commit": commit or None,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
    }


def main(bench: Bench, argv: list[str] | None = None) -> int:
    try:
        return _main(bench, argv)
    except CannotRun as exc:
        print(f"{bench.name}: {exc}", file=sys.stderr)
        return 2


def compile_bytecode() -> str:
    """Byte-compile the cachedoctor being benchmarked, as a wheel install is (pip compiles on
    install). Without it, a checkout or editable install in an environment that sets
    ``PYTHONDONTWRITEBYTECODE`` (this development VM does) compiles every module from source at
    every start: about a third of a whole-process scan's start-up, which no user pays."""
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("cachedoctor")
    if spec is None or spec.origin is None:
        return "cachedoctor not found"
    folder = os.path.dirname(spec.origin)
    compileall.compile_dir(folder, quiet=1)
    return folder


def _main(bench: Bench, argv: list[str] | None) -> int:
    args = parse(bench, argv)
    wall0 = time.perf_counter()
    compile_bytecode()
    root, delete = set_root(bench, args)
    try:
        facts = prepare_set(bench, args, root)
        ctx = SimpleNamespace(root=root, facts=facts, args=args)
        print(
            f"{bench.title}  (python {platform.python_version()}, {os.cpu_count()} CPUs, "
            f"{platform.system()} {platform.machine()})"
        )
        how = "reused" if facts["reused"] else f"built in {facts['build_seconds']:.1f} s"
        print(f"set: {root} ({how})")
        for key, value in facts.items():
            if key not in ("reused", "build_seconds"):
                print(f"     {key}: {value}")
        if bench.setup:
            bench.setup(args, ctx)
        methods = bench.methods(args, ctx)
        times: dict[str, list[float]] = {m.key: [] for m in methods}
        extras: dict[str, dict] = {}
        groups: dict[str, list[Method]] = {}
        for m in methods:
            groups.setdefault(m.group, []).append(m)
        cpu0, t0 = cpu_snapshot(), time.perf_counter()
        done = 0
        for group, members in groups.items():
            if group:
                print(f"-- {group}", flush=True)
            if bench.before_group:
                bench.before_group(args, ctx, group)
            os.sync()
            n = rounds([m for m in members if not m.late], times, extras, args.repeat, args.budget, bench.alternate)
            late = [m for m in members if m.late]
            if late:
                print(f"then {n} round(s) of the separate-process rows", flush=True)
                rounds(late, times, extras, n, float("inf"), True)
            done = max(done, n)
        timing_s, cpu1 = time.perf_counter() - t0, cpu_snapshot()

        figures: dict[str, dict] = {}
        for m in methods:
            ts = times[m.key]
            figures[m.key] = {
                "label": m.label,
                "items": m.items,
                "bytes": m.nbytes,
                "seconds_best": min(ts),
                "seconds_median": statistics.median(ts),
                "seconds_all": ts,
                "group": m.group,
                "items_per_s": m.items / min(ts) if m.items else None,
                "mb_per_s": m.nbytes / min(ts) / MB if m.nbytes else None,
                "whole_process": m.command is not None,
                **extras[m.key],
            }
        notes = list(bench.finish(args, ctx, figures)) if bench.finish else []
        for f in figures.values():
            if f["whole_process"] and f.get("exit_code") not in (0, 1):
                notes.append(f"{f['label']}: exit code {f.get('exit_code')}: {f.get('stderr_tail', '')}")
        share = None  # the share of the machine other processes used during the timing
        if cpu0 and cpu1:
            others = max(0.0, (cpu1[0] - cpu0[0]) - (cpu1[1] - cpu0[1]))
            share = others / (timing_s * (os.cpu_count() or 1))
            notes.append(
                f"other processes used {share:.0%} of the machine during the timing"
                + ("; WARNING: the figures are disturbed by other work" if share > 0.10 else "")
            )

        print()
        print(f"figures: {done} round(s); goals compare the {bench.statistic}; * = a fresh process each time")
        head = f"{'method':<52} {'items':>7} {'best s':>8} {'median s':>9} {'items/s':>10} {'MB/s':>8}"
        print(head + ("  detail" if bench.detail else ""))
        print("-" * len(head))
        for f in figures.values():
            rate = f"{f['items_per_s']:>10,.0f}" if f["items_per_s"] else f"{'-':>10}"
            mbs = f"{f['mb_per_s']:>8,.1f}" if f["mb_per_s"] else f"{'-':>8}"
            label = f["label"] + (" *" if f["whole_process"] else "")
            print(
                f"{label:<52} {f['items']:>7,} {f['seconds_best']:>8.3f} {f['seconds_median']:>9.3f} {rate} {mbs}"
                + (f"  {bench.detail(f)}" if bench.detail else "")
            )
        for note in notes:
            print(f"note: {note}")

        print()
        print(f"{'goal':<64} {'value':>8} {'target':>9}  result")
        rows = []
        for g in bench.goals(args) if callable(bench.goals) else bench.goals:
            value = goal_value(g, figures, bench.statistic)
            result = judge(g, value)
            shown = "n/a" if value is None else f"{value:.2f}{g.unit}"
            print(f"{g.label:<64} {shown:>8} {target_text(g):>9}  {result}")
            rows.append(
                {
                    "goal": g.label,
                    "method": g.method,
                    "baseline": g.baseline,
                    "per": g.per,
                    "value": value,
                    "target": None if g.info else g.target,
                    "text": f"{shown} vs {target_text(g)}",  # as the table prints them
                    "result": result,
                }
            )
        missed = [r["goal"] for r in rows if r["result"].startswith("FAIL")]
        judged = [r for r in rows if r["result"].startswith(("PASS", "FAIL"))]
        unjudged = not judged and any(r["result"] == "SKIP" for r in rows)  # every goal's figure skipped
        print()
        if unjudged:
            print("verdict: no goal judged (every goal's figure was skipped): nothing is met")
        else:
            print(
                "verdict: "
                + ("every goal met" if not missed else f"{len(missed)} goal(s) missed: " + "; ".join(missed))
            )
        total = time.perf_counter() - wall0
        print(f"total run time {total:.1f} s (set {facts['build_seconds']:.1f} s, timing {timing_s:.1f} s)")
        if args.json:
            doc = {
                "schema": bench.schema,
                "argv": sys.argv[1:] if argv is None else argv,
                "machine_busy": share,
                "machine": machine(),
                "set": {"folder": str(root), **facts},
                "repeat": args.repeat,
                "rounds": done,
                "statistic": bench.statistic,
                "figures": figures,
                "goals": rows,
                "notes": notes,
                "total_seconds": total,
            }
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(doc, indent=2, default=str) + "\n")
            print(f"figures written to {args.json}")
        return 1 if missed else 0
    finally:
        if delete:
            shutil.rmtree(root, ignore_errors=True)
        elif root.exists():
            print(f"set kept in {root} (reuse: --dir {root}" + (", or --keep again)" if args.dir is None else ")"))
