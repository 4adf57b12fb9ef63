"""What a release tag promises: one version everywhere, and the CI integrations it ships.

The version is ``pyproject.toml``'s, ``cachedoctor.__version__`` and CHANGELOG.md's newest
entry; docs/ci.md's pre-commit ``rev:`` and action ``uses: ...@`` name its tag. The pre-commit
hook (``.pre-commit-hooks.yaml``) and the composite action (``action.yml``) are parsed as
pre-commit and GitHub read them, their commands are run on the shipped fixtures, and the inputs
docs/ci.md documents are the action's own.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_run import cli

from cachedoctor import __version__

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
CI_DOC = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
KOHYA = "fixtures/caches/kohya"  # one truncated npz: exit 1 with one corrupt-archive


def _yaml_blocks(text: str) -> list[Any]:
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", text, re.S)]


def _section(text: str, heading: str) -> str:
    """The text of the ``## heading`` section of ``text``."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def test_one_version_in_pyproject_the_package_and_the_changelog() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", changelog, re.M)
    assert released[0] == project["version"] == __version__ == "0.2.0"
    assert released == sorted(released, key=lambda v: tuple(map(int, v.split("."))), reverse=True)


def test_the_version_option_prints_it() -> None:
    assert cli("--version") == (0, f"cachedoctor {__version__}\n", "")


def _hook() -> dict[str, Any]:
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert [h["id"] for h in hooks] == ["cachedoctor-scan"]
    return dict(hooks[0])


def _documented_hook() -> tuple[dict[str, Any], dict[str, Any]]:
    """docs/ci.md's ``.pre-commit-config.yaml``: (the repo entry, its one hook)."""
    configs = [b for b in _yaml_blocks(_section(CI_DOC, "pre-commit")) if isinstance(b, dict) and "repos" in b]
    assert len(configs) == 1
    repo = configs[0]["repos"][0]
    return repo, repo["hooks"][0]


def test_the_documented_hook_names_this_version_and_the_shipped_hook() -> None:
    repo, hook = _documented_hook()
    assert repo["rev"] == f"v{__version__}"
    assert "<your-git-host>" in repo["repo"]  # a marked placeholder until the repository has a public URL
    assert hook["id"] == _hook()["id"]


def test_the_hook_with_the_documented_args_refuses_a_broken_cache(tmp_path: Path) -> None:
    """What pre-commit runs: the hook's entry, then the args of docs/ci.md's example, with the
    cache folder one of the shipped fixtures (run in a copy: a scan keeps its state there)."""
    shutil.copytree(ROOT / KOHYA, tmp_path / KOHYA)
    _repo, hook = _documented_hook()
    args = [KOHYA if a == "path/to/cache" else str(a) for a in hook["args"]]
    assert args == [KOHYA, "--world-size", "8", "--batch-size", "4"]
    code, out, err = cli(*shlex.split(_hook()["entry"])[1:], *args, cwd=str(tmp_path))
    assert (code, err) == (1, "")
    assert "corrupt-archive │ error    │ 1" in out


def _action() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8")))


def test_the_actions_inputs_are_the_documented_ones() -> None:
    action = _action()
    table = _section(CI_DOC, "GitHub Action")
    documented = re.findall(r"^\| `([a-z-]+)` \| (.*?) \|", table, re.M)
    assert [name for name, _ in documented] == list(action["inputs"])
    for name, default in documented:
        shown = "" if default == "(none)" else default.strip("`")
        assert str(action["inputs"][name]["default"]) == shown, name
    uses = [s for b in _yaml_blocks(table) for s in b["jobs"]["cache"]["steps"] if "cachedoctor@" in s.get("uses", "")]
    assert [s["uses"] for s in uses] == [f"<owner>/cachedoctor@v{__version__}"]
    assert set(uses[0]["with"]) <= set(action["inputs"])


def test_the_action_is_composite_and_installs_its_own_checkout() -> None:
    steps = _action()["runs"]["steps"]
    assert _action()["runs"]["using"] == "composite"
    assert steps[0]["uses"].startswith("actions/setup-python@")
    assert '"${{ github.action_path }}"' in steps[1]["run"]
    scan = steps[-1]
    # every input but python-version reaches the scan, through the environment only
    assert {v for v in scan["env"].values()} == {
        f"${{{{ inputs.{name} }}}}" for name in _action()["inputs"] if name != "python-version"
    }
    assert "${{" not in scan["run"]
    assert not any(name.startswith("CACHEDOCTOR_") for name in scan["env"])  # those are cachedoctor's settings


@pytest.mark.parametrize(
    ("inputs", "code"),
    [({"paths": KOHYA}, 1), ({"paths": KOHYA, "fail-on": "never"}, 0), ({"paths": "no/such/cache"}, 2)],
    ids=["findings", "fail-on-never", "missing"],
)
def test_the_actions_scan_step_runs_and_reports_the_exit_code(
    tmp_path: Path, inputs: dict[str, str], code: int
) -> None:
    """The scan step's own script, run by bash as the runner would, with the inputs' defaults
    and the installed ``cachedoctor`` first on PATH."""
    shutil.copytree(ROOT / KOHYA, tmp_path / KOHYA)
    action = _action()
    values = {name: str(spec["default"]) for name, spec in action["inputs"].items()} | inputs
    scan = action["runs"]["steps"][-1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEDOCTOR_")}
    env |= {var: values[ref.split("inputs.")[1].rstrip(" }")] for var, ref in scan["env"].items()}
    env |= {"GITHUB_OUTPUT": str(tmp_path / "output"), "PATH": f"{Path(sys.executable).parent}:{env['PATH']}"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        ["bash", "-c", scan["run"]], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == code, done.stderr
    assert (tmp_path / "output").read_text() == f"exit-code={code}\n"
    if code == 1:
        assert done.stdout.startswith(f"::error file={KOHYA}/img_100_0128x0128_sdxl.npz,title=corrupt-archive::")
