"""README.md's install lines, as tests/readme_install.py (``make install-check``) reads them.

That script runs the lines in fresh venvs (minutes, so outside the suite); these tests check
only its reading of README.md, fast: the real README gives the lines it runs, and a README whose
install block lost or gained a line makes it fail with one line instead of skipping a step.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cachedoctor import __version__

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "readme_install.py"
README = ROOT / "README.md"
URL = "https://<your-git-host>/cachedoctor.git"
TAG = f"v{__version__}"


def _list(readme: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--readme", str(readme), "--list"], capture_output=True, text=True, timeout=60
    )


def _edited(tmp_path: Path, old: str, new: str) -> Path:
    text = README.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    edited = tmp_path / "README.md"
    edited.write_text(text.replace(old, new), encoding="utf-8")
    return edited


def test_the_readme_gives_the_lines_the_script_runs() -> None:
    done = _list(README)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [
        f"git clone {URL} && cd cachedoctor",
        "pip install .",
        'pip install ".[repair]"',
        'pip install ".[encoders]"',
        'pip install ".[repair,s3]"',
        "pipx install .",
        "uv tool install .",
        f'pip install "cachedoctor @ git+{URL}@{TAG}"',
        f'pip install "cachedoctor[repair] @ git+{URL}@{TAG}"',
        f'pipx install "cachedoctor @ git+{URL}@{TAG}"',
    ]


def test_a_line_gone_from_the_install_block_fails(tmp_path: Path) -> None:
    readme = _edited(tmp_path, 'pip install ".[encoders]"     #', "#")
    done = _list(readme)
    assert done.returncode == 1
    assert done.stdout == (
        f'FAIL: {readme}: the install block has no line `pip install ".[encoders]"`;'
        " update tests/readme_install.py with the README\n"
    )


def test_a_changed_line_fails(tmp_path: Path) -> None:
    readme = _edited(tmp_path, "pip install .                 #", "pip install -U .              #")
    done = _list(readme)
    assert done.returncode == 1
    assert (
        done.stdout
        == f"FAIL: {readme}: the install block has no line `pip install .`; update tests/readme_install.py with the README\n"
    )


def test_an_extra_line_in_the_install_block_fails(tmp_path: Path) -> None:
    readme = _edited(
        tmp_path, "uv tool install .             #", 'pip install ".[s3]"\nuv tool install .             #'
    )
    done = _list(readme)
    assert done.returncode == 1
    assert done.stdout == (
        f'FAIL: {readme}: the install block\'s line `pip install ".[s3]"` is not checked; add it to tests/readme_install.py\n'
    )


def test_a_readme_without_the_install_section_fails(tmp_path: Path) -> None:
    readme = _edited(tmp_path, "## Install\n", "## Installing\n")
    done = _list(readme)
    assert done.returncode == 1
    assert done.stdout == f"FAIL: {readme}: no '## Install' section; update tests/readme_install.py with the README\n"


def test_a_git_url_line_without_the_placeholder_fails(tmp_path: Path) -> None:
    readme = _edited(
        tmp_path,
        f'pip install "cachedoctor @ git+{URL}@{TAG}"',
        f'pip install "cachedoctor @ git+https://example.org/cachedoctor.git@{TAG}"',
    )
    done = _list(readme)
    assert done.returncode == 1
    assert done.stdout == (
        f'FAIL: {readme}: the git-URL block does not start with `pip install "cachedoctor @ git+{URL}@vX.Y.Z"`\n'
    )
