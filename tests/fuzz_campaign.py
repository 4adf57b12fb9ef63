"""The differential fuzz campaign: seeds, mutants, the oracle (``differential.py``) and the scan,
compared. ``make fuzz`` runs :func:`main`; ``tests/unit/formats/test_differential_fuzz.py`` runs
a small seeded campaign in the suite.

Seeds: healthy caches as trainers write them (the exploit corpus's clean cases, plus a default
``torch.save`` zip, legacy torch, gzip'd torch, ``np.savez``/``savez_compressed``, ``np.save``,
plain pickles) and dangerous ones (two of each technique of ``exploits.build_corpus`` that a
loader runs, and object arrays inside an npz and inside a torch zip). Each mutant ``i`` of a
campaign is drawn from ``random.Random(f"{seed}:{i}")`` and the seed files alone, so one can be
rebuilt on its own. The seeds are the same from run to run but for legacy torch files, whose
storage keys are memory addresses: ``make fuzz`` keeps each failing mutant as a file.
The scan runs once per batch on a folder of mutants, quick and deep, in a child process.
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import os
import pickle
import random
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from differential import Outcome, run_oracle
from exploits import REPO, Reduce, build_corpus, gz, legacy_bytes, npy_of, npz_of, write_zip, zip_members
from factories import PWNED_MARKER, latent, pt_bytes
from fuzz_mutations import Pool, mutant

from cachedoctor.cachenames import claims_cache

#: Names no healthy cache may reach: a benign set holding one of them means the oracle is wrong.
NEVER_BENIGN = ("os.", "posix.", "subprocess.", "sys.", "builtins.eval", "builtins.exec", "builtins.getattr")


@dataclass(frozen=True)
class Seed:
    id: str
    filename: str
    data: bytes
    dangerous: bool


@dataclass(frozen=True)
class Mutant:
    index: int
    seed: Seed
    chain: str
    data: bytes

    @property
    def name(self) -> str:
        return f"{self.index:05d}-{self.seed.filename}"


def seeds(marker: Path) -> list[Seed]:
    corpus = build_corpus(marker)
    out = [Seed(c.id, c.filename, c.data, False) for c in corpus if c.expect == "clean"]
    extra_npz, npy_buf = io.BytesIO(), io.BytesIO()
    arrays = {
        "latents": np.random.default_rng(0).standard_normal((4, 8, 8)).astype(np.float32),
        "size": np.array([8, 8]),
    }
    np.savez_compressed(extra_npz, **arrays)
    np.save(npy_buf, arrays["latents"])
    torch_zip = pt_bytes({"latent": latent()})
    healthy = {"latent_shape": [4, 8, 8], "meta": collections.OrderedDict(a=1, b=(2.5, "x")), "buckets": {1, 2}}
    out += [
        Seed("torch-zip", "latent.pt", torch_zip, False),
        Seed("torch-legacy", "old.pt", legacy_bytes({"latent": latent()}), False),
        Seed("torch-gzip-legacy", "latent.pt", gz(legacy_bytes({"latent": latent()})), False),
        Seed("npz-compressed", "latent.npz", extra_npz.getvalue(), False),
        Seed("npy-float", "latent.npy", npy_buf.getvalue(), False),
        Seed("npy-int", "size.npy", npy_of(np.array([[512, 512]], dtype=np.int64)), False),
        Seed("pickle-p2", "meta.pt", pickle.dumps(healthy, protocol=2), False),
        Seed("pickle-p4", "meta.pt", pickle.dumps(healthy, protocol=4), False),
    ]
    per_technique: collections.Counter[str] = collections.Counter()
    for c in corpus:
        if c.expect == "unsafe" and c.loader is not None and per_technique[c.technique] < 2:
            per_technique[c.technique] += 1
            out.append(Seed(c.id, c.filename, c.data, True))
    evil = np.array([Reduce(os.system, f"touch {marker}"), 1], dtype=object)
    evil_npy = npy_of(evil)
    fine = npy_of(np.zeros((4, 8, 8), np.float32))
    buf = io.BytesIO()
    np.savez_compressed(buf, latents=evil, size=np.array([8, 8]))
    out += [
        Seed("npy-object-array", "latent.npy", evil_npy, True),
        Seed("npz-object-array", "latent.npz", npz_of({"latents.npy": evil_npy, "size.npy": fine}), True),
        Seed("npz-compressed-object-array", "latent.npz", buf.getvalue(), True),
        # A harmless data.pkl beside an object-array member: np.load reads the zip as an npz.
        Seed(
            "torch-zip-object-npy-member",
            "latent.pt",
            write_zip([*zip_members(torch_zip), ("archive/latents.npy", evil_npy)]),
            True,
        ),
    ]
    return out


def donor_pool(all_seeds: list[Seed]) -> Pool:
    pool: Pool = []
    for s in all_seeds:
        if s.data[:2] == b"PK":
            try:
                pool += [(n, d) for n, d in zip_members(s.data) if n.endswith((".npy", ".pkl"))]
            except Exception:
                pass
        elif s.data[:6] == b"\x93NUMPY" or s.data[:1] == b"\x80":
            pool.append((s.filename, s.data))
    return pool


def mutants(all_seeds: list[Seed], n: int, seed: int, start: int = 0) -> list[Mutant]:
    pool = donor_pool(all_seeds)
    healthy = [s for s in all_seeds if not s.dangerous]
    dangerous = [s for s in all_seeds if s.dangerous]
    out = []
    for i in range(start, start + n):
        rng = random.Random(f"{seed}:{i}")
        for _ in range(20):  # a seed no mutator applies to: draw again
            base = rng.choice(healthy if rng.random() < 0.5 else dangerous)
            made = mutant(rng, base.data, pool, steps=rng.choice([1, 1, 1, 2]))
            if made is not None:
                out.append(Mutant(i, base, made[1], made[0]))
                break
    return out


JUDGE = r"""
import json, sys
from cachedoctor.scan import ScanOptions, scan
workers, folders = int(sys.argv[1]), sys.argv[2:]
out = {}
for mode, deep in (("quick", False), ("deep", True)):
    result = scan(folders, ScanOptions(deep=deep, workers=workers))
    found = {}
    for f in result.findings:
        found.setdefault(f.path, []).append([f.kind, f.details.get("problem"), str(f.details.get("reason", ""))[:160]])
    out[mode] = {"findings": found, "errors": [repr(e)[:300] for e in result.errors]}
print(json.dumps(out, default=str))
"""


def judge(folders: list[Path], workers: int, timeout: float) -> dict:
    """The real scan of ``folders``, quick and deep, in a child (a bomb there fails the batch)."""
    proc = subprocess.run(
        [sys.executable, "-c", JUDGE, str(workers), *map(str, folders)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the scan child failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def unsafe_by_mode(report: dict, path: Path) -> tuple[dict[str, list[str]], bool]:
    """``kind/problem`` of each finding on ``path`` per mode, and whether both modes say unsafe-pickle."""
    found = {mode: sorted({f"{k}/{p}" for k, p, _ in report[mode]["findings"].get(str(path), [])}) for mode in report}
    return found, all(any(v.startswith("unsafe-pickle/") for v in kinds) for kinds in found.values())


@dataclass
class Campaign:
    benign: set[str]
    oracle_problems: list[str]
    failures: list[str]  # dangerous files without unsafe-pickle (quick or deep), one line each
    alarms: list[str]  # harmless mutants called unsafe-pickle (reported, not asserted)
    scan_errors: list[str]
    counts: collections.Counter[str]


def _write(folder: Path, files: dict[str, bytes]) -> dict[str, Path]:
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return {name: folder / name for name in files}


def campaign(
    n: int, seed: int, workdir: Path, batch: int = 500, workers: int = 2, keep: Path | None = None
) -> Campaign:
    """Seeds and ``n`` mutants through the oracle and the scan, ``batch`` files a run of each;
    the seeds go with the first batch, and fix the benign set."""
    sandbox = workdir / "sandbox"
    sandbox.mkdir(parents=True, exist_ok=True)
    marker = sandbox / PWNED_MARKER
    all_seeds = seeds(Path(PWNED_MARKER))  # relative: the loaders run in the sandbox
    seed_paths = _write(workdir / "seeds", {f"{i:03d}-{s.filename}": s.data for i, s in enumerate(all_seeds)})
    result = Campaign(set(), [], [], [], [], collections.Counter())
    for start in range(0, max(n, 1), batch):
        made = mutants(all_seeds, min(batch, n - start), seed, start) if n else []
        paths = _write(workdir / f"mutants-{start:06d}", {m.name: m.data for m in made})
        todo = {**(seed_paths if start == 0 else {}), **paths}
        outcomes = run_oracle({k: str(p) for k, p in todo.items()}, str(marker), str(sandbox), str(workdir), 3600)
        report = judge(sorted({p.parent for p in todo.values()}), workers, 3600)
        result.scan_errors += [e for mode in report.values() for e in mode["errors"]]
        if start == 0:
            _check_seeds(all_seeds, list(seed_paths.values()), outcomes, report, result)
        for m in made:
            _compare(m, seed, paths[m.name], outcomes[m.name], report, keep, result)
        shutil.rmtree(paths[next(iter(paths))].parent if paths else workdir / f"mutants-{start:06d}")
    return result


def _check_seeds(
    all_seeds: list[Seed], paths: list[Path], outcomes: dict[str, Outcome], report: dict, result: Campaign
) -> None:
    """The benign set from the healthy seeds; the oracle checked on every seed (healthy ones
    open and reach no object array, each exploit reaches something new), and the scan on them."""
    seen = {s.id: outcomes[p.name] for s, p in zip(all_seeds, paths, strict=True)}
    result.benign = set().union(*(seen[s.id].globals() for s in all_seeds if not s.dangerous))
    problems = [f"benign set holds {b}" for b in sorted(result.benign) if b.startswith(NEVER_BENIGN)]
    if not any(o.audited for o in seen.values()):
        problems.append("the audit hook saw no pickle.find_class event: the bypass check is blind")
    for s, path in zip(all_seeds, paths, strict=True):
        o = seen[s.id]
        if s.dangerous and not o.new(result.benign):
            problems.append(f"exploit seed {s.id} reaches nothing new: opened {o.opened}, errors {o.errors}")
        if not s.dangerous and (o.object_arrays or not any(o.opened.values())):
            problems.append(f"healthy seed {s.id}: no loader opens it or it holds object arrays ({o.errors})")
        found, unsafe = unsafe_by_mode(report, path)
        if s.dangerous and not unsafe:
            result.failures.append(f"seed {s.id}: dangerous ({o.new(result.benign)}), scan {found}")
        if not s.dangerous and any("unsafe-pickle/" in v for kinds in found.values() for v in kinds):
            result.failures.append(f"seed {s.id}: a healthy trainer file called unsafe, scan {found}")
    result.oracle_problems += problems


def _compare(m: Mutant, seed: int, path: Path, o: Outcome, report: dict, keep: Path | None, result: Campaign) -> None:
    new = o.new(result.benign)
    if new and not any(o.opened.values()) and not claims_cache(path.name):
        new = {}  # every loader fails on it and its name is no cache's: no trainer loads it (differential.py)
    found, unsafe = unsafe_by_mode(report, path)
    names = sorted(set(m.chain.replace(">", " + ").split(" + ")))
    result.counts["dangerous" if new else "harmless"] += 1
    if new and not unsafe:
        opened = "a loader opened it" if any(o.opened.values()) else "every loader raised after reaching it"
        result.counts.update(
            [f"failure by mutator: {name}" for name in names]
            + [f"failure by quick verdict: {', '.join(found['quick']) or 'no finding'}", f"failure where {opened}"]
        )
        result.failures.append(
            f"seed={seed} mutant={m.index} {m.name} from {m.seed.id} [{m.chain}] reached {new} "
            f"opened={sorted(k for k, v in o.opened.items() if v)} payload_ran={sorted(o.payload_ran)} scan={found}"
        )
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, keep / m.name)
    elif not new and any("unsafe-pickle/" in v for kinds in found.values() for v in kinds):
        result.counts.update(f"alarm by mutator: {name}" for name in names)
        result.alarms.append(f"mutant={m.index} from {m.seed.id} [{m.chain}] scan={found}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description="Differential fuzz: mutants the real loaders run must be unsafe-pickle."
    )
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--out", type=Path, default=Path("fuzz-failures"))
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    for old in args.out.glob("[0-9][0-9][0-9][0-9][0-9]-*") if args.out.is_dir() else []:
        old.unlink()  # an earlier run's failing mutants
    work = Path(tempfile.mkdtemp(prefix="cachedoctor-fuzz-"))
    try:
        c = campaign(args.n, args.seed, work, workers=args.workers, keep=args.out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for line in c.oracle_problems + c.scan_errors + c.failures:
        print(line)
    print(
        f"{c.counts['dangerous']} dangerous and {c.counts['harmless']} harmless mutants; {len(c.failures)} failures, "
        f"{len(c.alarms)} harmless mutants called unsafe-pickle; failing mutants in {args.out}/"
    )
    for key, count in sorted(c.counts.items()):
        if key.startswith(("failure", "alarm")):
            print(f"  {count:5d}  {key}")
    return 1 if c.failures or c.oracle_problems or c.scan_errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
