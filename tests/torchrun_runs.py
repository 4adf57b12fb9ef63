"""Running cachedoctor under a real ``torchrun`` (or as ranks a launcher without an agent starts)
for the tests, and seeing from outside which rank opened which file.

Which rank opened which file is seen from outside cachedoctor: a ``sitecustomize`` module on
``PYTHONPATH`` adds an audit hook (PEP 578) to every Python process of the run, workers
included, that logs each ``open`` of a path under the cache with the ``RANK`` of its process.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHES = REPO / "fixtures" / "caches"
HOST = socket.gethostname()
INDEX = "aggregate.pt"  # OneTrainer's cache index: read to plan the dataset, by every rank

SITECUSTOMIZE = """
import os, sys
_root = os.environ.get("CD_TEST_OPEN_ROOT")
_log = os.environ.get("CD_TEST_OPEN_LOG")
if _root and _log:
    _fd = os.open(os.path.join(_log, "opens-%d.log" % os.getpid()), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    def _hook(event, args):
        if event == "open" and args and isinstance(args[0], (str, bytes)):
            path = os.fsdecode(args[0])
            if path.startswith(_root) and "/.cachedoctor/" not in path:
                os.write(_fd, ("%s\\t%s\\n" % (os.environ.get("RANK", "-"), path)).encode("utf-8", "surrogateescape"))
    sys.addaudithook(_hook)
"""


def watched_env(tmp_path: Path) -> dict[str, str]:
    """The environment that logs every open under ``tmp_path/cache*`` (see the module doc)."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    logs = tmp_path / "opens"
    logs.mkdir()
    path = os.pathsep.join([str(hook), str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {
        **os.environ,
        "PYTHONPATH": path,
        "CD_TEST_OPEN_ROOT": str(tmp_path / "cache"),
        "CD_TEST_OPEN_LOG": str(logs),
        "OMP_NUM_THREADS": "1",
    }


def opens(env: dict[str, str]) -> dict[str, Counter[str]]:
    """path -> opens per rank, from the logs; the logs are emptied for the next run."""
    seen: dict[str, Counter[str]] = defaultdict(Counter)
    for log in Path(env["CD_TEST_OPEN_LOG"]).iterdir():
        for line in log.read_text(encoding="utf-8").splitlines():
            rank, path = line.split("\t", 1)
            seen[path][rank] += 1
        log.unlink()
    return dict(seen)


def torchrun(*argv: str, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    return subprocess.run([*cmd, "-m", "cachedoctor", *argv], capture_output=True, text=True, timeout=timeout, env=env)


def alone(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cachedoctor", *argv], capture_output=True, text=True, timeout=180, env=env
    )


def report(stdout: str) -> dict:
    doc = json.loads(stdout)
    return {**doc, "summary": {k: v for k, v in doc["summary"].items() if k != "elapsed_s"}}


def ours(stderr: str) -> list[str]:
    """cachedoctor's own lines among the launcher's."""
    return [line for line in stderr.splitlines() if line.startswith("cachedoctor: ")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def two_ranks(argv: list[str], env: dict[str, str], extra: dict[int, dict[str, str]]) -> list[subprocess.Popen[str]]:
    """Both ranks started as a launcher without an agent (srun, mpirun) starts them."""
    port = str(free_port())
    procs = []
    for rank in (0, 1):
        rank_env = {**env, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1"}
        rank_env.update(MASTER_PORT=port, **extra.get(rank, {}))
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "cachedoctor", *argv],
                env=rank_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return procs
