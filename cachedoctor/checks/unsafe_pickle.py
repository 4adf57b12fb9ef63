"""``unsafe-pickle``: the pickle names globals outside the allow-list.

``torch.load`` without ``weights_only`` would import and call them: that is how a cache file runs
code. cachedoctor records the names and never resolves them.
"""

from __future__ import annotations

from typing import Iterable

from cachedoctor.checks.interface import Check, Inspected
from cachedoctor.findings import Finding, Fix, Severity


class UnsafePickle(Check):
    kind = "unsafe-pickle"
    severity = Severity.ERROR
    fix = Fix.QUARANTINE
    summary = "the pickle references a global outside the allow-list (reported, never run)"
    why = ("A pickle runs what it names when it is loaded: torch.load(weights_only=False) or "
           "pickle.load on this file would import and call the listed globals (os.system, for "
           "example) with the trainer's permissions, on every machine of the run. "
           "torch.load(weights_only=True) refuses it with an UnpicklingError, so a trainer that "
           "loads safely stops on it instead. A cache file has no reason to hold anything but "
           "tensors, dicts and lists: treat it as tampered with.")
    repair = ("quarantine: the file is moved out of the cache without ever being loaded "
              "(cachedoctor only records the names, never resolves them), and nothing is "
              "written in its place. When the dataset expects the file (a scan with --config, "
              "--layout or --manifest knows its source), it is quarantined and the item is "
              "recomputed. Inspect the quarantined copy only with tools that do not unpickle "
              "it.")

    def check_file(self, item: Inspected) -> Iterable[Finding]:
        if item.meta is None or not item.meta.foreign_globals:
            return
        names = list(item.meta.foreign_globals)
        yield self.finding(
            item.path,
            f"pickle references {', '.join(names[:3])}{' ...' if len(names) > 3 else ''} outside the "
            f"allow-list; not executed. torch.load without weights_only would run it",
            globals=names, format=item.meta.format)
