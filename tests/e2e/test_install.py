"""``pip install cachedoctor`` as a user runs it: without torch, and never replacing theirs.

The sdist and the wheel are built once by ``make dist``, in a copy of the sources, with this
test environment's Python (no package fetched). Environments are fresh venvs; what they hold
besides the wheel is linked from this test environment's own site-packages, only the
distributions a requirement set pulls in (walked through their metadata), never torch. pip
runs offline with no configuration (``--no-index``; the only ``--find-links`` are the built
wheel and a metadata-only torch wheel), so a requirement that nothing in the environment
satisfies fails the install instead of being fetched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from importlib.metadata import Distribution, PackageNotFoundError, distribution
from pathlib import Path

import pytest
from cli_run import cli
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from cachedoctor import __version__
from cachedoctor.extras import torch_floor

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
NEWER_TORCH = "2.13.0"  # the version of the metadata-only torch wheel pip could upgrade to
PIP_ENV = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "PYTHONPATH"}
PIP_ENV |= {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}


def _run(*argv: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=PIP_ENV, cwd=cwd, timeout=300)


def _pip(target: Path, *argv: str | Path) -> subprocess.CompletedProcess[str]:
    """This environment's pip acting on the venv ``target`` (which has no pip of its own)."""
    done = _run(sys.executable, "-m", "pip", "--python", target / "bin" / "python", *argv)
    assert done.returncode == 0, done.stderr
    return done


def _closure(requirements: list[str], extras: set[str]) -> list[Distribution]:
    """The installed distributions ``requirements`` pull in (markers evaluated for ``extras``),
    torch and cachedoctor left out."""
    found: dict[str, Distribution] = {}
    todo = [(r, extras) for r in requirements]
    while todo:
        text, active = todo.pop()
        req = Requirement(text)
        name = canonicalize_name(req.name)
        if name in found or name in ("torch", "cachedoctor"):
            continue
        if req.marker and not any(req.marker.evaluate({"extra": e}) for e in active | {""}):
            continue
        try:
            found[name] = dist = distribution(req.name)
        except PackageNotFoundError:
            pytest.fail(f"{req.name} ({text}) is not installed in the test environment")
        todo += [(r, set(req.extras)) for r in dist.requires or []]
    return list(found.values())


def _venv(where: Path, deps: list[Distribution]) -> Path:
    """A venv without pip whose site-packages also sees ``deps`` (links in a folder of their own)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    linked = where / "deps"
    linked.mkdir()
    for dist in deps:
        for top in {f.parts[0] for f in dist.files or [] if f.parts[0] not in ("..", "__pycache__")}:
            if not (linked / top).exists():
                (linked / top).symlink_to(Path(str(dist.locate_file(top))))
    site = next((where / "lib").glob("python3*/site-packages"))
    (site / "deps.pth").write_text(f"{linked}\n")
    return where


def _fake_torch_install(venv: Path, version: str) -> None:
    """The record pip reads for an installed torch (no code: nothing here imports it)."""
    info = next((venv / "lib").glob("python3*/site-packages")) / f"torch-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("")


def _fake_torch_wheel(folder: Path) -> Path:
    """A folder with a torch wheel newer than either installed one (metadata only), for pip to
    upgrade to when it wants to."""
    with zipfile.ZipFile(folder / f"torch-{NEWER_TORCH}-py3-none-any.whl", "w") as whl:
        info = f"torch-{NEWER_TORCH}.dist-info"
        whl.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: torch\nVersion: {NEWER_TORCH}\n")
        whl.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(f"{info}/RECORD", "")
    return folder


#: What ``make dist`` needs from a checkout to build the sdist and the wheel.
DIST_SOURCES = ("pyproject.toml", "README.md", "CHANGELOG.md", "MANIFEST.in", "Makefile", "constraints-dev.txt")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``make dist`` in a copy of the sources (the checkout stays clean): dist/ holds the sdist
    and the wheel. The venv is this test environment's, already installed (``-o`` its stamp)."""
    src = tmp_path_factory.mktemp("src")
    for name in DIST_SOURCES:
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "cachedoctor", src / "cachedoctor", ignore=shutil.ignore_patterns("__pycache__"))
    venv = Path(sys.prefix)
    done = _run("make", "-s", "-o", f"{venv}/.installed-stamp", f"VENV={venv}", "dist", cwd=src)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (src / "dist").iterdir()) == [
        f"cachedoctor-{__version__}-py3-none-any.whl",
        f"cachedoctor-{__version__}.tar.gz",
    ]
    return src / "dist"


def _wheel(wheels: Path) -> Path:
    return next(wheels.glob("cachedoctor-*.whl"))


def _requirements(wheels: Path) -> list[str]:
    with zipfile.ZipFile(_wheel(wheels)) as whl:
        meta = whl.read(next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    return [line.split(": ", 1)[1] for line in meta.splitlines() if line.startswith("Requires-Dist: ")]


@pytest.fixture(scope="module")
def plain(wheels: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip install cachedoctor`` into a venv holding only what its core requirements pull in."""
    venv = _venv(tmp_path_factory.mktemp("plain") / "venv", _closure(_requirements(wheels), set()))
    _pip(venv, "install", "-q", "--no-index", "--find-links", wheels, _wheel(wheels))
    return venv


@pytest.fixture(scope="module")
def caches(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("fixtures") / "caches"
    shutil.copytree(ROOT / "fixtures" / "caches", target)
    return target


def _findings(stdout: str) -> list[tuple[str, str, str]]:
    return [(f["kind"], f["path"], f["fix"]) for f in json.loads(stdout)["findings"]]


def test_the_plain_install_has_no_torch(plain: Path) -> None:
    done = _run(plain / "bin" / "python", "-c", "import torch")
    assert done.returncode == 1 and "No module named 'torch'" in done.stderr
    done = _run(plain / "bin" / "python", "-c", "import importlib.metadata as m; m.version('torch')")
    assert done.returncode == 1 and "PackageNotFoundError" in done.stderr


@pytest.mark.parametrize("deep", [[], ["--deep"]], ids=["quick", "deep"])
def test_scan_without_torch_finds_what_the_dev_install_finds(plain: Path, caches: Path, deep: list[str]) -> None:
    argv = ["scan", str(caches), "--format", "json", "--no-state", *deep]
    done = _run(plain / "bin" / "cachedoctor", *argv)
    code, out, err = cli(*argv)
    assert (done.returncode, done.stderr) == (code, err) == (1, "")
    assert _findings(done.stdout) == _findings(out) != []


@pytest.mark.parametrize(
    "argv",
    [
        ["explain", "batch-leak"],
        ["settings", "show"],
        ["quarantine", "list", "{caches}"],
        ["recover", "{caches}", "--no-state", "--progress", "none"],  # a pipe gets progress lines, a StringIO none
        ["repair", "{caches}", "--dry-run", "--no-state", "--progress", "none"],
    ],
    ids=lambda argv: argv[0],
)
def test_other_commands_without_torch_print_what_the_dev_install_prints(
    plain: Path, tmp_path: Path, argv: list[str]
) -> None:
    """Each install on a fresh copy of the caches at the same path (recover keeps a state
    database even with --no-state, so a second run would read less)."""
    caches = tmp_path / "caches"
    argv = [a.format(caches=caches) for a in argv]
    shutil.copytree(ROOT / "fixtures" / "caches", caches)
    done = _run(plain / "bin" / "cachedoctor", *argv, cwd=caches)
    shutil.rmtree(caches)
    shutil.copytree(ROOT / "fixtures" / "caches", caches)
    assert (done.returncode, done.stdout, done.stderr) == cli(*argv, cwd=str(caches))


def test_manifest_build_without_torch(plain: Path, tmp_path: Path) -> None:
    dataset = ROOT / "fixtures" / "datasets" / "kohya"
    done = _run(plain / "bin" / "cachedoctor", "manifest", "build", dataset, "-o", tmp_path / "plain.jsonl")
    code, out, err = cli("manifest", "build", str(dataset), "-o", str(tmp_path / "dev.jsonl"))
    assert (done.returncode, done.stderr) == (code, err) == (0, "")
    assert (tmp_path / "plain.jsonl").read_text() == (tmp_path / "dev.jsonl").read_text() != ""


def test_repair_without_torch_says_how_to_get_it(plain: Path, caches: Path, wheels: Path) -> None:
    """The line installs the extra from where this cachedoctor came from: here the wheel file
    pip was given (its PEP 610 record), since cachedoctor is not on an index."""
    wheel = _wheel(wheels).resolve().as_uri()
    needs_torch = (
        f'cachedoctor: error: repair needs torch; install it with: pip install "cachedoctor[repair] @ {wheel}"\n'
    )
    before = {p: p.read_bytes() for p in caches.rglob("*") if p.is_file()}
    done = _run(plain / "bin" / "cachedoctor", "repair", caches, "--yes", "--no-state", "--progress", "none")
    assert (done.returncode, done.stdout, done.stderr) == (2, "", needs_torch)
    assert {p: p.read_bytes() for p in caches.rglob("*") if p.is_file()} == before


@pytest.fixture(scope="module")
def with_torch(wheels: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Venvs holding an installed torch (its record) at the floor and below it, and every other
    distribution of ``cachedoctor[repair]`` and ``cachedoctor[encoders]``, so the resolver decides
    about torch alone."""
    deps = _closure(_requirements(wheels), {"repair", "encoders"})
    out = {}
    for version in (f"{torch_floor()}.0", "2.0.1"):
        out[version] = _venv(tmp_path_factory.mktemp(f"torch-{version}") / "venv", deps)
        _fake_torch_install(out[version], version)
    return out


def _would_install(venv: Path, wheels: Path, extra: str, report: Path) -> dict[str, str]:
    newer = _fake_torch_wheel(report.parent)
    offline = ["--no-index", "--find-links", wheels, "--find-links", newer]
    _pip(venv, "install", "-q", "--dry-run", "--report", report, *offline, f"{_wheel(wheels)}{extra}")
    return {i["metadata"]["name"]: i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}


@pytest.mark.parametrize("extra", ["[repair]", "[encoders]"])
def test_the_repair_extra_leaves_a_torch_at_the_floor_alone(
    with_torch: dict[str, Path], wheels: Path, tmp_path: Path, extra: str
) -> None:
    """A trainer's venv with an older torch that still meets the floor: only cachedoctor is added."""
    venv = with_torch[f"{torch_floor()}.0"]
    assert _would_install(venv, wheels, extra, tmp_path / "report.json") == {"cachedoctor": __version__}


def test_the_plain_install_leaves_an_older_torch_alone(
    with_torch: dict[str, Path], wheels: Path, tmp_path: Path
) -> None:
    assert _would_install(with_torch["2.0.1"], wheels, "", tmp_path / "report.json") == {"cachedoctor": __version__}


@pytest.mark.parametrize("extra", ["[repair]", "[encoders]"])
def test_the_repair_extra_upgrades_only_a_torch_below_the_floor(
    with_torch: dict[str, Path], wheels: Path, tmp_path: Path, extra: str
) -> None:
    """What the test above would see if the plain install wanted torch: the older one replaced."""
    would = _would_install(with_torch["2.0.1"], wheels, extra, tmp_path / "report.json")
    assert would == {"cachedoctor": __version__, "torch": NEWER_TORCH}


def test_the_installed_wheel_says_its_version(plain: Path) -> None:
    done = _run(plain / "bin" / "cachedoctor", "--version")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"cachedoctor {__version__}\n", "")


def _names(archive: Path) -> set[str]:
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as whl:
            return set(whl.namelist())
    with tarfile.open(archive) as sdist:
        top = f"cachedoctor-{__version__}/"
        return {m.name.removeprefix(top) for m in sdist.getmembers() if m.isfile()}


def test_the_sdist_holds_what_a_build_needs_and_the_wheel_ships_the_package_only(wheels: Path) -> None:
    """The wheel was built from the sdist (make dist), so the sdist was enough to build it; both
    carry every module, the py.typed marker (docs/api.md) and the encoder walk-through; the wheel
    carries no tests or fixtures."""
    package = {
        str(p.relative_to(ROOT))
        for p in (ROOT / "cachedoctor").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix in (".py", ".md", ".typed")
    }
    assert "cachedoctor/py.typed" in package and "cachedoctor/encoders/EXAMPLE.md" in package
    sdist = _names(next(wheels.glob("*.tar.gz")))
    wheel = _names(_wheel(wheels))
    assert package | {"pyproject.toml", "README.md", "CHANGELOG.md"} <= sdist
    assert {n for n in wheel if not n.startswith(f"cachedoctor-{__version__}.dist-info/")} == package


def _extra_requirements(wheels: Path, extra: str) -> dict[str, str]:
    """What ``cachedoctor[extra]`` adds to the plain install, by name (``str(requirement)``)."""
    added = {}
    for text in _requirements(wheels):
        req = Requirement(text)
        if req.marker is not None and req.marker.evaluate({"extra": extra}) and not req.marker.evaluate({"extra": ""}):
            added[canonicalize_name(req.name)] = f"{req.name}{''.join(f'[{e}]' for e in sorted(req.extras))}"
    return added


def test_the_repair_extra_pulls_torch_and_safetensors_only(wheels: Path) -> None:
    assert sorted(_extra_requirements(wheels, "repair")) == ["safetensors", "torch"]


def test_the_encoders_extra_adds_the_model_libraries_to_repair(wheels: Path) -> None:
    added = _extra_requirements(wheels, "encoders")
    assert sorted(added) == ["cachedoctor", "diffusers", "opencv-python-headless", "transformers"]
    assert added["cachedoctor"] == "cachedoctor[repair]"


def test_the_plain_install_pulls_no_model_library(wheels: Path) -> None:
    core = {canonicalize_name(Requirement(t).name) for t in _requirements(wheels) if Requirement(t).marker is None}
    assert core.isdisjoint({"torch", "safetensors", "diffusers", "transformers", "opencv-python-headless"})
    assert "typer" in core
