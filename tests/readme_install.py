"""Run README.md's install lines, verbatim, from a fresh clone: ``make install-check``.

tests/e2e/test_install.py proves the built wheel installs offline; this script proves what a new
user actually types works: the ``git clone`` line and each ``pip install`` line of README.md's
"## Install" block, run through ``bash -c`` with a throwaway venv's bin first on PATH, in a fresh
venv and in one that already holds an older torch (which the extras must leave alone). It uses
pip as configured on the machine (its index and constraints, plus one that holds torch where it
is: Session.hold_torch in readme_install_session.py), so it needs a package index and takes minutes: it is a script, not part
of the pytest suite.

The lines are read from README.md by tests/readme_install_lines.py, which fails when one the
script expects is missing or an unknown one appears. The clone line's URL is a placeholder: it is run against this repository (its HEAD: what a
clone gets) through a link named ``cachedoctor.git``, so its ``cd cachedoctor`` holds too. Each
step prints ``ok: LINE ...``, ``FAIL: LINE: WHY`` or ``skipped: ...``; the exit status is 1 if
any step failed. ``--list`` only prints the extracted lines (the suite checks them that way).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from readme_install_lines import (  # tests/, the script's own folder, is on sys.path
    CLONE,
    ENCODERS,
    GIT_LINE,
    PIPX,
    PLACEHOLDER,
    PLAIN,
    REPAIR,
    S3,
    UV,
    Failed,
    command,
    install_blocks,
)
from readme_install_session import Session, uv_indexes

ROOT = Path(__file__).resolve().parents[1]
OLDER_TORCH = "2.13.0"  # the CPU build the project's machines carry; their index also has a newer one


def version_of(clone: Path) -> str:
    found = re.search(r'^version = "([^"]+)"', (clone / "pyproject.toml").read_text(), re.M)
    if not found:
        raise Failed(f"{clone / 'pyproject.toml'}: no version")
    return found.group(1)


def step_clone(s: Session) -> str:
    """The README's clone line with the placeholder URL swapped for this repository (through a link
    named cachedoctor.git, so the folder it clones into is `cachedoctor`); returns the version."""
    link = s.tmp / "origin" / "cachedoctor.git"
    link.parent.mkdir()
    link.symlink_to(ROOT)
    s.clone.parent.mkdir()
    s.sh(s.by_command[CLONE].replace(PLACEHOLDER, str(link)), None, s.clone.parent)
    head = s.sh("git rev-parse --short HEAD", None, s.clone).strip()
    s.ok(CLONE, f"placeholder URL: cloned {ROOT} (HEAD {head}) through {link}")
    dirty = s.sh("git status --porcelain --untracked-files=no", None, ROOT).splitlines()
    if dirty:
        print(
            f"note: {len(dirty)} uncommitted change(s) in {ROOT} are not in the clone: commit them to check them",
            flush=True,
        )
    return version_of(s.clone)


def step_plain(s: Session, venv: Path, version: str) -> None:
    """Fresh venv, no torch: ``pip install .``, then the CLI runs and torch is still absent."""
    s.pip(s.by_command[PLAIN], venv, s.clone, None)
    shown = s.sh("cachedoctor --version", venv, s.clone).strip()
    if shown != f"cachedoctor {version}":
        raise Failed(f"`cachedoctor --version` printed {shown!r}, expected 'cachedoctor {version}'")
    scan = s.run(["cachedoctor", "scan", "fixtures/caches/kohya"], venv, s.clone)
    if (
        scan.returncode != 1
        or "corrupt-archive (1)" not in scan.stdout
        or "\n1 error(s), 0 warning(s) in 1 file(s)" not in scan.stdout
    ):
        said = (scan.stderr.strip() or scan.stdout.strip() or "(no output)").splitlines()[-1]
        raise Failed(
            f"`cachedoctor scan fixtures/caches/kohya` exited {scan.returncode} ({said}), expected 1 with one corrupt-archive"
        )
    _, imports = s.probe(venv, [], ["torch"])
    if imports["torch"] is None:
        raise Failed("torch is importable after the plain install")
    s.ok(PLAIN, f"fresh venv: {shown}, scan of fixtures/caches/kohya exits 1 with corrupt-archive, no torch")


def step_older_torch(s: Session, venv: Path) -> None:
    """A venv holding an older torch: the extras add what they need and never replace it."""
    pin = f"pip install torch=={OLDER_TORCH}"
    try:
        s.sh(pin, venv, s.tmp)
        torch = s.probe(venv, ["torch"])[0]["torch"]
        if not torch or torch.split("+")[0] != OLDER_TORCH:
            raise Failed(f"torch is {torch}")
    except Failed as exc:
        s.fail(pin, f"{exc}; the extras' lines were not run (they would fetch the newest torch)")
        return
    s.ok(pin, f"the older torch, {torch}, installed first")
    checks = {  # line: (installed, not installed, importable)
        REPAIR: (["safetensors"], ["diffusers", "transformers"], ["safetensors"]),
        ENCODERS: (["diffusers", "transformers"], [], ["diffusers", "transformers", "cv2"]),
        S3: (["s3fs"], [], ["s3fs"]),
    }
    for cmd, (present, absent, mods) in checks.items():
        try:
            s.pip(s.by_command[cmd], venv, s.clone, torch)
            dists, imports = s.probe(venv, ["torch", *present, *absent], mods)
            wrong = [f"torch is {dists['torch']}, was {torch}"] if dists["torch"] != torch else []
            wrong += [f"{d} is not installed" for d in present if dists[d] is None]
            wrong += [f"{d} {dists[d]} is installed" for d in absent if dists[d] is not None]
            wrong += [f"import {m}: {err}" for m, err in imports.items() if err is not None]
            if wrong:
                raise Failed("; ".join(wrong))
            s.ok(
                cmd,
                f"torch still {torch}; "
                + ", ".join(f"{d} {dists[d]}" for d in present)
                + (f"; no {', '.join(absent)}" if absent else ""),
            )
        except Failed as exc:
            s.fail(cmd, str(exc))
    cmd = f"cachedoctor repair --dry-run {s.tmp / 'simpletuner'}"
    try:
        s.ok(cmd, dry_run_repair(s, venv, s.tmp / "simpletuner", torch))
    except Failed as exc:
        s.fail(cmd, str(exc))


def dry_run_repair(s: Session, venv: Path, cache: Path, torch: str) -> str:
    """``repair --dry-run`` on a copy of the SimpleTuner fixture: a plan, exit 1, nothing changed."""
    shutil.copytree(s.clone / "fixtures" / "caches" / "simpletuner", cache, symlinks=True)
    before = digest(cache)
    done = s.run(["cachedoctor", "repair", "--dry-run", str(cache)], venv, s.tmp)
    if done.returncode != 1 or "dry run: nothing was changed" not in done.stdout:
        said = (done.stderr.strip() or done.stdout.strip() or "(no output)").splitlines()[-1]
        raise Failed(f"exit {done.returncode} (expected 1: the copy has planted defects): {said}")
    if digest(cache) != before:
        raise Failed("the dry run changed the copy of fixtures/caches/simpletuner")
    plan = sum(1 for line in done.stdout.splitlines() if re.match(r"^  \S.* file\(s\)", line))
    return f"a copy of fixtures/caches/simpletuner, torch {torch}: a plan of {plan} action(s), nothing changed"


def digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def step_tools(s: Session, venv: Path, version: str) -> None:
    """pipx and uv, only where they are installed; each installs into folders of this run's own."""
    for tool, cmd in (("pipx", PIPX), ("uv", UV)):
        if shutil.which(tool) is None:
            s.say(f"skipped: {tool} not installed ({cmd})")
            continue
        home, bin_dir = s.tmp / tool, s.tmp / tool / "bin"
        extra = {"PIPX_HOME": str(home), "PIPX_BIN_DIR": str(bin_dir), "PIPX_MAN_DIR": str(home / "man")}
        extra |= (
            {
                "UV_TOOL_DIR": str(home),
                "UV_TOOL_BIN_DIR": str(bin_dir),
                "UV_CACHE_DIR": str(home / "cache"),
            }
            | uv_indexes(venv)
            | s.hold_torch(venv, None)
        )
        try:
            s.sh(s.by_command[cmd], None, s.clone, extra)
            shown = s.sh(f"{bin_dir / 'cachedoctor'} --version", None, s.tmp).strip()
            if shown != f"cachedoctor {version}":
                raise Failed(f"`cachedoctor --version` printed {shown!r}")
            s.ok(cmd, f"into {home}: {shown}")
        except Failed as exc:
            s.fail(cmd, str(exc))


def step_git_url(s: Session, venv: Path, git_lines: list[str], version: str) -> None:
    """The git-URL block's first line, against this repository's release tag, where it has one."""
    raw = git_lines[0]
    tag = GIT_LINE.match(command(raw)).group(1)  # type: ignore[union-attr]
    if tag != f"v{version}":
        s.fail(command(raw), f"names {tag}, but pyproject.toml's version is {version}")
        return
    if (
        subprocess.run(
            ["git", "rev-parse", "-q", "--verify", f"refs/tags/{tag}"], cwd=ROOT, capture_output=True
        ).returncode
        != 0
    ):
        s.say(f"skipped: no tag {tag} yet ({command(raw)})")
        return
    line = raw.replace(PLACEHOLDER, f"file://localhost{ROOT}")
    try:
        # The plain install is there already at the same version, which pip would keep as it is.
        s.sh("pip uninstall -y -q cachedoctor", venv, s.tmp)
        s.pip(line, venv, s.tmp, None)
        dists, _ = s.probe(venv, ["cachedoctor"])
        url = json.loads(
            s.sh(
                "python -c \"import importlib.metadata as m; print(m.distribution('cachedoctor').read_text('direct_url.json'))\"",
                venv,
                s.tmp,
            )
        )
        if dists["cachedoctor"] != version or url.get("vcs_info", {}).get("requested_revision") != tag:
            raise Failed(f"installed cachedoctor {dists['cachedoctor']} from {url}")
        s.ok(
            command(raw),
            f"placeholder URL: ran as {command(line)} in the fresh venv; cachedoctor {version} from the tag",
        )
    except Failed as exc:
        s.fail(command(raw), str(exc))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    parser.add_argument("--list", action="store_true", help="print the install lines found, run nothing")
    parser.add_argument("--keep", action="store_true", help="keep the temp folder (clone, venvs) for a look")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        clone_block, git_block = install_blocks(args.readme)
    except Failed as exc:
        print(f"FAIL: {exc}")
        return 1
    if args.list:
        print("\n".join(command(raw) for raw in clone_block + git_block))
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="readme-install-"))
    s = Session(tmp, clone_block)
    try:
        version = step_clone(s)
    except Failed as exc:
        s.fail(CLONE, str(exc))
    else:
        fresh = s.venv("fresh")
        try:
            step_plain(s, fresh, version)
        except Failed as exc:
            s.fail(PLAIN, str(exc))
            s.say("skipped: the pipx, uv and git-URL lines (the plain install failed)")
        else:
            step_git_url(s, fresh, git_block, version)
            step_tools(s, fresh, version)
        step_older_torch(s, s.venv("older-torch"))
    finally:
        if args.keep:
            print(f"kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    elapsed = time.monotonic() - started
    print(
        f"{'FAIL' if s.failures else 'ok'}: {s.failures} failure(s); total {int(elapsed // 60)}m{elapsed % 60:02.0f}s"
    )
    return 1 if s.failures else 0


if __name__ == "__main__":
    sys.exit(main())
