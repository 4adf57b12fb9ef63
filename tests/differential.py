"""The oracle of the differential fuzz test: what the real loaders do with a file, watched from a
sandbox, never in the process that asks.

The rule (what "dangerous" means). A mutant is dangerous when, under any of the loaders a trainer
uses (``torch.load(path, weights_only=False)``, ``pickle.load``, ``np.load(path,
allow_pickle=True)`` with every member of an npz read, gunzip then ``torch.load``):

- the unpickler was handed a global outside the benign set: the union of what the unmutated
  healthy seeds (real ``torch.save``, ``np.savez``, legacy torch, plain pickles) reach under the
  same loaders, measured at run time, not guessed. A global counts when ``find_class`` returned it,
  whether or not the load then finished: ``find_class`` has imported the module it names by then
  (a module's import is its code running), and a load that raises later may already have called
  it. This is stricter than "a loader opened it and it reached a global": a truncated pickle is
  held to account too, when its name is a cache file's (``.pt``, ``.npz``...: a trainer loads it
  by that name; a ``notes.txt`` that every loader fails on is loaded by no trainer, and the scanner
  only recognises a pickle under a foreign name when it walks whole or reaches a call). A name whose import or lookup fails is not reached. It is named by what
  it resolved to (``module.qualname``), so ``__builtin__.set`` read at protocol 2 is
  ``builtins.set``, as the unpickler maps it, and at protocol 3 nothing (no such module); or
- numpy handed an array's bytes to the unpickler (an object dtype), whatever they then held.

For every dangerous mutant the scan, quick and deep, must report ``unsafe-pickle``. The converse
is reported, not asserted: the scanner fails closed, so a file that no loader runs may rightly be
``unsafe-pickle`` (a pickle member no installed loader picks, a Python 2 module name at protocol
3 that only a planted module would satisfy).

How it is watched. One child imports torch and numpy once, then forks workers, each under
``RLIMIT_AS``, with its working directory in a sandbox, which run the loaders file by file, each
load under its own ``RLIMIT_CPU`` and alarm; after a kill (a bomb, a crash), a fresh worker goes
on with the next load. A worker is retired after ``TASKS_PER_WORKER`` loads, so whatever a
payload changed in it does not outlive a few files. The C unpickler is subclassed only to record
what ``find_class`` returns (the parsing is unchanged); ``pickle.Unpickler`` and ``pickle.load``
are replaced by it, which torch's ``UnpicklerWrapper`` (built from ``pickle_module.Unpickler`` at
each call) and numpy's ``pickle.load`` then use. A ``sys.addaudithook`` hook on CPython's
``pickle.find_class`` event catches any unpickler that would bypass the subclass: such a name
counts as reached, unresolved. numpy's object-array path is seen by replacing the ``pickle`` its
format module calls. Every event is written to a pipe as it happens, so a worker killed mid-load
still reports what it reached. The payload marker (the exploit seeds' ``touch``) is recorded
too, for the report.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

LOADERS = ("torch_unsafe", "pickle", "numpy", "gunzip_torch")
#: Per load: CPU seconds and wall seconds; per worker: address space above the child's own.
CPU_S, WALL_S, EXTRA_AS = 4, 8, 2 << 30
TASKS_PER_WORKER = 80


@dataclass
class Outcome:
    """What the loaders did with one file."""

    opened: dict[str, bool] = field(default_factory=dict)  # loader -> returned without error
    errors: dict[str, str] = field(default_factory=dict)
    reached: dict[str, set[str]] = field(default_factory=dict)  # loader -> globals handed out
    object_arrays: set[str] = field(default_factory=set)  # loaders that unpickled an array
    payload_ran: set[str] = field(default_factory=set)
    audited: int = 0  # find_class calls the audit hook saw (the recorder's cross-check)

    def globals(self) -> set[str]:
        return set().union(*self.reached.values()) if self.reached else set()

    def new(self, benign: set[str]) -> dict[str, list[str]]:
        """Per loader, the globals outside ``benign`` and ``object-array``: empty when benign."""
        out = {loader: sorted(names - benign) for loader, names in self.reached.items() if names - benign}
        for loader in self.object_arrays:
            out.setdefault(loader, []).append("object-array")
        return out

    @classmethod
    def from_events(cls, events: list[dict]) -> Outcome:
        out = cls()
        attempts, audits = Counter(), Counter()
        for e in events:
            loader = e.get("l", "?")
            if e["e"] == "attempt":
                attempts[(e["m"], e["n"])] += 1
            elif e["e"] == "audit":
                audits[(e["m"], e["n"], loader)] += 1
                out.audited += 1
            elif e["e"] == "global":
                out.reached.setdefault(loader, set()).add(e["r"])
            elif e["e"] == "object-array":
                out.object_arrays.add(loader)
            elif e["e"] == "ran":
                out.payload_ran.add(loader)
            elif e["e"] == "done":
                out.opened[loader] = e["ok"]
                if not e["ok"]:
                    out.errors[loader] = e["err"]
        for (module, name, loader), count in audits.items():
            if count > attempts[(module, name)]:  # an unpickler that bypassed the recorder
                out.reached.setdefault(loader, set()).add(f"{module}.{name} (unrecorded)")
        return out


# --- the sandbox child -------------------------------------------------------------------------

_SINK = [-1]
_FILE, _LOADER = ["?"], ["?"]


def _emit(**event: object) -> None:
    if _SINK[0] >= 0:
        os.write(_SINK[0], (json.dumps({**event, "f": _FILE[0], "l": _LOADER[0]}, default=str) + "\n").encode())


def _canonical(obj: object, module: str, name: str) -> str:
    mod, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if isinstance(mod, str) and isinstance(qual, str) and (isinstance(obj, type) or callable(obj)):
        return f"{mod}.{qual}"
    return f"{module}.{name}"


def _install_recorders() -> None:
    import _pickle
    import io
    import pickle

    import numpy.lib.format as npy_format

    class Recording(_pickle.Unpickler):  # type: ignore[misc]
        def find_class(self, module: str, name: str) -> object:
            _emit(e="attempt", m=module, n=name)
            obj = super().find_class(module, name)
            _emit(e="global", m=module, n=name, r=_canonical(obj, module, name))
            return obj

    def load(file: object, **kwargs: object) -> object:
        return Recording(file, **kwargs).load()

    def loads(data: bytes, /, **kwargs: object) -> object:
        return Recording(io.BytesIO(data), **kwargs).load()

    pickle.Unpickler, pickle.load, pickle.loads = Recording, load, loads  # type: ignore[misc]

    class ObjectArrays:
        """numpy's format module's ``pickle``: its ``load`` is reached only for object dtypes."""

        def __getattr__(self, attr: str) -> object:
            return getattr(pickle, attr)

        def load(self, fp: object, **kwargs: object) -> object:
            _emit(e="object-array")
            return load(fp, **kwargs)

    fmt = sys.modules.get("numpy.lib._format_impl", npy_format)
    fmt.pickle = ObjectArrays()  # type: ignore[attr-defined]

    def audit(event: str, args: tuple) -> None:
        if event == "pickle.find_class":
            _emit(e="audit", m=str(args[0]), n=str(args[1]))

    sys.addaudithook(audit)


def _load(loader: str, path: str) -> None:
    import gzip
    import io
    import pickle

    import numpy as np
    import torch

    if loader == "torch_unsafe":
        torch.load(path, weights_only=False)
    elif loader == "pickle":
        with open(path, "rb") as f:
            pickle.load(f)
    elif loader == "numpy":
        loaded = np.load(path, allow_pickle=True)
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded:
                for key in loaded.files:
                    loaded[key]
    else:
        with open(path, "rb") as f:
            raw = gzip.decompress(f.read())
        torch.load(io.BytesIO(raw), weights_only=False)


def _worker(tasks: list[tuple[str, str, str]], marker: str, sandbox: str, sink: int) -> None:
    """Run ``(key, path, loader)`` tasks in this forked process, each under its own CPU limit
    and alarm, writing every event to ``sink``; the parent starts another after a kill."""
    import resource
    import signal
    import time
    import warnings

    _SINK[0] = sink
    try:
        status = Path("/proc/self/status").read_text().splitlines()
        size = next(int(line.split()[1]) for line in status if line.startswith("VmSize:")) << 10
        resource.setrlimit(resource.RLIMIT_AS, (size + EXTRA_AS, size + EXTRA_AS))
        os.chdir(sandbox)
        warnings.simplefilter("ignore")
        for key, path, loader in tasks:
            _FILE[0], _LOADER[0] = key, loader
            used = resource.getrusage(resource.RUSAGE_SELF)
            cpu = int(used.ru_utime + used.ru_stime) + CPU_S
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, resource.getrlimit(resource.RLIMIT_CPU)[1]))
            signal.alarm(WALL_S)
            began = time.monotonic()
            try:
                _load(loader, path)
                _emit(e="done", ok=True, s=time.monotonic() - began)
            except BaseException as exc:  # the loaders raise anything: that is what is recorded
                _emit(e="done", ok=False, err=f"{type(exc).__name__}: {exc}"[:200], s=time.monotonic() - began)
            signal.alarm(0)
            if os.path.exists(marker):
                _emit(e="ran")
                os.remove(marker)
    finally:
        os._exit(0)


def observe(paths: dict[str, str], marker: str, sandbox: str) -> dict[str, list[dict]]:
    """Every loader on every file, in forked workers of ``TASKS_PER_WORKER`` tasks each (a fork
    of a process holding torch costs 20-40 ms, a load a few); the events, per file."""
    tasks = [(key, path, loader) for key, path in paths.items() for loader in LOADERS]
    events: dict[str, list[dict]] = {key: [] for key in paths}
    pos = 0
    while pos < len(tasks):
        chunk = tasks[pos : pos + TASKS_PER_WORKER]
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            _worker(chunk, marker, sandbox, write)
        os.close(write)
        data = []
        while block := os.read(read, 1 << 16):
            data.append(block)
        os.close(read)
        _, status = os.waitpid(pid, 0)
        done = 0
        for line in b"".join(data).decode().splitlines():
            event = json.loads(line)
            events[event["f"]].append(event)
            done += event["e"] == "done"
        if done < len(chunk):  # killed in the middle of a task: recorded, then the next one
            key, _, loader = chunk[done]
            events[key].append({"e": "done", "f": key, "l": loader, "ok": False, "err": f"killed: status {status}"})
            done += 1
        pos += done
    return events


def oracle_main(plan_file: str, out_file: str, marker: str, sandbox: str) -> None:
    """The child: ``plan_file`` holds ``{id: path}``; writes ``{id: events}`` to ``out_file``."""
    import warnings

    warnings.simplefilter("ignore")
    import numpy  # noqa: F401  (imported once, before the forks)
    import torch  # noqa: F401

    _install_recorders()
    with open(plan_file) as f:
        plan = json.load(f)
    result = observe(plan, marker, sandbox)
    with open(out_file, "w") as f:
        json.dump(result, f)


def run_oracle(paths: dict[str, str], marker: str, sandbox: str, workdir: str, timeout: float) -> dict[str, Outcome]:
    """Start the sandbox child on ``paths`` (``{id: path}``) and read its outcomes."""
    import subprocess

    plan, out = os.path.join(workdir, "oracle-plan.json"), os.path.join(workdir, "oracle-out.json")
    with open(plan, "w") as f:
        json.dump(paths, f)
    proc = subprocess.run(
        [sys.executable, __file__, "--oracle", plan, out, marker, sandbox],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=sandbox,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the oracle child failed ({proc.returncode}): {proc.stderr[-3000:]}")
    with open(out) as f:
        return {key: Outcome.from_events(events) for key, events in json.load(f).items()}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--oracle"]:
        oracle_main(*sys.argv[2:6])
    else:  # `make fuzz`: the campaign, with the checkout's root importable (fixtures.builders)
        sys.path.append(str(Path(__file__).resolve().parent.parent))
        from fuzz_campaign import main

        sys.exit(main(sys.argv[1:]))
