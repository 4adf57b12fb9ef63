"""cachedoctor in other people's pipelines: the pre-commit hook, and the gate of docs/ci.md at the top of a
training job script, run for real through bash on a tiny SimpleTuner dataset."""

from __future__ import annotations

import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from factories import latent, peers, pt_bytes, save_pt, saved_on
from repair_factories import POOL, simpletuner

from cachedoctor.cli import run
from cachedoctor.cli.environment import Environment

REPO = Path(__file__).resolve().parents[2]
CI_DOC = (REPO / "docs" / "ci.md").read_text()

#: The job-script snippets of docs/ci.md ("Gates: CI and the start of a training job"), verbatim.
GATE = (
    "cachedoctor scan --config multidatabackend.json --world-size 8 --batch-size 4 --fail-on error || exit 1\n"
    'accelerate launch --num_processes 8 train.py "$@"\n'
)
RUN_SIZE = "--world-size 8 --batch-size 4"
REPAIR_FIRST = (
    "cachedoctor repair --config multidatabackend.json --encoder diffusers-vae:/models/vae --yes \\\n"
    '  && accelerate launch train.py "$@"\n'
)
TRAIN = 'accelerate launch train.py "$@"'
TRAIN_8 = 'accelerate launch --num_processes 8 train.py "$@"'
STARTED = "training starts"


def load_hooks() -> list[dict]:
    text = (REPO / ".pre-commit-hooks.yaml").read_text()
    try:
        import yaml
    except ImportError:  # pragma: no cover - PyYAML is in the dev set; keep the test honest without it
        return [_parse_flat_list(text)]
    return yaml.safe_load(text)


def _parse_flat_list(text: str) -> dict:
    """The one-hook file as a dict: ``- key: value`` and ``  key: value`` lines, comments skipped."""
    hook: dict = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, _, value = line.lstrip("- ").partition(":")
        value = value.strip()
        hook[key.strip()] = {"true": True, "false": False}.get(value, value)
    return hook


def cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(argv, Environment(stdout=out, stderr=err, stdout_isatty=False, stderr_isatty=False, cwd="/"))
    return code, out.getvalue(), err.getvalue()


def test_pre_commit_hook_definition() -> None:
    hooks = load_hooks()
    assert [h["id"] for h in hooks] == ["cachedoctor-scan"]
    hook = hooks[0]
    assert hook["entry"] == "cachedoctor scan --fail-on error"
    assert (hook["language"], hook["pass_filenames"], hook["always_run"]) == ("python", False, False)
    assert hook["name"] and hook["description"]
    files = re.compile(hook["files"])
    assert [bool(files.search(p)) for p in ("cache/vae/ab12.pt", "img_0512x0512_sdxl.npz", "x/y.safetensors")] == [
        True
    ] * 3
    assert [bool(files.search(p)) for p in ("train.py", "a.pt.txt", "README.md", "config.json")] == [False] * 4


def test_pre_commit_entry_is_the_installed_command() -> None:
    program = shlex.split(load_hooks()[0]["entry"])[0]
    pyproject = (REPO / "pyproject.toml").read_text()
    scripts = pyproject[pyproject.index("[project.scripts]") :].split("\n[", 1)[0]
    assert f'\n{program} = "cachedoctor.__main__:main"' in scripts


def test_pre_commit_entry_exits_0_on_a_healthy_cache_and_1_on_a_defect(tmp_path: Path) -> None:
    argv = shlex.split(load_hooks()[0]["entry"])[1:]
    peers(tmp_path)
    with saved_on("cuda:0"):  # a warning: below --fail-on error, so the commit goes through
        save_pt(tmp_path / "gpu.pt", latent(seed=7))
    assert cli(argv + [str(tmp_path)])[0] == 0
    (tmp_path / "cut.pt").write_bytes(pt_bytes(latent(seed=9))[:300])  # truncated: corrupt-archive, an error
    code, out, _ = cli(argv + [str(tmp_path)])
    assert code == 1 and "corrupt-archive" in out and "cut.pt" in out


def test_ci_doc_shows_the_hook_and_the_job_snippets() -> None:
    section = CI_DOC[CI_DOC.index("## Gates: CI and the start of a training job") : CI_DOC.index("## Baselines")]
    assert GATE in section and REPAIR_FIRST in section
    assert (
        "- id: cachedoctor-scan" in section and 'args: [path/to/cache, --world-size, "8", --batch-size, "4"]' in section
    )
    assert (
        "cachedoctor scan --config config/multidatabackend.json --world-size 8 --batch-size 4 --fail-on error"
        in section
    )
    assert "cachedoctor explain" in section
    if "--format github" in section:  # the doc may only name report formats that exist
        from cachedoctor.report import OutputFormat

        assert "github" in {f.value for f in OutputFormat}


def bash(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``script`` with ``cachedoctor`` resolved as a user's shell would: the console script next to
    this interpreter, or ``python -m cachedoctor`` where there is none."""
    bindir = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
    if shutil.which("cachedoctor", path=bindir) is None:
        script = f'cachedoctor() {{ {shlex.quote(sys.executable)} -m cachedoctor "$@"; }}\n' + script
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def job(snippet: str, run_size: str | None = None) -> str:
    """The docs/ci.md snippet with the training command replaced by a marker we can see (and
    the run's size by ``run_size``: the test datasets are too small for 8 GPUs at batch 4)."""
    assert TRAIN in snippet or TRAIN_8 in snippet
    if run_size is not None:
        assert RUN_SIZE in snippet
        snippet = snippet.replace(RUN_SIZE, run_size)
    return snippet.replace(TRAIN_8, f"echo {STARTED}").replace(TRAIN, f"echo {STARTED}")


@pytest.fixture
def dataset(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Four images with their complete SimpleTuner VAE cache; multidatabackend.json in the root."""
    return simpletuner(tmp_path / "job", n=4)


def test_gate_starts_training_only_on_a_healthy_cache(dataset) -> None:  # type: ignore[no-untyped-def]
    one_gpu = job(GATE, "--world-size 1 --batch-size 1")
    healthy = bash(one_gpu, dataset.root)
    assert (healthy.returncode, healthy.stdout.splitlines()[-1]) == (0, STARTED), healthy.stderr
    # the doc's run: 8 GPUs at batch 4 want 32 images a step, and 4 cannot make one (SimpleTuner
    # would stop at start-up): the gate stops the job before the launcher
    eight = bash(job(GATE), dataset.root)
    assert eight.returncode == 1 and STARTED not in eight.stdout and "rank-imbalance" in eight.stdout

    tagged = dataset.latent_path(dataset.images[0])
    with saved_on("cuda:0"):  # a device-tagged latent is a warning: the job still starts
        save_pt(tagged, torch.load(tagged, weights_only=True))
    warned = bash(one_gpu, dataset.root)
    assert (warned.returncode, warned.stdout.splitlines()[-1]) == (0, STARTED)
    assert "device-tagged" in warned.stdout

    latent_file = dataset.latent_path(dataset.images[1])
    latent_file.write_bytes(latent_file.read_bytes()[:200])  # a truncated latent
    broken = bash(one_gpu, dataset.root)
    assert broken.returncode == 1 and STARTED not in broken.stdout
    assert "corrupt-archive" in broken.stdout


def test_gate_stops_when_the_scan_cannot_run(dataset) -> None:  # type: ignore[no-untyped-def]
    dataset.config.unlink()  # exit 2 from cachedoctor; `|| exit 1` still stops the job
    stopped = bash(job(GATE), dataset.root)
    assert stopped.returncode == 1 and STARTED not in stopped.stdout
    assert "multidatabackend.json" in stopped.stderr


@pytest.mark.slow
def test_repair_first_recomputes_then_starts_training(dataset) -> None:  # type: ignore[no-untyped-def]
    latent_file = dataset.latent_path(dataset.images[2])
    latent_file.write_bytes(latent_file.read_bytes()[:200])
    (dataset.vae / "tmpAb3dE9xZ").write_bytes(b"PK\x03\x04 half a latent")  # SimpleTuner's killed atomic write
    script = job(REPAIR_FIRST).replace("diffusers-vae:/models/vae", POOL)  # the tiny encoder the cache was built with
    done = bash(script, dataset.root)
    assert (done.returncode, done.stdout.splitlines()[-1]) == (0, STARTED), done.stdout + done.stderr
    assert not (dataset.vae / "tmpAb3dE9xZ").exists()
    assert bash(job(GATE, "--world-size 1 --batch-size 1"), dataset.root).returncode == 0


def test_repair_first_does_not_start_training_when_something_is_left(dataset) -> None:  # type: ignore[no-untyped-def]
    twin = dataset.data / (dataset.images[0].stem + ".jpg")  # img000.png + img000.jpg: one cache file
    shutil.copy(dataset.images[0], twin)
    script = job(REPAIR_FIRST).replace("diffusers-vae:/models/vae", POOL)
    left = bash(script, dataset.root)
    assert left.returncode == 1 and STARTED not in left.stdout
    assert "name-collision" in left.stdout
