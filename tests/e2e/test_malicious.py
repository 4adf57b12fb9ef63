"""Malicious pickles are named, never run: in a torch zip, a plain pickle named .pt, a file with
a bad CRC, an extensionless file, a legacy torch file and a gzip-wrapped one."""

from __future__ import annotations

import pickle
from pathlib import Path

import torch
from factories import Payload, findings_of, gzipped, latent, malicious_torch_zip, peers

from cachedoctor.formats import read_file


def _assert_only_unsafe(tmp_path: Path, bad: Path, deep: bool = False) -> None:
    found = findings_of(tmp_path, deep=deep)
    assert [f for f in found if f[1] == str(bad)] == [("unsafe-pickle", str(bad), "quarantine")]


def test_os_system_in_torch_zip(tmp_path: Path, marker: Path) -> None:
    peers(tmp_path)
    bad = tmp_path / "evil.pt"
    bad.write_bytes(malicious_torch_zip(marker))
    _assert_only_unsafe(tmp_path, bad)
    meta = read_file(str(bad))
    assert meta is not None and {"posix.system", "os.system"} & set(meta.foreign_globals)


def test_plain_pickle_named_pt(tmp_path: Path, marker: Path) -> None:
    bad = tmp_path / "evil.pt"
    bad.write_bytes(pickle.dumps(Payload(marker), protocol=2))
    _assert_only_unsafe(tmp_path, bad)


def test_payload_in_file_with_bad_crc(tmp_path: Path, marker: Path) -> None:
    data = bytearray(malicious_torch_zip(marker))
    index = data.index(b"data/0") + 100
    data[index] ^= 0xFF
    bad = tmp_path / "evil.pt"
    bad.write_bytes(bytes(data))
    found = findings_of(tmp_path, deep=True)
    assert ("unsafe-pickle", str(bad), "quarantine") in found


def test_extensionless_file(tmp_path: Path, marker: Path) -> None:
    bad = tmp_path / "cachefile"
    bad.write_bytes(malicious_torch_zip(marker))
    _assert_only_unsafe(tmp_path, bad)


def test_gzip_wrapped_payload(tmp_path: Path, marker: Path) -> None:
    bad = tmp_path / "evil.pt"
    bad.write_bytes(gzipped(malicious_torch_zip(marker)))
    _assert_only_unsafe(tmp_path, bad, deep=True)


def test_legacy_format_payload(tmp_path: Path, marker: Path) -> None:
    import io

    buf = io.BytesIO()
    torch.save({"a": latent()}, buf, _use_new_zipfile_serialization=False)
    data = buf.getvalue()
    # Replace the object pickle (4th) with a payload, keeping the magic/protocol/sysinfo pickles.
    stream = io.BytesIO(data)
    for _ in range(3):
        pickle.load(stream)
    head = data[: stream.tell()]
    bad = tmp_path / "old.pt"
    bad.write_bytes(head + pickle.dumps(Payload(marker), protocol=2) + pickle.dumps([], protocol=2))
    _assert_only_unsafe(tmp_path, bad)


def test_payload_hidden_in_a_dict_among_real_tensors(tmp_path: Path, marker: Path) -> None:
    bad = tmp_path / "evil.pt"
    bad.write_bytes(malicious_torch_zip(marker))
    meta = read_file(str(bad), deep=True)
    assert meta is not None and meta.foreign_globals
