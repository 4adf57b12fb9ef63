"""Every pickle of a torch archive, screened: the ``data.pkl`` torch.load reads and any other
``*.pkl`` member (a second data.pkl in another letter case or folder, which another reader may
pick; TorchScript's ``constants.pkl``), under one opcode budget for the whole file."""

from __future__ import annotations

from cachedoctor.formats._pickle_scan import LIMITS
from cachedoctor.formats._source import Source
from cachedoctor.formats._verdict import bomb, check_size, merge, screen
from cachedoctor.formats._zip import ZipDirectory, ZipMember, read_member
from cachedoctor.formats.interface import ReadError

TORCHSCRIPT = "torch.jit.load (a TorchScript archive: torch.load hands it to torch.jit.load, which runs its code)"


def screen_members(
    src: Source,
    directory: ZipDirectory,
    chosen: ZipMember | None,
    chosen_data: bytes | None,
    index: dict[str, ZipMember] | None = None,
) -> list[str]:
    """Globals outside the allow-list in *every* pickle of the archive: the ``data.pkl`` torch
    reads and any other ``*.pkl`` member (a second data.pkl in another letter case or folder,
    which another reader may pick). A TorchScript archive is itself unsafe."""
    unsafe: list[str] = []
    opcodes = allocated = 0
    if index is not None and len(index) == len(directory.entries):  # no duplicates: names already folded
        pickles = [member for key, member in index.items() if key.endswith(".pkl")]
    else:
        pickles = [member for member in directory.entries if member.name.lower().endswith(".pkl")]
    if len(pickles) == 1 and pickles[0] == chosen and chosen_data is not None:  # the usual torch.save archive
        return list(screen(chosen.name, chosen_data).unsafe)
    for member in pickles:
        lowered = member.name.lower()
        if lowered.rsplit("/", 1)[-1] == "constants.pkl":
            merge(unsafe, [TORCHSCRIPT])
        if chosen is not None and member == chosen and chosen_data is not None:
            data = chosen_data
        else:
            check_size(member.name, member.size)
            try:
                data = read_member(src, member, limit=LIMITS.pickle_bytes)
            except ReadError as exc:
                if exc.problem == "resource-bomb":
                    raise
                continue  # a damaged extra member is no pickle anyone can load
        result = screen(member.name, data)
        merge(unsafe, result.unsafe)
        opcodes += result.opcodes
        if opcodes > LIMITS.opcodes:  # one budget for the whole file, however many pickles it holds
            raise bomb(member.name, f"more than {LIMITS.opcodes:,} opcodes in all its pickles", opcodes)
        allocated += result.allocated
        if allocated > LIMITS.call_bytes:  # and one allocation budget: a loader may read them all
            raise bomb(
                member.name, f"its pickles' calls would allocate {allocated:,} bytes, limit {LIMITS.call_bytes:,}"
            )
    return unsafe
