"""What the benchmarks share: exiting on a could-not-run problem, importing cachedoctor from
an installed copy or the checkout, and timing one call."""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, NoReturn, TypeVar

REPO = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def fail(prog: str, message: str) -> NoReturn:
    """A could-not-run problem: one message on stderr, exit 2 (goals never decide the exit)."""
    print(f"{prog}: {message}", file=sys.stderr)
    raise SystemExit(2)


def import_cachedoctor(load: Callable[[], T], prog: str, what: str) -> T:
    """``load()`` from the installed cachedoctor, else from this checkout's package."""
    try:
        return load()
    except ImportError:
        if str(REPO) not in sys.path:
            sys.path.append(str(REPO))
        for name in [m for m in sys.modules if m == "cachedoctor" or m.startswith("cachedoctor.")]:
            del sys.modules[name]
        try:
            return load()
        except ImportError as exc:
            fail(prog, f"cannot import {what}: {exc}")


def severity_of(finding: Any) -> str:
    """A finding's severity as text, tolerant of API changes (the bench may outlive a rename)."""
    sev = getattr(finding, "severity", "?")
    return str(getattr(sev, "value", sev))


def scan_summary(result: Any) -> dict[str, Any]:
    """What the figures record of one scan: files read, findings by ``severity:kind``, errors."""
    kinds = Counter(f"{severity_of(f)}:{getattr(f, 'kind', '?')}" for f in result.findings)
    return {"files_read": result.stats.files_read, "findings": len(result.findings),
            "finding_kinds": dict(sorted(kinds.items())), "errors": len(getattr(result, "errors", None) or ())}


def time_once(fn: Callable[[], dict]) -> tuple[float, dict]:
    gc.collect()
    t0 = time.perf_counter()
    extra = fn()
    return time.perf_counter() - t0, extra


def round_done(r: int, rounds: int, t_round: float, t_timing: float, repeat: int, budget: float) -> bool:
    """Report round ``r`` and say whether to stop: another round would end past ``budget``
    seconds of timing (at least one round always runs)."""
    round_s = time.perf_counter() - t_round
    spent = time.perf_counter() - t_timing
    print(f"round {r + 1}/{repeat}: {round_s:.1f} s", flush=True)
    if r + 1 < repeat and spent + round_s > budget:
        print(f"     stopping after {rounds} round(s): another would pass --budget {budget:.0f} s")
        return True
    return False


def add_set_options(p: argparse.ArgumentParser, *, set_dir: str, repeat: int, statistic: str, budget: float,
                    cli_rows: str) -> None:
    """The options of a benchmark that builds a file set and times methods in rounds:
    ``--dir``, ``--keep``, ``--repeat``, ``--workers``, ``--no-cli``, ``--budget``, ``--json``."""
    p.add_argument("--dir", type=Path, metavar="DIR",
                   help="build the set in DIR, or reuse the one already there (never deleted)")
    p.add_argument("--keep", action="store_true",
                   help=f"keep the generated set; without --dir it goes to bench/out/{set_dir} "
                        "and later --keep runs reuse it")
    p.add_argument("--repeat", type=int, default=repeat, metavar="K",
                   help=f"time every method K times and report the {statistic} (default {repeat})")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, metavar="W",
                   help="worker count of the W-worker scans (default os.cpu_count() = %(default)s)")
    p.add_argument("--no-cli", action="store_true", help=f"skip the information {cli_rows}")
    p.add_argument("--budget", type=float, default=budget, metavar="SECONDS",
                   help="stop repeating once another round would end past this many seconds of "
                        f"timing (default {budget:.0f}; at least one round always runs)")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the figures as JSON to FILE")


def at_least(p: argparse.ArgumentParser, args: argparse.Namespace, **minimums: int) -> None:
    """``p.error`` for the first option below its minimum (``per_folder=1`` checks ``--per-folder``)."""
    for dest, low in minimums.items():
        if getattr(args, dest) < low:
            p.error(f"--{dest.replace('_', '-')} must be at least {low}")


def set_root(args: argparse.Namespace, kept_name: str, temp_prefix: str) -> tuple[Path, str]:
    """Where the file set goes: ``--dir``, ``bench/out/<kept_name>`` with ``--keep``, or a temp folder."""
    if args.dir is not None:
        return args.dir.resolve(), "--dir"
    if args.keep:
        return REPO / "bench" / "out" / kept_name, "--keep"
    return Path(tempfile.mkdtemp(prefix=temp_prefix)), "temp"


def write_figures(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"figures written to {path}")


def release_set(root: Path, delete: bool, given_dir: bool) -> None:
    """Remove a temp set, or say where a kept one is and how to reuse it."""
    if delete:
        shutil.rmtree(root, ignore_errors=True)
    else:
        print(f"set kept in {root}" + ("" if given_dir else f" (reuse: --dir {root}, or --keep again)"))


def machine(**versions: Any) -> dict[str, Any]:
    """The machine facts each benchmark's JSON records, with the library versions it names."""
    return {"python": platform.python_version(), **versions, "cpu_count": os.cpu_count(), "platform": platform.platform()}


def print_total(wall0: float, t_timing: float, set_s: float, warm_s: float) -> float:
    """Print where a set-building benchmark's run time went; return the total seconds."""
    total_s = time.perf_counter() - wall0
    print()
    print(f"total run time {total_s:.1f} s (set {set_s:.1f} s, warm-up {warm_s:.1f} s, "
          f"timing {time.perf_counter() - t_timing:.1f} s)")
    return total_s


def run_rounds(methods: list[tuple[str, Callable[[], dict]]], times: dict[str, list[float]],
               extras: dict[str, dict], repeat: int, budget: float, *, alternate: bool = False) -> tuple[int, bool]:
    """Time every method once per round, so slow drift of the machine hits all alike (with
    ``alternate``, in reverse order every other round). Returns (rounds, stopped early)."""
    t_timing = time.perf_counter()
    rounds = 0
    for r in range(repeat):
        t_round = time.perf_counter()
        for key, fn in (methods if not alternate or r % 2 == 0 else methods[::-1]):
            dt, extra = time_once(fn)
            times[key].append(dt)
            extras[key] = extra
        rounds += 1
        if round_done(r, rounds, t_round, t_timing, repeat, budget):
            return rounds, True
    return rounds, False
