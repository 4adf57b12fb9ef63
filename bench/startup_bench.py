#!/usr/bin/env python3
"""Start-up alone (bench/README.md): fresh processes of ``cachedoctor --version``, ``--help``
and a ``scan`` of a one-file folder (``--no-state -q -j1``) against ``python -c pass`` and
``python -c "import zipfile"``. A small scan is mostly start-up, so this row says what every
whole-process goal pays before it reads a file.

Each cachedoctor row runs the CLI as ``python -m cachedoctor`` does (``runpy``) inside a ``-c``
wrapper that then prints one JSON line: how many modules, and how many cachedoctor modules, the
process imported. ``--version`` and ``--help`` must import at most 12 cachedoctor modules (no
command is built for them: ``cli/lazy.py``); the times are for information.
"""

from __future__ import annotations

import os
import shutil
import sys

import runner
from runner import REPO, Bench, Goal, Method, fail

HEALTHY = REPO / "fixtures" / "caches" / "healthy" / "kohya" / "photo_000_0128x0128_sdxl.npz"
MODULES_LIMIT = 12
# ``python -m cachedoctor ARGS``, then the modules it imported as the last line of stdout (spelled
# without the json module: the wrapper must not import what the CLI does not).
WRAPPER = """
import runpy, sys
sys.argv = ["cachedoctor", *sys.argv[1:]]
try:
    runpy.run_module("cachedoctor", run_name="__main__", alter_sys=True)
    code = 0
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
sys.stdout.flush()
mine = sum(1 for m in sys.modules if m == "cachedoctor" or m.startswith("cachedoctor."))
print('{"cachedoctor_modules": %d, "modules": %d, "cli_exit": %d}' % (mine, len(sys.modules), code))
sys.exit(code)
"""


def build(args, root):
    folder = root / "one"
    folder.mkdir()
    shutil.copyfile(HEALTHY, folder / HEALTHY.name)
    return {"files": 1, "file": HEALTHY.name, "bytes": HEALTHY.stat().st_size}


def setup(args, ctx):
    """The one-file scan must be clean (exit 0, "No findings."), or its time is not a scan's."""
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "cachedoctor", "scan", str(ctx.root / "one"), "--no-state", "-q", "-j1"],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=str(ctx.root),
    )
    if (done.returncode, done.stdout) != (0, "No findings.\n"):
        fail(f"the one-file scan gave exit {done.returncode}, {done.stdout!r} {done.stderr[-300:]!r}: not a clean scan")


def _env() -> dict[str, str]:
    """The defaults are timed: no CACHEDOCTOR_* settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith("CACHEDOCTOR_")}


def methods(args, ctx):
    env, cwd = _env(), str(ctx.root)
    py = [sys.executable]
    cli = [*py, "-c", WRAPPER]

    def row(key: str, label: str, command: list[str]) -> Method:
        return Method(key, label, command=command, env=env, cwd=cwd)  # no items: times, not rates

    return [
        row("pass", "python -c pass", [*py, "-c", "pass"]),
        row("zipfile", 'python -c "import zipfile"', [*py, "-c", "import zipfile"]),
        row("version", "cachedoctor --version", [*cli, "--version"]),
        row("help", "cachedoctor --help", [*cli, "--help"]),
        row(
            "scan",
            "cachedoctor scan ONE-FILE --no-state -q -j1",
            [*cli, "scan", str(ctx.root / "one"), "--no-state", "-q", "-j1"],
        ),
    ]


def finish(args, ctx, figures):
    notes = []
    for key in ("version", "help", "scan"):
        f = figures.get(key, {})
        if f.get("cli_exit") != 0:
            notes.append(f"{f.get('label', key)}: WARNING: exit {f.get('cli_exit')}: its time may not be the command's")
        else:
            notes.append(f"{f['label']}: {f['cachedoctor_modules']} cachedoctor modules, {f['modules']} modules in all")
    return notes


def _modules(key: str):
    return lambda figures: figures.get(key, {}).get("cachedoctor_modules")


def _time_over_zipfile(key: str):
    return Goal(f"{key}: seconds vs python -c 'import zipfile'", key, "zipfile", per="seconds", info=True)


BENCH = Bench(
    name="startup_bench",
    title="cachedoctor start-up benchmark",
    schema="cachedoctor.bench.startup/2",
    build=build,
    setup=setup,
    methods=methods,
    finish=finish,
    repeat=10,
    budget=60,
    alternate=True,
    quick={"repeat": 2},
    describe=lambda a: {"file": HEALTHY.name, "version": 1},
    reusable=lambda a, root: (root / "one" / HEALTHY.name).is_file(),
    kept_name=lambda a: "startup",
    goals=[
        Goal(
            f"cachedoctor --version: cachedoctor modules imported (<= {MODULES_LIMIT})",
            value=_modules("version"),
            target=MODULES_LIMIT,
            unit="",
        ),
        Goal(
            f"cachedoctor --help: cachedoctor modules imported (<= {MODULES_LIMIT})",
            value=_modules("help"),
            target=MODULES_LIMIT,
            unit="",
        ),
        Goal(
            "scan ONE-FILE --no-state -q -j1: cachedoctor modules imported", value=_modules("scan"), unit="", info=True
        ),
        _time_over_zipfile("version"),
        _time_over_zipfile("help"),
        _time_over_zipfile("scan"),
        Goal("scan: seconds vs python -c pass", "scan", "pass", per="seconds", info=True),
    ],
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCH))
