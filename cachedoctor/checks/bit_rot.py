"""``bit-rot``: a file's bytes changed since a deep read though its size, times and inode did not.

Every writer (a trainer, ``cp``, ``rsync``, cachedoctor's own repair) leaves a new ctime, which
no program can set back, so unchanged stat with changed bytes is damage below the file system:
a failing disk, bad RAM on a NAS, a flipped bit in transit on a network file system. The state
database keeps the xxh3 of every deep read, so a later deep read (``--deep``, or the ``--sample``
share) of an unchanged file is compared with it. A file that read cleanly then and cannot be
read now is the same evidence, when the bytes no longer parse.
"""

from __future__ import annotations

from cachedoctor.checks.interface import Check
from cachedoctor.findings import Finding, Fix, Severity


class BitRot(Check):
    kind = "bit-rot"
    severity = Severity.ERROR
    fix = Fix.RECOMPUTE
    summary = "the bytes changed since a deep read, though size and times did not (deep, state database)"
    why = (
        "Nothing a program does to a file keeps its size, modification time, change time and "
        "inode all the same while changing its bytes: the change happened below the file "
        "system (a failing disk or controller, memory errors on a file server, a network file "
        "system's silent corruption). A flipped bit in a latent trains on noise without a word; "
        "in a zip's headers the trainer's loader fails on that file hours into a run. The "
        "stat-based rescan cannot see it: only a deep read compares the bytes with the digest "
        "the state database recorded, so run `scan --deep` (or `--sample`) now and then."
    )
    repair = (
        "recompute: the item is encoded again and the damaged file goes to the quarantine. "
        "Check the disk (SMART, `zpool scrub`, the file server's logs): other files may rot next."
    )
    deep_only = True
    found = (
        "Needs a deep read (--deep, or the --sample share) and the state database: a file that "
        "an earlier scan read deep, whose size, times and inode are unchanged since, is hashed "
        "again and compared with the digest recorded then. A scan with --no-state never reports it."
    )

    def judge(self, path: str, recorded: str, now: str | None, *, unreadable: bool = False) -> Finding | None:
        """The finding for a deep read of an unchanged file, given the digest the state recorded
        at its last deep read (``recorded``) and this read's (``now``; ``None`` when the bytes
        no longer parse, ``unreadable``)."""
        if now is not None and now != recorded:
            return self.finding(
                path,
                "its bytes differ from the last deep read, but its size, times and inode do not: "
                "damage below the file system (check the disk)",
                recorded_xxh3=recorded,
                xxh3=now,
            )
        if now is None and unreadable:
            return self.finding(
                path,
                "it read cleanly at the last deep read and no longer does, with its size, times "
                "and inode unchanged: damage below the file system (check the disk)",
                recorded_xxh3=recorded,
                xxh3=None,
            )
        return None
