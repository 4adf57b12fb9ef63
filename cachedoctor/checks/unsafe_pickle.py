"""``unsafe-pickle``: loading the file would run code, or exhaust the loader's time or memory.

``torch.load`` without ``weights_only`` (and ``pickle.load``, and ``np.load(allow_pickle=True)``)
would import and call the globals a pickle names: that is how a cache file runs code. The
readers find them statically, in every pickle a loader would read, and never resolve them. A
pickle past the limits of any cache file (a resource bomb) is reported here too: loading it
stalls or kills the trainer just as surely.
"""

from __future__ import annotations

from collections.abc import Iterable

from cachedoctor.checks.interface import Check, Inspected
from cachedoctor.findings import Finding, Fix, Severity


class UnsafePickle(Check):
    kind = "unsafe-pickle"
    severity = Severity.ERROR
    fix = Fix.QUARANTINE
    summary = "a pickle in the file names a global outside the allow-list, or is a resource bomb (reported, never run)"
    why = (
        "A pickle runs what it names when it is loaded: torch.load(weights_only=False) or "
        "pickle.load on this file would import and call the listed globals (os.system, for "
        "example) with the trainer's permissions, on every machine of the run. "
        "torch.load(weights_only=True) refuses it with an UnpicklingError, so a trainer that "
        "loads safely stops on it instead. A cache file has no reason to hold anything but "
        "tensors, dicts and lists: treat it as tampered with. Every pickle a loader would read "
        "counts, wherever it sits: the five pickles of a legacy torch file, each member of the "
        "old tar format, a second data.pkl in another letter case, an object array in an npz, "
        "a pickle inside a gzip; so does a file of any name whose bytes are a pickle. A pickle "
        "past the limits no cache file comes near (opcodes, memo, nesting, one string's length, "
        "shared references that unfold into billions of objects) is a resource bomb: loading it "
        "would stall or exhaust the memory of every rank."
    )
    repair = (
        "quarantine: the file is moved out of the cache without ever being loaded "
        "(cachedoctor only records the names, never resolves them), and nothing is "
        "written in its place. When the dataset expects the file (a scan with --config, "
        "--layout or --manifest knows its source), it is quarantined and the item is "
        "recomputed. Inspect the quarantined copy only with tools that do not unpickle "
        "it."
    )

    def check_file(self, item: Inspected) -> Iterable[Finding]:
        if item.error is not None and item.error.problem == "resource-bomb":
            yield self.finding(
                item.path, item.error.message, problem="resource-bomb", limit=item.error.details.get("limit")
            )
            return
        bombs = [m for _, problem, m in item.meta.item_errors if problem == "resource-bomb"] if item.meta else []
        if bombs:  # an item of a shard: its loader reads the items one by one
            yield self.finding(item.path, bombs[0], problem="resource-bomb")
            return
        if item.meta is None or not item.meta.foreign_globals:
            return
        names = list(item.meta.foreign_globals)
        loaders = list(item.meta.loaders) or ["torch.load(weights_only=False)"]
        shown = ", ".join(names[:3]) + (f" (+{len(names) - 3} more)" if len(names) > 3 else "")
        yield self.finding(
            item.path,
            f"would run {shown}: outside the allow-list, not executed here; {_either(loaders)} would run it",
            globals=names,
            loaders=loaders,
            format=item.meta.format,
            problem="code",
        )


def _either(loaders: list[str]) -> str:
    return loaders[0] if len(loaders) == 1 else ", ".join(loaders[:-1]) + " or " + loaders[-1]
