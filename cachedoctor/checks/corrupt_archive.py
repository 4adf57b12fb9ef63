"""``corrupt-archive``: the file is not the intact archive its bytes or name claim.

A well-formed file of another container than its name says is one too: a torch zip named
``.safetensors`` is read by ``safetensors.load_file`` (ai-toolkit, musubi-tuner), which fails on
it ("header too large"), whatever a sniffing reader makes of its bytes.

torch.load reports these as ``failed finding central directory``, ``EOFError``, ``failed
locating file data.pkl`` or, for a flipped byte, not at all (miniz skips CRCs): deep mode
computes every member's CRC-32 itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cachedoctor.cachenames import wrong_container
from cachedoctor.checks.interface import Check, Inspected, describe_read_error
from cachedoctor.findings import Finding, Fix, Severity

#: Read errors that another kind reports: a resource bomb (unsafe-pickle), a timeout (read-timeout).
REPORTED_ELSEWHERE = frozenset({"resource-bomb", "timeout"})


class CorruptArchive(Check):
    kind = "corrupt-archive"
    severity = Severity.ERROR
    fix = Fix.RECOMPUTE
    summary = (
        "zero bytes, truncated, not the zip/gzip/safetensors/npz it claims to be, missing "
        "data.pkl, a member name that torch.load and zipfile resolve differently, a record "
        "whose size does not match its storage, or a bad CRC (deep)"
    )
    why = (
        'torch.load stops on it: a truncated file raises "PytorchStreamReader failed '
        'reading zip archive: failed finding central directory", an empty one EOFError, a '
        'save that died part way "failed locating file data.pkl"; np.load raises '
        "zipfile.BadZipFile. kohya aborts the whole run on the first such file, and a "
        "trainer that loads lazily crashes only when the batch that holds it comes up, "
        "possibly hours in. A flipped byte is worse: torch.load never checks the CRC-32, so "
        "the file loads and the model trains on wrong values without a word."
    )
    repair = (
        "recompute: nothing in the file can be trusted, so the item is encoded again from "
        "its source and the damaged file goes to the quarantine."
    )

    def check_file(self, item: Inspected) -> Iterable[Finding]:
        if item.error is not None:
            if item.error.problem not in REPORTED_ELSEWHERE:
                yield self.finding(item.path, item.error.message, **describe_read_error(item.error))
            return
        meta = item.meta
        if meta is None:
            return
        wrong = wrong_container(item.path, meta.format)
        if wrong is not None:
            yield self.finding(item.path, wrong, problem="wrong-container", format=meta.format)
            return
        damaged = [
            (label, problem, message)
            for label, problem, message in meta.item_errors
            if problem not in REPORTED_ELSEWHERE
        ]
        if damaged:  # items of a shard its loader cannot read (the others are judged as usual below)
            yield self.finding(
                item.path,
                damaged[0][2] + (f" (+{len(damaged) - 1} more)" if len(damaged) > 1 else ""),
                problem="bad-item",
                items=[_index(label) for label, _, _ in damaged],
                problems=[message for _, _, message in damaged],
            )
            return
        problems: list[str] = [
            f"{name} is held by more than one member (or its local header names another file): "
            "torch.load and zipfile would read different bytes"
            for name in meta.ambiguous
        ]
        for key in meta.missing_records:
            problems.append(f"storage record data/{key} is missing")
        seen: set[str | None] = set()
        for t in meta.tensors:
            if t.record_bytes is None or t.storage_numel is None or t.dtype == "object" or t.dtype.startswith("numpy:"):
                continue  # an object array's record is a pickle (unsafe-pickle); numpy-only dtypes size their own items
            if t.storage not in seen:
                seen.add(t.storage)
                need = t.storage_numel * t.itemsize
                if t.record_bytes != need:
                    problems.append(f"record of {t.display_key} holds {t.record_bytes} bytes, its storage needs {need}")
            if t.offset + t.span > t.storage_numel:
                problems.append(
                    f"{t.display_key} reaches past its storage ({t.offset + t.span} > {t.storage_numel} elements)"
                )
        for bad in meta.crc_mismatches:
            problems.append(f"member {bad.name} fails its CRC-32 (data changed after it was written)")
        if problems:
            crc = [
                {"member": b.name, "expected": f"{b.expected:08x}", "actual": f"{b.actual & 0xFFFFFFFF:08x}"}
                for b in meta.crc_mismatches
            ]
            problem = (
                "bad-crc"
                if crc and len(crc) == len(problems)
                else "ambiguous-member"
                if meta.ambiguous and len(meta.ambiguous) == len(problems)
                else "bad-record"
            )
            extra: dict[str, Any] = {"crc": crc} if crc else {}
            yield self.finding(
                item.path,
                problems[0] + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""),
                problem=problem,
                problems=problems,
                **extra,
            )


def _index(label: str) -> int | None:
    """``item 3`` -> 3: the item of a shard a problem is in."""
    _, _, number = label.rpartition(" ")
    return int(number) if number.isdigit() else None
