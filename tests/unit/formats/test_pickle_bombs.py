"""Resource bombs: pickles that are tiny (or merely big) on disk but would take gigabytes or
hours to follow. Each is planted three ways (as the data.pkl of an otherwise valid torch
archive, and as a plain pickle named ``x.pt`` and ``x.bin``) and judged in a child process under
RLIMIT_CPU 30 s and RLIMIT_AS 3 GiB (``exploits.judge_in_subprocess``): a reader that sets one
off fails the test instead of hanging CI. The contract: ``unsafe-pickle`` with
``details["problem"] == "resource-bomb"``, in a quick and in a deep scan.

The builders (``exploits.bomb_chunks``) stream to disk; ``bench/bomb_bench.py`` times the same
files. No timing is asserted here.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from exploits import BOMB_CONTAINERS, BOMBS, Verdict, judge_in_subprocess, write_bomb

pytestmark = pytest.mark.slow  # one child process per file


@pytest.fixture(scope="module")
def verdicts(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, str], Verdict]:
    """The verdict on every selected (bomb, container), two children at a time (each under its
    own limits). Each file is built, judged and deleted in turn: big-string is 200 MB."""
    root = tmp_path_factory.mktemp("bombs")
    selected = [
        (item.callspec.params["bomb"], item.callspec.params["container"])
        for item in request.session.items
        if getattr(item, "module", None) is request.module and hasattr(item, "callspec")
    ]

    def judge(key: tuple[str, str]) -> tuple[tuple[str, str], Verdict]:
        path = write_bomb(*key, root / "-".join(key))
        try:
            return key, judge_in_subprocess(path)
        finally:
            path.unlink()

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(judge, selected))


@pytest.mark.parametrize("container", BOMB_CONTAINERS)
@pytest.mark.parametrize("bomb", list(BOMBS))
def test_bomb_is_reported_not_followed(bomb: str, container: str, verdicts: dict[tuple[str, str], Verdict]) -> None:
    verdict = verdicts[bomb, container]
    assert verdict.returncode == 0, f"{BOMBS[bomb]}: the reader did not survive it: {verdict.stderr}"
    for mode in ("quick", "deep"):
        assert ("unsafe-pickle", "resource-bomb") in verdict.kinds(mode), (
            f"{BOMBS[bomb]} ({mode}): found {verdict.kinds(mode)}; read_file: {verdict.report['read']}"
        )
