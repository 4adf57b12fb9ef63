"""The container mutators of the differential fuzz test (``fuzz_mutations.py`` holds the rest and
the registry): a zip's end record (junk after it, disk numbers, comment length, central
directory offset, entry count), bytes prepended, one local header field, a member recompressed
(deflate, BZIP2, LZMA), renamed or added from a donor, a member's or a gzip stream's bytes
mutated in turn. Each returns ``None`` where it does not apply."""

from __future__ import annotations

import gzip
import io
import random
import re
import struct
import warnings
import zipfile
from collections.abc import Callable

Pool = list[tuple[str, bytes]]
Mutator = Callable[[random.Random, bytes, Pool], "bytes | None"]
EOCD = b"PK\x05\x06"


# --- zip --------------------------------------------------------------------------------------


def _eocd(data: bytes) -> int | None:
    at = data.rfind(EOCD)
    return at if at >= 0 and len(data) - at >= 22 else None


def _patch_eocd(fmt: str, offset: int, choose: Callable[[random.Random, int], int]) -> Mutator:
    def mutate(rng: random.Random, data: bytes, pool: Pool) -> bytes | None:
        at = _eocd(data)
        if at is None:
            return None
        out = bytearray(data)
        old = struct.unpack_from(fmt, out, at + offset)[0]
        struct.pack_into(fmt, out, at + offset, choose(rng, old) % (1 << (8 * struct.calcsize(fmt))))
        return bytes(out)

    return mutate


def zip_junk_after_end(rng: random.Random, data: bytes, pool: Pool) -> bytes | None:
    if _eocd(data) is None:
        return None
    return data + bytes(rng.getrandbits(8) for _ in range(rng.choice([1, 22, 128, rng.randrange(1, 400)])))


def zip_prepend(rng: random.Random, data: bytes, pool: Pool) -> bytes | None:
    """Bytes before the archive, offsets left as they are: random ones, an empty archive's end
    record (22 bytes, which numpy's magic check takes for a zip), or a local header signature
    and padding (64 bytes)."""
    if _eocd(data) is None:
        return None
    junk = bytes(rng.getrandbits(8) for _ in range(rng.choice([1, 22, 64, rng.randrange(1, 300)])))
    return rng.choice([junk, EOCD + bytes(18), b"PK\x03\x04" + bytes(60)]) + data


def zip_local_header_field(rng: random.Random, data: bytes, pool: Pool) -> bytes | None:
    """One field of one local header: version, flags, method, time, CRC, sizes, extra length."""
    starts = [m.start() for m in re.finditer(b"PK\x03\x04", data)]
    if not starts:
        return None
    at = rng.choice(starts)
    field, fmt = rng.choice(
        [(4, "<H"), (6, "<H"), (8, "<H"), (10, "<I"), (14, "<I"), (18, "<I"), (22, "<I"), (28, "<H")]
    )
    out = bytearray(data)
    if at + field + struct.calcsize(fmt) > len(out):
        return None
    value = rng.choice([0, 1, 8, 12, 14, 0xFFFF, rng.getrandbits(16)])
    struct.pack_into(fmt, out, at + field, value)
    return bytes(out)


def _members(data: bytes) -> list[tuple[zipfile.ZipInfo, bytes]] | None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            return [(i, z.read(i)) for i in z.infolist()]
    except Exception:
        return None


def _write(members: list[tuple[str, bytes, int]]) -> bytes:
    out = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # duplicate names, on purpose
        with zipfile.ZipFile(out, "w") as z:
            for name, body, method in members:
                z.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), body, compress_type=method)
    return out.getvalue()


def _pick(rng: random.Random, names: list[str]) -> int:
    """A member index, the pickles and arrays (what a loader runs) three times as likely."""
    weights = [3 if n.endswith((".pkl", ".npy")) else 1 for n in names]
    return rng.choices(range(len(names)), weights)[0]


def zip_recompress(rng: random.Random, data: bytes, pool: Pool) -> bytes | None:
    members = _members(data)
    if not members:
        return None
    i = _pick(rng, [info.filename for info, _ in members])
    method = rng.choice([zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
    rows = [(info.filename, body, method if j == i else info.compress_type) for j, (info, body) in enumerate(members)]
    return _write(rows)


def zip_rename_member(rng: random.Random, data: bytes, pool: Pool) -> bytes | None:
    members = _members(data)
    if not members:
        return None
    i = _pick(rng, [info.filename for info, _ in members])
    name = members[i][0].filename
    prefix = name.split("/", 1)[0] + "/" if "/" in name else ""
    new = rng.choice([name.upper(), prefix + "latents.npy", prefix + "data.pkl", name + ".npy", "x/" + name])
    return _write(
        [(new if j == i else info.filename, body, info.compress_type) for j, (info, body) in enumerate(members)]
    )


def zip_add_member(rng: random.Random, data: bytes, pool: Pool) -> bytes | None:
    """A donor (an ``.npy``, a pickle, a whole seed) added under a name some loader reads."""
    members = _members(data)
    if members is None or not pool:
        return None
    donor_name, donor = rng.choice(pool)
    prefix = members[0][0].filename.split("/", 1)[0] + "/" if members and "/" in members[0][0].filename else ""
    name = rng.choice([prefix + "latents.npy", prefix + donor_name.rsplit("/", 1)[-1], "latents.npy", donor_name])
    rows = [(info.filename, body, info.compress_type) for info, body in members]
    rows.insert(rng.randrange(len(rows) + 1), (name, donor, zipfile.ZIP_STORED))
    return _write(rows)


def in_zip_member(rng: random.Random, data: bytes, pool: Pool) -> bytes | None:
    """Mutate one member's bytes (any mutator) and write the archive again."""
    members = _members(data)
    if not members:
        return None
    i = _pick(rng, [info.filename for info, _ in members])
    from fuzz_mutations import mutate_once

    body = mutate_once(rng, members[i][1], pool, inner=True)
    if body is None:
        return None
    return _write([(info.filename, body if j == i else b, info.compress_type) for j, (info, b) in enumerate(members)])


# --- gzip -------------------------------------------------------------------------------------


def in_gzip(rng: random.Random, data: bytes, pool: Pool) -> bytes | None:
    if data[:2] != b"\x1f\x8b":
        return None
    try:
        inner = gzip.decompress(data)
    except Exception:
        return None
    from fuzz_mutations import mutate_once

    body = mutate_once(rng, inner, pool, inner=True)
    return None if body is None else gzip.compress(body, mtime=0)


def gzip_wrap(rng: random.Random, data: bytes, pool: Pool) -> bytes | None:
    return gzip.compress(data, mtime=0) if data[:2] != b"\x1f\x8b" else None


ZIP: dict[str, Mutator] = {
    "zip-junk-after-end": zip_junk_after_end,
    "zip-end-disk-numbers": _patch_eocd("<H", 4, lambda r, v: r.choice([1, 2, 0xFFFF])),
    "zip-end-cd-disk": _patch_eocd("<H", 6, lambda r, v: r.choice([1, 2])),
    "zip-end-comment-length": _patch_eocd("<H", 20, lambda r, v: r.choice([1, 22, 200, 0xFFFF, max(v - 1, 0)])),
    "zip-end-cd-offset": _patch_eocd("<I", 16, lambda r, v: v + r.choice([-64, -22, -1, 1, 22, 64])),
    "zip-end-entry-count": _patch_eocd("<H", 10, lambda r, v: v + r.choice([-1, 1, 100])),
    "zip-prepend": zip_prepend,
    "zip-local-header-field": zip_local_header_field,
    "zip-recompress": zip_recompress,
    "zip-rename-member": zip_rename_member,
    "zip-add-member": zip_add_member,
    "zip-member": in_zip_member,
}
GZIP: dict[str, Mutator] = {"gzip-inner": in_gzip, "gzip-wrap": gzip_wrap}
