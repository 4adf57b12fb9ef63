"""Damage before intent: a torch archive's ``data.pkl`` whose bytes fail their CRC-32.

miniz (torch.load) never checks the CRC, so a damaged pickle still loads, and one flipped
byte can turn a string length into "2 GB" or an opcode into garbage: read as intent, the file
would be called a resource bomb and quarantined as hostile instead of recomputed. The pickle is
read whole anyway, so its CRC costs one pass over a few hundred bytes.
"""

from __future__ import annotations

import zlib

from cachedoctor.formats._pickle_scan import LIMITS
from cachedoctor.formats._source import Source
from cachedoctor.formats._torch_pickles import find_pickle
from cachedoctor.formats._zip import ZipDirectory, read_member
from cachedoctor.formats.interface import MemberCrc, ReadError


def pickle_crc_failure(src: Source, directory: ZipDirectory) -> MemberCrc | None:
    """The ``data.pkl`` torch.load reads, when its bytes fail the CRC-32 recorded for them."""
    found = find_pickle(directory)
    if found is None or found[1].size > LIMITS.pickle_bytes:
        return None
    try:
        data = read_member(src, found[1], limit=LIMITS.pickle_bytes)
    except ReadError:
        return None
    actual = zlib.crc32(data)
    return None if actual == found[1].crc else MemberCrc(found[1].name, found[1].crc, actual)


def damage_error(damaged: MemberCrc, content: ReadError) -> ReadError:
    """``bad-crc`` (corrupt-archive, recomputable) for a damaged pickle whose content reads as
    a bomb or does not unpickle; what its content looked like is kept in ``content``."""
    message = (
        f"member {damaged.name} fails its CRC-32 (data changed after it was written): damaged, "
        "so its content is not judged as an attack"
    )
    crc = {
        "member": damaged.name,
        "expected": f"{damaged.expected:08x}",
        "actual": f"{damaged.actual & 0xFFFFFFFF:08x}",
    }
    # the details corrupt-archive gives any CRC failure (docs/json.md), and what the content read as
    return ReadError("bad-crc", message, problems=[message], crc=[crc], content=f"{content.problem}: {content.message}")
