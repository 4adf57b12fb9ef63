"""One run of tests/readme_install.py: its temp folder, the clone, the venvs, and how a README line
is run in them (through bash, with the venv's bin first on PATH and torch held where it is).

Split from the script, which holds the steps (what each README line must do); this holds the
machinery they share, including pip's configuration as the machine has it (the index, the
constraints), which uv is given too, so no step goes to the internet for torch.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from readme_install_lines import Failed, command  # tests/, the script's own folder, is on sys.path

# Run by each venv's python: installed versions of `dists` and the import error of each module.
PROBE = r"""
import importlib, importlib.metadata as md, json, sys
dists, mods = (a.split(",") if a else [] for a in sys.argv[1:3])
out = {"dists": {}, "imports": {}}
for name in dists:
    try:
        out["dists"][name] = md.version(name)
    except md.PackageNotFoundError:
        out["dists"][name] = None
for mod in mods:
    try:
        importlib.import_module(mod)
        out["imports"][mod] = None
    except Exception as exc:
        out["imports"][mod] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


class Session:
    """The temp folder, the clone and the bookkeeping of one run."""

    def __init__(self, tmp: Path, readme_lines: list[str]) -> None:
        self.tmp = tmp
        self.by_command = {command(raw): raw for raw in readme_lines}
        self.clone = tmp / "work" / "cachedoctor"
        self.failures = 0
        self.last = time.monotonic()

    def say(self, text: str) -> None:
        """One line of the report, with the seconds since the previous one."""
        now = time.monotonic()
        print(f"{text} [{now - self.last:.0f}s]")
        self.last = now

    def ok(self, cmd: str, detail: str) -> None:
        self.say(f"ok: {cmd} ({detail})")

    def fail(self, cmd: str, why: str) -> None:
        self.failures += 1
        self.say(f"FAIL: {cmd}: {why}")

    def env(self, venv: Path | None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        env["PIP_NO_INPUT"] = "1"
        if venv is not None:
            env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
            env["VIRTUAL_ENV"] = str(venv)
        return env

    def sh(self, line: str, venv: Path | None, cwd: Path, extra: dict[str, str] | None = None) -> str:
        """Run ``line`` through bash; its stdout, or Failed with the last line it printed."""
        done = subprocess.run(
            ["bash", "-c", line],
            cwd=cwd,
            env=self.env(venv) | (extra or {}),
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            last = (done.stderr.strip() or done.stdout.strip() or "(no output)").splitlines()[-1]
            raise Failed(f"exit {done.returncode}: {last}")
        return done.stdout

    def run(self, argv: list[str], venv: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` (found on the venv's PATH first); Failed when the program is not there."""
        try:
            return subprocess.run(argv, cwd=cwd, env=self.env(venv), capture_output=True, text=True, timeout=300)
        except FileNotFoundError:
            raise Failed(f"{argv[0]} is not installed in {venv}") from None

    def venv(self, name: str) -> Path:
        where = self.tmp / name
        subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
        return where

    def probe(
        self, venv: Path, dists: list[str], mods: tuple[str, ...] | list[str] = ()
    ) -> tuple[dict[str, str | None], dict[str, str | None]]:
        done = self.run([str(venv / "bin" / "python"), "-c", PROBE, ",".join(dists), ",".join(mods)], venv, self.tmp)
        if done.returncode != 0:
            raise Failed(f"could not inspect {venv}: {done.stderr.strip().splitlines()[-1:]}")
        out = json.loads(done.stdout)
        return out["dists"], out["imports"]

    def hold_torch(self, venv: Path, torch: str | None) -> dict[str, str]:
        """pip's and uv's constraints for a run in ``venv``: the machine's own, and torch held where it
        is (``torch`` installed, or none at all). The README lines are matched exactly (no ``-U``), so pip
        keeps a torch that satisfies them anyway; the hold turns a line that would need another torch
        into a failure instead of a download (the index's newest torch is a multi-GB GPU build)."""
        held = self.tmp / f"hold-torch-{venv.name}.txt"
        held.write_text(f"torch=={torch}\n" if torch else "torch<0  # none: this venv must stay without torch\n")
        config = pip_config(venv)
        files = os.environ.get("PIP_CONSTRAINT") or config.get("constraint", "")
        both = f"{files} {held}".strip()
        return {"PIP_CONSTRAINT": both, "UV_CONSTRAINT": both}

    def pip(self, line: str, venv: Path, cwd: Path, torch: str | None) -> None:
        """Run a README pip line as written, with torch held (hold_torch)."""
        try:
            self.sh(line, venv, cwd, self.hold_torch(venv, torch))
        except Failed as exc:
            held = (
                f"holds torch at {torch}; a line that needs another torch"
                if torch
                else "keeps torch out of this venv; a line that needs torch"
            )
            raise Failed(f"{exc} (this run {held} fails here)") from None


def pip_config(venv: Path) -> dict[str, str]:
    """pip's configuration as ``pip config list`` shows it (files and PIP_ variables), by key."""
    listed = subprocess.run([venv / "bin" / "python", "-m", "pip", "config", "list"], capture_output=True, text=True)
    return dict(re.findall(r"^[\w:.]*?\.?([\w-]+)='(.*)'$", listed.stdout, re.M))


def uv_indexes(venv: Path) -> dict[str, str]:
    """pip's configured index and find-links as uv's variables: uv reads no pip configuration, and
    without them it would go to the internet (where the newest torch is a GPU build)."""
    found = pip_config(venv)
    names = {"index-url": "UV_INDEX_URL", "extra-index-url": "UV_EXTRA_INDEX_URL", "find-links": "UV_FIND_LINKS"}
    return {var: found[key] for key, var in names.items() if key in found}
