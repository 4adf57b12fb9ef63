"""The fault-injection harness: small real file systems, injected write errors, process checks.

* :func:`tmpfs` mounts a real tmpfs of a given size (skipping, with the reason, where this
  machine does not let us mount) and :func:`fill` fills it to leave an exact amount free.
* :data:`INJECT_SITECUSTOMIZE` is a ``sitecustomize.py`` for a child process: it counts every
  write call on a path under ``CACHEDOCTOR_FAULT_ROOT`` (``open`` for writing, ``os.open`` with a
  write flag, writes through ``os.fdopen``, ``os.replace``/``rename``/``link``/``mkdir``,
  ``fsync``, ``utime``, and every SQLite statement that writes) and makes the
  ``CACHEDOCTOR_FAULT_AT``-th fail with ``CACHEDOCTOR_FAULT_ERRNO`` (ENOSPC or EIO; SQLite gets
  ``SQLITE_FULL`` or ``SQLITE_IOERR``). With ``CACHEDOCTOR_FAULT_COUNT=FILE`` it fails nothing
  and writes, at exit, one line per call naming its call site (the innermost cachedoctor
  ``file:line``), so a test can plant a fault at the first call of every site.
  This is the OS/SQLite boundary, not the code under test: cachedoctor runs unchanged.
* :func:`live_group` lists the processes of a killed run's process group that are still
  alive (zombies are dead: they only wait for their new parent to reap them).
* :class:`Zygote` is a fork server: one interpreter imports torch and cachedoctor's CLI once,
  then forks a fresh child (its own session, its own stdout/stderr files) per
  ``python -m cachedoctor ...`` run. A crash test can then SIGKILL dozens of real repairs for
  the price of their work, not of dozens of torch imports (about 2 s of CPU each).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

INJECT_SITECUSTOMIZE = r'''
import atexit, builtins, errno, os, sqlite3, sys

_root = os.environ.get("CACHEDOCTOR_FAULT_ROOT", "/nonexistent")
_at = int(os.environ.get("CACHEDOCTOR_FAULT_AT", "0") or 0)
_errno = getattr(errno, os.environ.get("CACHEDOCTOR_FAULT_ERRNO", "ENOSPC"))
_count_file = os.environ.get("CACHEDOCTOR_FAULT_COUNT")
_n = [0]
_pid = os.getpid()


def _ours(path):
    try:
        return os.path.abspath(os.fsdecode(path)).startswith(_root)
    except (TypeError, ValueError):
        return False


_where = []


def _caller():
    """The innermost cachedoctor line on the stack: the call site."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if "/cachedoctor/" in name:
            return f"{name.rsplit('/cachedoctor/', 1)[1]}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


def _site(*paths):
    """Count one write call; raise the planted error when it is the chosen one."""
    if os.getpid() != _pid or not any(_ours(p) for p in paths if isinstance(p, (str, bytes, os.PathLike))):
        return
    _n[0] += 1
    if _count_file:
        _where.append(_caller())
    if _n[0] == _at:
        raise OSError(_errno, os.strerror(_errno), os.fsdecode(paths[0]))


if _count_file:
    atexit.register(lambda: os.getpid() == _pid and _open(_count_file, "w").write("\n".join(_where)))

_open = builtins.open
def open(file, mode="r", *args, **kwargs):
    if isinstance(file, (str, bytes, os.PathLike)) and any(c in mode for c in "wax+"):
        _site(file)
    return _open(file, mode, *args, **kwargs)
builtins.open = open

_os_open = os.open
def os_open(path, flags, *args, **kwargs):
    if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
        _site(path)
    return _os_open(path, flags, *args, **kwargs)
os.open = os_open


def _wrap2(name):
    real = getattr(os, name)
    def call(src, dst, *args, **kwargs):
        _site(dst, src)
        return real(src, dst, *args, **kwargs)
    setattr(os, name, call)
for _name in ("replace", "rename", "link"):
    _wrap2(_name)


def _wrap1(name):
    real = getattr(os, name)
    def call(path, *args, **kwargs):
        _site(path)
        return real(path, *args, **kwargs)
    setattr(os, name, call)
for _name in ("mkdir", "utime"):
    _wrap1(_name)


def _fd_path(fd):
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


_fsync = os.fsync
def fsync(fd):
    _site(_fd_path(fd if isinstance(fd, int) else fd.fileno()))
    return _fsync(fd)
os.fsync = fsync


class _Writer:
    def __init__(self, f, path):
        self._f, self._path = f, path
    def write(self, data):
        _site(self._path)
        return self._f.write(data)
    def __getattr__(self, name):
        return getattr(self._f, name)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        self._f.close()


_fdopen = os.fdopen
def fdopen(fd, *args, **kwargs):
    f = _fdopen(fd, *args, **kwargs)
    mode = args[0] if args else kwargs.get("mode", "r")
    return _Writer(f, _fd_path(fd)) if any(c in mode for c in "wax+") else f
os.fdopen = fdopen

_READS = ("SELECT", "WITH", "PRAGMA BUSY", "PRAGMA SYNCHRONOUS")


class _Connection(sqlite3.Connection):
    def __init__(self, database, *args, **kwargs):
        super().__init__(database, *args, **kwargs)
        self._path = os.fsdecode(database).split("?")[0].removeprefix("file:")
    def _check(self, sql):
        if sql.lstrip().upper().startswith(_READS):
            return
        try:
            _site(self._path)
        except OSError:
            full = _errno in (errno.ENOSPC, errno.EDQUOT)
            exc = sqlite3.OperationalError("database or disk is full" if full else "disk I/O error")
            exc.sqlite_errorcode = 13 if full else 10
            raise exc from None
    def execute(self, sql, *args):
        self._check(sql)
        return super().execute(sql, *args)
    def executemany(self, sql, *args):
        self._check(sql)
        return super().executemany(sql, *args)
    def executescript(self, sql):
        self._check(sql)
        return super().executescript(sql)
    def commit(self):
        if self.in_transaction:
            self._check("COMMIT")
        return super().commit()
    def __exit__(self, kind, *rest):
        if kind is None and self.in_transaction:
            self._check("COMMIT")
        return super().__exit__(kind, *rest)


_connect = sqlite3.connect
def connect(database, *args, **kwargs):
    kwargs.setdefault("factory", _Connection)
    return _connect(database, *args, **kwargs)
sqlite3.connect = connect
'''


def inject_dir(tmp: Path) -> Path:
    """A folder holding the injecting ``sitecustomize.py``, for a child's ``PYTHONPATH``."""
    folder = tmp / "inject"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(INJECT_SITECUSTOMIZE)
    return folder


@contextlib.contextmanager
def tmpfs(folder: Path, size_kb: int) -> Iterator[Path]:
    """A real ``size_kb`` tmpfs mounted at ``folder`` (created empty); unmounted afterwards.
    Skips the test, saying why, where this machine does not let us mount."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root and mount rights): {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def fill(folder: Path, leave_kb: int) -> Path:
    """Fill the file system of ``folder`` until exactly ``leave_kb`` KiB are free."""
    filler = folder / "filler.bin"
    with open(filler, "wb", buffering=0) as out:  # unbuffered: nothing left to flush at close
        with contextlib.suppress(OSError):
            while True:
                out.write(b"\0" * 4096)
        assert os.statvfs(folder).f_bavail == 0
        out.truncate(max(0, filler.stat().st_size - leave_kb * 1024))
    return filler


def _stat(pid: str) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def live_group(pgid: int, wait_s: float = 1.0) -> list[str]:
    """Processes of process group ``pgid`` still alive (not zombies) once ``wait_s`` has passed
    (returns as soon as none is: this is a deadline, not a timing assertion)."""
    deadline = time.monotonic() + wait_s
    while True:
        alive = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            fields = _stat(pid)
            if fields is not None and int(fields[2]) == pgid and fields[0] != "Z":
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:200] if _stat(pid) else b""
                alive.append(f"{pid} {fields[0]} {cmd.decode(errors='replace')}")
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.02)


def one_line_error(stderr: str) -> str | None:
    """The single ``cachedoctor: error: ...`` line, or ``None`` when stderr is anything else."""
    lines = stderr.strip().splitlines()
    if len(lines) != 1 or "Traceback" in stderr or not lines[0].startswith("cachedoctor: error: "):
        return None
    return lines[0][len("cachedoctor: error: ") :]


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes), the ``.cachedoctor`` folder and lock
    files aside, following symlinked folders."""
    out = {}
    for folder, dirs, names in os.walk(root, followlinks=True):  # a symlinked folder is part of the cache
        dirs[:] = sorted(d for d in dirs if d != ".cachedoctor")
        for name in sorted(names):
            if name.startswith(".") and name.endswith(".lock"):
                continue  # repair's lock files stay by design (locks.py)
            path = Path(folder, name)
            out[str(path.relative_to(root))] = path.read_bytes()
    return out


def quarantined(root: Path) -> list[bytes]:
    """The bytes of every file in every quarantine run under ``root`` (temp files and records aside)."""
    q = root / ".cachedoctor" / "quarantine"
    return (
        [
            p.read_bytes()
            for p in q.rglob("*")
            if p.is_file()
            and p.name != ".records.jsonl"
            and not (p.name.startswith(".cachedoctor-") and p.name.endswith(".tmp"))
        ]
        if q.is_dir()
        else []
    )


def lost(before: dict[str, bytes], root: Path) -> list[str]:
    """Files of ``before`` whose bytes are now neither at their place nor in the quarantine."""
    now, kept = tree(root), quarantined(root)
    return sorted(r for r, data in before.items() if now.get(r) != data and data not in kept)


# --- a fork server: real processes without paying for torch's import each time ------------------

ZYGOTE = r'''
"""Import the heavy modules once, then fork one child per request (one at a time).

Request (a JSON line on stdin): argv (after ``python``, e.g. ["-m", "cachedoctor", "repair", ...]),
cwd, env, stdout, stderr (files). Replies (JSON lines): {"pid": ...} once forked, then
{"returncode": ...} once reaped (negative: killed by that signal, as ``subprocess`` says).
This process runs nothing else, so every child starts from a freshly imported interpreter."""
import json, os, runpy, sys, traceback

for name in sys.argv[1:]:
    __import__(name)
requests = os.fdopen(os.dup(0), "rb", buffering=0)
replies = os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_RDONLY)


def child(req):
    code = 1
    try:
        os.setsid()  # its own process group, as Popen(start_new_session=True)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        os.dup2(null, 0)
        for fd, path in ((1, req["stdout"]), (2, req["stderr"])):
            out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(out, fd)
            os.close(out)
        requests.close()
        replies.close()
        argv = req["argv"]
        assert argv[0] == "-m", argv  # python -m MODULE ARGS
        sys.argv = [argv[1], *argv[2:]]
        try:
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:  # what the interpreter does with it
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        os._exit(code)


while True:
    line = requests.readline()
    if not line:
        break
    req = json.loads(line)
    replies.flush()
    pid = os.fork()
    if pid == 0:
        child(req)
    replies.write(json.dumps({"pid": pid}) + "\n")
    replies.flush()
    _, status = os.waitpid(pid, 0)
    replies.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
    replies.flush()
'''


class Forked(subprocess.CompletedProcess):  # type: ignore[type-arg]
    pid: int


class Zygote:
    """A fork server (:data:`ZYGOTE`): ``run([python, "-m", "cachedoctor", ...])`` is a real
    process in a session of its own, as ``Popen(start_new_session=True)`` makes, forked from an
    interpreter that has only imported ``preload`` (torch's import, seconds of CPU, is paid
    once). Every child is a fresh copy of that interpreter: nothing ran in it before the fork.
    What it cannot do: change what the interpreter loads at start-up (``PYTHONPATH``,
    ``sitecustomize``), or kill a run while it imports the preloaded modules; use real
    ``Popen`` for those. One run at a time per zygote."""

    def __init__(
        self,
        folder: Path,
        preload: tuple[str, ...] = ("torch", "cachedoctor.cli", "cachedoctor.cli.scan", "cachedoctor.cli.repair"),
    ) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ZYGOTE, *preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=(folder / "zygote.err").open("wb"),
        )
        self._buffer = b""
        self._runs = 0

    def _reply(self, timeout: float) -> dict:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError(f"no reply from the zygote in {timeout} s")
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError(f"the zygote died: {(self.folder / 'zygote.err').read_text()[-3000:]}")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def start(self, argv: list[str], cwd: Path, env: dict[str, str]) -> int:
        """Fork a child running ``argv`` (``[sys.executable, "-m", module, *args]``); its pid."""
        assert argv[0] == sys.executable and argv[1] == "-m", argv
        self._runs += 1
        self._out = self.folder / f"{self._runs}.out", self.folder / f"{self._runs}.err"
        request = {
            "argv": argv[1:],
            "cwd": str(cwd),
            "env": env,
            "stdout": str(self._out[0]),
            "stderr": str(self._out[1]),
        }
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        self._pid = int(self._reply(120)["pid"])
        return self._pid

    def wait(self, timeout: float) -> Forked:
        """Wait for the child :meth:`start` forked; SIGKILL its group past ``timeout``."""
        try:
            code = int(self._reply(timeout)["returncode"])
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._pid, signal.SIGKILL)
            raise
        out, err = (p.read_text(errors="replace") for p in self._out)
        for p in self._out:
            p.unlink()
        done = Forked([], code, out, err)
        done.pid = self._pid
        return done

    def run(self, argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 180) -> Forked:
        self.start(argv, cwd, env)
        return self.wait(timeout)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
