"""``cachedoctor repair`` survives what real machines do to it: SIGKILL at any instant, a second
repair running at the same time, and a full disk.

Every repair here is a real subprocess (``python -m cachedoctor repair``) on a real SimpleTuner
dataset whose cache was encoded by the example adapter (``POOL``: fast, deterministic, no
model), with one defect of each kind repair handles planted in it. After whatever went wrong,
the promises checked are the product's own: the cache ends clean by ``scan --deep``, the
dataset's own files are never touched, nothing defective is lost (its exact bytes are in the
quarantine, or still in place), no temp file and no torn file is left behind, and an
interrupted run is resumed under its own run id.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from factories import save_pt, saved_on
from faults_harness import Zygote, fill, live_group
from repair_factories import POOL, Dataset, simpletuner, tree_bytes

pytestmark = pytest.mark.slow

#: Crash points one replacement passes (mid-write, before-keep, before-replace, after-replace),
#: one quarantine move passes (before-move, after-move), and one batch of lossless rewrites
#: passes once (before-record: every file of the batch replaced, the journal not yet told); see
#: ``repair/swap.py``, ``repair/replace.py`` and ``repair/batch.py``.
POINTS_PER_REPLACE, POINTS_PER_MOVE, POINTS_PER_BATCH = 4, 2, 1
TIMEOUT_S = 180


@dataclass
class Broken:
    """A dataset with planted defects and everything needed to judge a repair of it."""

    ds: Dataset
    sources: dict[str, bytes]  # every dataset file (images, captions, metadata)
    healthy: dict[str, bytes]  # cache files (relative to the vae folder) that were fine before
    defective: dict[str, bytes]  # cache files (relative) that were broken before: their bytes
    expected: dict[str, torch.Tensor]  # what each replaced latent must hold afterwards
    replaced: list[str] = field(default_factory=list)  # paths a replacement writes (recompute, rewrite, clone)
    moved: list[str] = field(default_factory=list)  # paths moved to the quarantine
    batches: int = 1  # batches of lossless rewrites (all of them lie in the vae folder: one)

    @property
    def crash_points(self) -> int:
        return (
            POINTS_PER_REPLACE * len(self.replaced)
            + POINTS_PER_MOVE * len(self.moved)
            + POINTS_PER_BATCH * self.batches
        )

    @property
    def journal(self) -> Path:
        return self.ds.vae / ".cachedoctor" / "journal.sqlite"

    @property
    def quarantine(self) -> Path:
        return self.ds.vae / ".cachedoctor" / "quarantine"


def broken(root: Path, n: int = 12, *, leak: bool = True, **kw: object) -> Broken:
    """``n`` images, and in their cache: one latent missing and one truncated (recompute), two
    saved with ``cuda:0`` storages (rewrite-cpu), one batch-leaked view (clone-storage, with
    ``leak``), a stray ``tmpXXXXXXXX`` (partial-write) and an orphan latent (both quarantine).
    That is 5 replacements, 2 moves and one batch of lossless rewrites: 25 crash points, over
    the 20 the issue asks for.

    Not thread-safe (``saved_on`` patches torch's global serialization registry): build
    datasets one at a time."""
    ds = simpletuner(root, n, **kw)  # type: ignore[arg-type]
    lat = [ds.latent_path(img) for img in ds.images]
    expected = {str(p): torch.load(p, weights_only=True) for p in lat[:5]}
    lat[0].unlink()
    lat[1].write_bytes(lat[1].read_bytes()[:200])
    for p in lat[2:4]:
        with saved_on("cuda:0"):
            save_pt(p, expected[str(p)].clone())
    replaced = [str(p) for p in lat[:4]]
    if leak:
        batch = torch.randn(7, *expected[str(lat[4])].shape, generator=torch.Generator().manual_seed(4)).to(
            torch.bfloat16
        )
        save_pt(lat[4], batch[2])
        expected[str(lat[4])] = batch[2].clone()
        replaced.append(str(lat[4]))
    else:
        del expected[str(lat[4])]
    stray = ds.vae / "tmpAbCdEfGh"
    stray.write_bytes(b"half a latent, abandoned by a killed trainer")
    orphan = ds.vae / ("0" * 64 + ".pt")
    save_pt(orphan, expected[str(lat[2])] + 1)  # a latent like its peers that no item maps to
    cache = tree_bytes(ds.vae)
    broken_rel = {os.path.relpath(p, ds.vae) for p in replaced + [str(stray), str(orphan)]}
    return Broken(
        ds,
        ds.source_bytes(),
        {r: b for r, b in cache.items() if r not in broken_rel},
        {r: b for r, b in cache.items() if r in broken_rel},
        expected,
        replaced,
        [str(stray), str(orphan)],
    )


def repair_argv(b: Broken) -> list[str]:
    return [sys.executable, "-m", "cachedoctor", "repair", "--config", str(b.ds.config), "--encoder", POOL, "--yes"]


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CACHEDOCTOR_TEST_KILL_AT"}
    env["CACHEDOCTOR_PROGRESS"] = "none"  # stderr is judged line by line here; a log's lines: test_progress.py
    env.update(extra)
    return env


class _Done(subprocess.CompletedProcess):  # type: ignore[type-arg]
    pid: int


def run(argv: list[str], cwd: Path, zygote: Zygote | None = None, **extra: str) -> _Done:
    """Run to the end in a session of its own (its pid is its process group, for live_group):
    forked by ``zygote`` when given (torch already imported), else a fresh interpreter."""
    if zygote is not None:
        return zygote.run(argv, cwd, child_env(**extra), TIMEOUT_S)  # type: ignore[return-value]
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=child_env(**extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    done = _Done(argv, proc.returncode, out, err)
    done.pid = proc.pid
    return done


def running_run(b: Broken) -> str | None:
    """The run id the journal still marks ``running`` (a killed repair's), read-only."""
    if not b.journal.exists():
        return None
    db = sqlite3.connect(f"file:{b.journal}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT run_id FROM runs WHERE status = 'running'").fetchall()
    except sqlite3.OperationalError as exc:  # killed before the schema was committed
        if "no such table" not in str(exc):
            raise
        return None
    finally:
        db.close()
    assert len(rows) <= 1, rows
    return rows[0][0] if rows else None


def quarantined(b: Broken) -> list[bytes]:
    """The content of every file under ``quarantine/<run>/`` (the records file aside)."""
    if not b.quarantine.is_dir():
        return []
    return [p.read_bytes() for p in b.quarantine.glob("*/**/*") if p.is_file() and p.name != ".records.jsonl"]


def scan_findings(b: Broken, zygote: Zygote | None = None) -> tuple[int, list[object]]:
    proc = run(
        [sys.executable, "-m", "cachedoctor", "scan", "--deep", "--config", str(b.ds.config), "--format", "json"],
        b.ds.root,
        zygote,
    )
    try:
        return proc.returncode, json.loads(proc.stdout)["findings"]
    except (ValueError, KeyError):
        return proc.returncode, [f"unreadable scan output: {proc.stdout[-500:]!r} {proc.stderr[-500:]!r}"]


def leftovers(b: Broken) -> list[str]:
    """cachedoctor temp files anywhere under the cache (its state folder included)."""
    return sorted(str(p) for p in b.ds.vae.rglob(".cachedoctor-*.tmp"))


def torn(b: Broken) -> list[str]:
    """Cache files that ``torch.load(weights_only=True)`` cannot read (the quarantine aside)."""
    bad = []
    for p in sorted(b.ds.vae.rglob("*.pt")):
        if ".cachedoctor" in p.relative_to(b.ds.vae).parts:
            continue
        try:
            torch.load(p, weights_only=True)
        except Exception as exc:
            bad.append(f"{p.name}: {type(exc).__name__}: {exc}")
    return bad


def untouched_problems(b: Broken) -> list[str]:
    """What repair must never change: the dataset's files and the cache files that were fine."""
    problems = []
    if b.ds.source_bytes() != b.sources:
        problems.append("a dataset source file changed")
    now = tree_bytes(b.ds.vae)
    changed = sorted(r for r, data in b.healthy.items() if now.get(r) != data)
    if changed:
        problems.append(f"healthy cache files changed or gone: {changed}")
    return problems


def repaired_problems(b: Broken, zygote: Zygote | None = None) -> list[str]:
    """Everything a finished repair promises, as a list of what is wrong (empty: all kept)."""
    problems = untouched_problems(b)
    rc, findings = scan_findings(b, zygote)
    if rc != 0 or findings != []:
        problems.append(f"scan --deep exit {rc}, findings {findings}")
    kept = quarantined(b)
    lost = sorted(r for r, data in b.defective.items() if data not in kept)
    if lost:
        problems.append(f"defective files not in the quarantine: {lost}")
    if leftovers(b):
        problems.append(f"temp files left: {leftovers(b)}")
    if torn(b):
        problems.append(f"torn files: {torn(b)}")
    for path, tensor in b.expected.items():
        try:
            now = torch.load(path, weights_only=True)
        except Exception as exc:
            problems.append(f"{Path(path).name}: {exc}")
            continue
        if now.dtype != tensor.dtype or not torch.equal(now, tensor):
            problems.append(f"{Path(path).name}: content is not the expected latent")
    return problems


def after_kill_problems(b: Broken, label: str, zygote: Zygote, *, journaled: bool = False) -> list[str]:
    """Run the second repair (no kill) after a killed one and judge the result. ``journaled``:
    the kill came after the journal recorded the run (every crash point does), so the journal
    must hold it as running: the resume check below is then never vacuous."""
    interrupted = running_run(b)
    problems = [] if interrupted is not None or not journaled else ["no run is marked running in the journal"]
    second = run(repair_argv(b), b.ds.root, zygote)
    if second.returncode != 0 or "Traceback" in second.stderr:
        problems.append(f"second repair exit {second.returncode}: {second.stdout[-800:]} {second.stderr[-800:]}")
    if interrupted is not None and f"resuming interrupted run {interrupted}" not in second.stdout:
        problems.append(
            f"the journal had run {interrupted} running, the second repair did not resume it: "
            f"{second.stdout.strip().splitlines()}"
        )
    runs = sorted(p.name for p in b.quarantine.iterdir()) if b.quarantine.is_dir() else []
    if len(runs) > 1 or (interrupted is not None and runs not in ([], [interrupted])):
        problems.append(f"quarantine run folders {runs}, expected one (the interrupted run {interrupted})")
    problems += repaired_problems(b, zygote)
    return [f"{label}: {p}" for p in problems]


def clone(template: Broken, root: Path) -> Broken:
    """A copy of ``template`` at ``root`` (``shutil.copytree``, the file times kept), the
    absolute paths in its multidatabackend.json and bucket metadata moved there: the same
    dataset and cache bytes as ``broken()`` builds, without encoding them again."""
    shutil.copytree(template.ds.root, root, symlinks=True)
    old, new = str(template.ds.root) + os.sep, str(root) + os.sep

    def moved(path: Path | str) -> Path:
        assert str(path).startswith(old), path
        return Path(new + str(path)[len(old) :])

    for path in [moved(template.ds.config), *moved(template.ds.data).glob("aspect_ratio_bucket_metadata_*.json")]:
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new))
    t = template.ds
    ds = Dataset(root, moved(t.config), moved(t.data), moved(t.vae), [moved(p) for p in t.images], None)
    b = Broken(
        ds,
        ds.source_bytes(),
        dict(template.healthy),
        dict(template.defective),
        {str(moved(p)): tensor for p, tensor in template.expected.items()},
        [str(moved(p)) for p in template.replaced],
        [str(moved(p)) for p in template.moved],
    )
    assert tree_bytes(ds.vae) == {**b.healthy, **b.defective}
    return b


def build_all(template: Broken, roots: list[Path]) -> list[Broken]:
    return [clone(template, root) for root in roots]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Broken:
    """The default ``broken()`` dataset, encoded once for the module; tests take copies."""
    return broken(tmp_path_factory.mktemp("template") / "ds")


WORKERS = max(2, min(4, os.cpu_count() or 2))


@pytest.fixture(scope="module")
def zygotes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[queue.Queue[Zygote]]:
    """``WORKERS`` fork servers (see ``faults_harness.Zygote``), one per thread that runs repairs."""
    folder = tmp_path_factory.mktemp("zygotes")
    pool: queue.Queue[Zygote] = queue.Queue()
    made = [Zygote(folder / str(i)) for i in range(WORKERS)]
    for z in made:
        pool.put(z)
    yield pool
    for z in made:
        z.close()


@contextlib.contextmanager
def borrowed(pool: queue.Queue[Zygote]) -> Iterator[Zygote]:
    z = pool.get()
    try:
        yield z
    finally:
        pool.put(z)


def test_a_full_run_passes_exactly_the_counted_crash_points(
    tmp_path: Path, template: Broken, zygotes: queue.Queue[Zygote]
) -> None:
    """The sweep below is only worth something if ``KILL_AT=k`` really stops the run for every
    k up to the count and the count is the whole run: k = N dies by SIGKILL (the last point is
    reached), k = N + 1 runs to the end and repairs everything (there is no point N + 1). The
    unkilled run is a fresh ``python -m cachedoctor``, start-up included."""
    last, beyond = build_all(template, [tmp_path / "last", tmp_path / "beyond"])
    assert last.crash_points == 25 >= 20
    with borrowed(zygotes) as z:
        killed = run(repair_argv(last), last.ds.root, z, CACHEDOCTOR_TEST_KILL_AT=str(last.crash_points))
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        whole = run(repair_argv(beyond), beyond.ds.root, CACHEDOCTOR_TEST_KILL_AT=str(beyond.crash_points + 1))
        assert whole.returncode == 0, whole.stdout + whole.stderr
        assert "done: 7 verified, 0 skipped, 0 blocked, 0 failed" in whole.stdout
        assert repaired_problems(beyond, z) == []
    runs = list(beyond.quarantine.iterdir())
    assert len(runs) == 1
    # the missing latent had no old file: the other six planted files are quarantined
    assert len([p for p in runs[0].rglob("*") if p.is_file() and p.name != ".records.jsonl"]) == 6


def test_sigkill_at_every_crash_point_then_repair_again(
    tmp_path: Path, template: Broken, zygotes: queue.Queue[Zygote]
) -> None:
    """SIGKILL at each of the N crash points of a full run (``CACHEDOCTOR_TEST_KILL_AT=k``,
    k = 1..N, each on a fresh copy of the dataset), then an unkilled repair: the first process
    must really die of SIGKILL, the second must resume the journal's run under its id (one
    quarantine folder), and the cache must end clean with nothing lost. All k are run (a few at
    a time) and every failure is reported, so one broken point does not hide another. The
    processes are forked from zygotes (torch imported once): the crash points all lie past
    start-up, which the random-time kills below cover with fresh interpreters."""
    n = template.crash_points
    cases = build_all(template, [tmp_path / f"k{k:02d}" for k in range(1, n + 1)])

    def one(k: int, b: Broken) -> list[str]:
        with borrowed(zygotes) as z:
            first = run(repair_argv(b), b.ds.root, z, CACHEDOCTOR_TEST_KILL_AT=str(k))
            if first.returncode != -signal.SIGKILL:
                return [f"k={k}: the first repair was not SIGKILLed: exit {first.returncode} {first.stderr[-500:]}"]
            alive = live_group(first.pid)
            left = [f"k={k}: still alive a second after the kill: {alive}"] if alive else []
            return left + after_kill_problems(b, f"k={k}", z, journaled=True)

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        problems = [p for ps in pool.map(one, range(1, n + 1), cases) for p in ps]
    assert problems == [], "\n".join(problems)


def test_sigkill_at_random_times_then_repair_again(
    tmp_path: Path, template: Broken, zygotes: queue.Queue[Zygote]
) -> None:
    """Four SIGKILLs sent from outside at seeded random instants between 0 and the measured
    duration of an unkilled run (whatever the process was doing: importing, scanning, writing
    the journal, encoding, renaming); a process that already finished is fine. Then the same
    judgement as for the deterministic points. The killed runs are fresh interpreters
    (``python -m cachedoctor``: a kill can land in start-up); the judging runs are forked.

    The instants are stratified (one uniform draw in each quarter of the run): most of a run is
    importing torch, and plain draws can all land there; the last quarter is scanning, acting
    and rescanning. (Every instant past start-up is also a deterministic crash point above.)"""
    kills = 4
    timing, *cases = build_all(template, [tmp_path / f"r{i}" for i in range(kills + 1)])
    started = time.monotonic()
    whole = run(repair_argv(timing), timing.ds.root)
    duration = time.monotonic() - started
    assert whole.returncode == 0, whole.stdout + whole.stderr
    rng = random.Random(20240607)
    problems = []
    with borrowed(zygotes) as z:
        for i, b in enumerate(cases):
            delay = duration * (i + rng.random()) / kills
            proc = subprocess.Popen(
                repair_argv(b),
                cwd=b.ds.root,
                env=child_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            time.sleep(delay)  # the random instant itself, not a wait for something
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)  # not reaped yet: the pid is still this child's
            out, err = proc.communicate(timeout=TIMEOUT_S)
            alive = live_group(proc.pid)  # its process group: every descendant (zombies are dead)
            if alive:
                problems.append(f"kill {i} at {delay:.2f}s: still alive a second later: {alive}")
            if proc.returncode not in (0, -signal.SIGKILL):
                problems.append(f"kill {i} at {delay:.2f}s: exit {proc.returncode} {out[-500:]} {err[-500:]}")
            problems += after_kill_problems(b, f"kill {i} at {delay:.2f}s of {duration:.2f}s", z)
    assert problems == [], "\n".join(problems)


def test_sigkill_between_a_batch_and_its_journal_record(
    tmp_path: Path, template: Broken, zygotes: queue.Queue[Zygote]
) -> None:
    """The window that batching opens: the three lossless rewrites are in place (their old
    bytes in the quarantine, the folder fsynced) but the journal's transaction for the batch
    never committed, so their rows still say ``planned``. The killed run left exactly that, and
    the next repair resumes the run, plans nothing for those files (the scan finds them healthy)
    and ends with everything ``repaired_problems`` checks."""
    b = clone(template, tmp_path / "ds")
    rewritten = b.replaced[2:5]  # the two cuda-tagged latents and the leaked view (``broken()``)
    with borrowed(zygotes) as z:
        first = run(repair_argv(b), b.ds.root, z, CACHEDOCTOR_TEST_KILL_AT_POINT="before-record")
        assert first.returncode == -signal.SIGKILL, first.stdout + first.stderr
        run_id = running_run(b)
        assert run_id is not None
        db = sqlite3.connect(f"file:{b.journal}?mode=ro", uri=True)
        try:
            states = dict(db.execute("SELECT path, state FROM items WHERE run_id = ?", (run_id,)).fetchall())
        finally:
            db.close()
        assert {p: states[p] for p in rewritten} == dict.fromkeys(rewritten, "planned")
        for p in rewritten:
            now = torch.load(p, weights_only=True)
            assert torch.equal(now, b.expected[p]) and now.untyped_storage().nbytes() == now.nbytes
        kept = quarantined(b)
        assert all(b.defective[os.path.relpath(p, b.ds.vae)] in kept for p in rewritten)
        problems = after_kill_problems(b, "before-record", z, journaled=True)
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("attempt", range(3))
def test_two_repairs_at_once(tmp_path: Path, attempt: int, template: Broken, zygotes: queue.Queue[Zygote]) -> None:
    """Two repairs started together on one cache: the per-file locks and the plan's
    precondition (a file changed since the scan is left alone) must keep them from writing one
    file twice or tearing it. Either may report leftovers of the other (exit 1), neither may
    crash, and the cache must end clean with every defective file's bytes in a quarantine.
    Forked from two zygotes, the two start within milliseconds of each other, and stay in
    step through the whole run (fresh interpreters drift apart by their import times)."""
    b = clone(template, tmp_path / "ds")
    with borrowed(zygotes) as z1, borrowed(zygotes) as z2:
        for z in (z1, z2):
            z.start(repair_argv(b), b.ds.root, child_env())
        done = [z.wait(TIMEOUT_S) for z in (z1, z2)]
        for proc in done:
            assert proc.returncode in (0, 1), proc.stdout + proc.stderr
            assert "Traceback" not in proc.stderr, proc.stderr
        assert torn(b) == []
        assert repaired_problems(b, z1) == []


# --- a full disk -----------------------------------------------------------------------------

ENOSPC_SITECUSTOMIZE = '''
"""Test-only: every write to a file named ``.cachedoctor-*`` fails with ENOSPC, as on a full disk.

cachedoctor writes cache content only through ``atomic.py``: ``tempfile.mkstemp`` then
``os.fdopen``; the file object ``os.fdopen`` returns for such a temp file is wrapped so that
``write`` raises. Nothing else (journal, quarantine links, lock files) is affected.
"""
import errno
import os

_fdopen = os.fdopen


class _Full:
    def __init__(self, f):
        self._f = f

    def write(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def fdopen(fd, *args, **kwargs):
    f = _fdopen(fd, *args, **kwargs)
    name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
    return _Full(f) if name.startswith(".cachedoctor-") and "w" in (args[0] if args else kwargs.get("mode", "r")) else f


os.fdopen = fdopen
'''


def full_disk_problems(b: Broken, proc: subprocess.CompletedProcess[str]) -> list[str]:
    """A repair stopped by ENOSPC: exit 2, one line ``cachedoctor: error: <path>: no space
    left ...`` naming a path in the cache, no traceback; everything healthy before is
    byte-identical, every defective file is in place byte-identical or in the quarantine, and
    no temp file is left."""
    problems = []
    lines = proc.stderr.strip().splitlines()
    if proc.returncode != 2:
        problems.append(f"exit {proc.returncode}, expected 2")
    if "Traceback" in proc.stderr or len(lines) != 1:
        problems.append(f"not a one-line message: {proc.stderr[-3000:]}")
    elif not lines[0].startswith("cachedoctor: error: ") or ": no space left" not in lines[0]:
        problems.append(f"not a clear message about the full disk: {lines[0]}")
    else:
        named = lines[0][len("cachedoctor: error: ") :].split(": no space left")[0]
        if not named.startswith(str(b.ds.vae) + os.sep):
            problems.append(f"the message names {named!r}, not a path in the cache")
    problems += untouched_problems(b)
    now, kept = tree_bytes(b.ds.vae), quarantined(b)
    lost = sorted(r for r, data in b.defective.items() if now.get(r) != data and data not in kept)
    if lost:
        problems.append(f"defective files neither in place nor in the quarantine: {lost}")
    if leftovers(b):
        problems.append(f"temp files left: {leftovers(b)}")
    return problems


def test_full_disk_injected_stops_cleanly_and_resumes(
    tmp_path: Path, template: Broken, zygotes: queue.Queue[Zygote]
) -> None:
    """ENOSPC on every write of new cache content (injected by a ``sitecustomize.py`` on the
    child's ``PYTHONPATH``, see ``ENOSPC_SITECUSTOMIZE``: only writes to ``.cachedoctor-*``
    temp files fail). The first action (the orphan, moved, no write) succeeds, the first
    replacement hits the full disk: the run stops as :func:`full_disk_problems` says. With
    space again, the same command resumes the run (the message promises so) and finishes."""
    b = clone(template, tmp_path / "ds")
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(textwrap.dedent(ENOSPC_SITECUSTOMIZE))
    full = run(repair_argv(b), b.ds.root, PYTHONPATH=str(inject))
    assert full_disk_problems(b, full) == []
    assert "it resumes" in full.stderr
    moved = [p for p in b.moved if not Path(p).exists()]
    assert moved == [str(b.ds.vae / ("0" * 64 + ".pt"))]  # the first action, in path order
    with borrowed(zygotes) as z:  # the injection is gone: a forked interpreter will do
        again = run(repair_argv(b), b.ds.root, z)
        assert again.returncode == 0, again.stdout + again.stderr
        run_ids = [p.name for p in b.quarantine.iterdir()]
        assert len(run_ids) == 1 and f"resuming interrupted run {run_ids[0]}" in again.stdout, again.stdout
        assert repaired_problems(b, z) == []


@contextlib.contextmanager
def tmpfs_over(folder: Path, size_kb: int) -> Iterator[None]:
    """Mount a ``size_kb`` tmpfs over ``folder`` keeping its files (copied in); skip when this
    machine does not let us mount. Unmounted afterwards, the files copied back (so pytest can
    clean up and the folder reads as before)."""
    aside = folder.with_name(folder.name + "-aside")
    shutil.copytree(folder, aside)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        shutil.rmtree(aside)
        pytest.skip(f"cannot mount a tmpfs here (needs root and mount rights): {mounted.stderr.strip()}")
    try:
        shutil.copytree(aside, folder, dirs_exist_ok=True)
        yield
    finally:
        inside = folder.with_name(folder.name + "-inside")
        shutil.copytree(folder, inside)
        subprocess.run(["umount", str(folder)], check=True)
        shutil.rmtree(folder)
        inside.rename(folder)
        shutil.rmtree(aside)


def test_full_tmpfs_stops_cleanly(tmp_path: Path, template: Broken, zygotes: queue.Queue[Zygote]) -> None:
    """A real full file system (tmpfs at 100%): the repair journal is the first thing written,
    and SQLite reports the full disk for it. The run must stop with the same one-line message,
    exit 2 and nothing changed; once space is freed the same command repairs everything."""
    b = clone(template, tmp_path / "ds")
    with tmpfs_over(b.ds.vae, 512), borrowed(zygotes) as z:
        filler = fill(b.ds.vae, 0)
        full = run(repair_argv(b), b.ds.root, z)
        filler.unlink()
        assert full_disk_problems(b, full) == []
        again = run(repair_argv(b), b.ds.root, z)
        assert again.returncode == 0, again.stdout + again.stderr
        assert repaired_problems(b, z) == []


def test_tmpfs_filling_up_mid_run_stops_cleanly(tmp_path: Path, zygotes: queue.Queue[Zygote]) -> None:
    """A real file system with room for the journal and the quarantine records but not for one
    new latent (float32 latents of 1280x1280 images: 300 KiB; 160 KiB free): the orphan is
    moved (no space needed), then the first rewrite's temp file hits ENOSPC. Same judgement."""
    b = broken(tmp_path / "ds", n=5, leak=False, dtype="float32", size=(1280, 1280), target=(1280, 1280))
    assert min(len(data) for data in b.healthy.values()) > 300 * 1024  # so a new one cannot fit in 160 KiB
    with tmpfs_over(b.ds.vae, 4096), borrowed(zygotes) as z:
        filler = fill(b.ds.vae, 160)
        full = run(repair_argv(b), b.ds.root, z)
        problems = full_disk_problems(b, full)
        filler.unlink()
        assert problems == [], full.stderr
        assert not (b.ds.vae / ("0" * 64 + ".pt")).exists(), full.stderr  # moved before the disk was found full
        again = run(repair_argv(b), b.ds.root, z)
        assert again.returncode == 0, again.stdout + again.stderr
        assert repaired_problems(b, z) == []


def test_enospc_sitecustomize_is_what_it_says(tmp_path: Path) -> None:
    """The injection itself: under it, writing a ``.cachedoctor-*`` temp file fails with
    ENOSPC and any other file writes normally (so the tests above fail cache writes only)."""
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(textwrap.dedent(ENOSPC_SITECUSTOMIZE))
    code = textwrap.dedent(f"""
        import errno, os, tempfile
        fd, _ = tempfile.mkstemp(prefix=".cachedoctor-x-", suffix=".tmp", dir={str(tmp_path)!r})
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(b"x")
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        else:
            raise SystemExit("no ENOSPC")
        fd, other = tempfile.mkstemp(prefix="other-", dir={str(tmp_path)!r})
        with os.fdopen(fd, "wb") as out:
            out.write(b"y")
        assert open(other, "rb").read() == b"y"
    """)
    proc = run([sys.executable, "-c", code], tmp_path, PYTHONPATH=str(inject))
    assert proc.returncode == 0, proc.stderr


def test_zygote_children_are_what_it_says(tmp_path: Path) -> None:
    """The fork server itself: a child runs ``-m MODULE ARGS`` in the requested folder with
    exactly the requested environment, in a session of its own, its output captured; its exit
    code comes back, and a SIGKILL comes back as ``-SIGKILL`` (what the sweep asserts)."""
    (tmp_path / "probe.py").write_text(
        textwrap.dedent("""
        import os, signal, sys
        print(os.getcwd(), os.environ.get("PROBE"), "OTHER" in os.environ, os.getsid(0) == os.getpid(), sys.argv[1:], flush=True)
        print("to stderr", file=sys.stderr)
        if sys.argv[1] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        sys.exit(int(sys.argv[1]))
    """)
    )
    z = Zygote(tmp_path / "z", preload=())
    try:
        done = z.run([sys.executable, "-m", "probe", "3"], tmp_path, {"PROBE": "yes"})
        assert done.returncode == 3, done.stderr
        assert done.stdout == f"{tmp_path} yes False True ['3']\n" and done.stderr == "to stderr\n"
        killed = z.run([sys.executable, "-m", "probe", "kill"], tmp_path, {"PROBE": "no"})
        assert killed.returncode == -signal.SIGKILL and killed.stdout.startswith(f"{tmp_path} no False True")
        assert live_group(killed.pid) == []
    finally:
        z.close()
