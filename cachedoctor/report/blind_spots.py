"""What a scan could not see in the formats it read: said in every report, never left implied.

A clean report is only as good as what the checks can see. Some containers keep no checksum at
all (safetensors, ``.npy``, a legacy torch pickle), so a byte flipped inside a tensor leaves a
file that reads, parses and loads; only a NaN/Inf it happens to make, or a digest taken earlier
(the deep scan's, kept in the state database and compared by ``bit-rot``), gives it away. This
module says so per format seen, in the words the table prints and the JSON carries. (Zip
containers, torch.save and npz, record CRC-32s that ``--deep`` checks; every quick report's
last line already says so.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: Formats that keep no checksum over tensor data (the reader's ``FileMeta.format`` names).
_UNCHECKED = {
    "safetensors": "the format keeps no checksum over tensor data",
    "npy": "the format keeps no checksum over its array",
    "torch-legacy": "legacy torch.save files keep no checksum",
    "torch-tar": "legacy torch.save tars keep no checksum",
}


@dataclass(frozen=True, slots=True)
class BlindSpot:
    """Files of one format, and what the scan that read them cannot show."""

    format: str
    files: int
    unseen: str

    def line(self) -> str:
        return f"{self.files} {self.format} file{'s' if self.files != 1 else ''}: {self.unseen}"

    def to_json(self) -> dict[str, object]:
        return {"format": self.format, "files": self.files, "unseen": self.unseen}


def blind_spots(formats: Mapping[str, int], *, deep: bool, digests: bool) -> list[BlindSpot]:
    """What a scan (``deep`` or quick; ``digests``: a state database keeps each deep read's
    digest) could not see in the ``formats`` it read (format -> files)."""
    out: list[BlindSpot] = []
    for fmt, files in sorted(formats.items()):
        plain = _UNCHECKED.get(fmt)
        if plain is None or files <= 0:
            continue
        if not deep:
            later = (
                "and records each file's digest, so a later deep scan reports bytes that change under an unchanged "
                "size, times and inode (bit-rot: a disk, not a program); a program's write leaves nothing to compare"
                if digests
                else "(with a state database it also records each file's digest for later deep scans)"
            )
            unseen = f"{plain}, so a changed byte inside a tensor is invisible to this quick scan; --deep counts NaN/Inf {later}"
        elif digests:
            unseen = (
                f"{plain}: a changed byte that leaves finite values is not seen; a later deep scan compares the "
                "digest this one recorded only while size, times and inode stay the same (bit-rot: a disk's damage, "
                "not a program's write)"
            )
        else:
            unseen = (
                f"{plain}: a changed byte that leaves finite values is not seen, and with no state database "
                "no digest was kept for a later deep scan to compare"
            )
        out.append(BlindSpot(fmt, files, unseen))
    return out


__all__ = ["BlindSpot", "blind_spots"]
