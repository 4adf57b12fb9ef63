"""What README.md's "## Install" section says to run, as tests/readme_install.py runs it.

The install lines are read from README.md, not copied into the script; each one the script knows
how to check must be there and no unknown one may appear, so that a README change fails
``make install-check`` (one line naming what to update) instead of silently skipping a step.
tests/e2e/test_readme_install_lines.py checks this reading, fast, through ``--list``.
"""

from __future__ import annotations

import re
from pathlib import Path

PLACEHOLDER = "https://<your-git-host>/cachedoctor.git"
PREFIXES = ("pip install", "pipx install", "uv tool install", "git clone")
# The install block's commands (comments stripped) this script runs and checks, by step.
CLONE = f"git clone {PLACEHOLDER} && cd cachedoctor"
PLAIN, REPAIR, ENCODERS, S3 = (
    "pip install .",
    'pip install ".[repair]"',
    'pip install ".[encoders]"',
    'pip install ".[repair,s3]"',
)
PIPX, UV = "pipx install .", "uv tool install ."
EXPECTED = (CLONE, PLAIN, REPAIR, ENCODERS, S3, PIPX, UV)
GIT_LINE = re.compile(r'^pip install "cachedoctor @ git\+' + re.escape(PLACEHOLDER) + r'@(v[^"]+)"$')


class Failed(Exception):
    """A step's check did not hold; the message is the one-line why."""


def command(line: str) -> str:
    """The command of a README line, its trailing comment removed."""
    return re.sub(r"\s+#.*$", "", line).strip()


def install_blocks(readme: Path) -> tuple[list[str], list[str]]:
    """The install lines of the first two ```sh blocks under "## Install": the clone block's and the
    git-URL block's. Raises Failed (naming what to update) when they are not as this script expects."""
    lines = readme.read_text(encoding="utf-8").splitlines()
    try:
        start = lines.index("## Install")
    except ValueError:
        raise Failed(f"{readme}: no '## Install' section; update tests/readme_install.py with the README") from None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    blocks: list[list[str]] = []
    block: list[str] | None = None
    for line in lines[start + 1 : end]:
        if block is None and line.strip() == "```sh":
            block = []
        elif block is not None and line.strip() == "```":
            blocks.append([raw for raw in block if raw.startswith(PREFIXES)])
            block = None
        elif block is not None:
            block.append(line)
    if len(blocks) < 2:
        raise Failed(
            f"{readme}: '## Install' has {len(blocks)} ```sh block(s), expected the clone block and the git-URL block"
        )
    clone_block, git_block = blocks[0], blocks[1]
    found = [command(raw) for raw in clone_block]
    for want in EXPECTED:
        if want not in found:
            raise Failed(
                f"{readme}: the install block has no line `{want}`; update tests/readme_install.py with the README"
            )
    for got in found:
        if got not in EXPECTED:
            raise Failed(
                f"{readme}: the install block's line `{got}` is not checked; add it to tests/readme_install.py"
            )
    if not git_block or not GIT_LINE.match(command(git_block[0])):
        raise Failed(
            f'{readme}: the git-URL block does not start with `pip install "cachedoctor @ git+{PLACEHOLDER}@vX.Y.Z"`'
        )
    return clone_block, git_block
