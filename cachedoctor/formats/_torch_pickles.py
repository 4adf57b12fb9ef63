"""The pickles of a torch archive: whether a zip is one (:func:`looks_like_torch`), the
``data.pkl`` torch.load reads (:func:`find_pickle`, :func:`pickle_bytes`), and every pickle
screened (:func:`screen_members`): that one and any other ``*.pkl`` member (a second data.pkl in
another letter case or folder, which another reader may pick; TorchScript's ``constants.pkl``),
under one opcode budget for the whole file.

Why here and not in ``torch_zip.py``: the readers beside it (``npz.py``, ``_torch_damage.py``,
``_torch_object.py``) ask the same questions of an archive, and ``torch_zip.py`` imports them,
so the answers sit below all of them.
"""

from __future__ import annotations

from cachedoctor.formats._pickle_scan import LIMITS
from cachedoctor.formats._source import Source
from cachedoctor.formats._verdict import bomb, check_size, merge, screen
from cachedoctor.formats._zip import ZipDirectory, ZipMember, fold, read_member
from cachedoctor.formats.interface import ReadError

TORCHSCRIPT = "torch.jit.load (a TorchScript archive: torch.load hands it to torch.jit.load, which runs its code)"


def find_pickle(directory: ZipDirectory, index: dict[str, ZipMember] | None = None) -> tuple[str, ZipMember] | None:
    """``(record prefix, member)`` of the ``data.pkl`` torch.load reads, as its reader finds it:
    the prefix is the first entry's folder, and names match case-insensitively (miniz)."""
    archive = directory.torch_archive()
    if archive is None:
        return None
    prefix = f"{archive}/"
    member = (index if index is not None else directory.torch_index()).get(fold(f"{prefix}data.pkl"))
    return None if member is None else (prefix, member)


def looks_like_torch(directory: ZipDirectory) -> bool:
    """A torch.save archive, even one that died before writing ``data.pkl``."""
    for name in directory.members:  # exact names first: the usual archive answers on its first member
        if name.endswith(_TORCH_TAILS) or "/data/" in name:
            return True
    for name in directory.members:  # torch's reader ignores letter case
        lowered = name.lower()
        if lowered.endswith(_TORCH_TAILS) or "/data/" in lowered:
            return True
    return False


_TORCH_TAILS = ("/data.pkl", "/version", "/.format_version", "/byteorder")


def pickle_bytes(src: Source, directory: ZipDirectory) -> tuple[str, bytes]:
    """``(record prefix, data.pkl's bytes)``, or ``missing-data-pkl``."""
    found = find_pickle(directory)
    if found is None:
        raise ReadError(
            "missing-data-pkl",
            "zip archive without data.pkl: a torch.save that died part way (failed locating file data.pkl)",
        )
    prefix, member = found
    check_size(member.name, member.size)
    return prefix, read_member(src, member, limit=LIMITS.pickle_bytes)


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
