"""Every report says what the formats it read cannot show (safetensors keeps no checksum)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from cachedoctor.cli import run
from cachedoctor.cli.environment import Environment
from cachedoctor.report.blind_spots import blind_spots


def cli(*argv: str) -> tuple[int, str, str]:
    import io

    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdout_isatty=False, stderr_isatty=False, stdin_isatty=False, cwd="/")
    return run(list(argv), env), out.getvalue(), err.getvalue()


def test_only_formats_without_checksums_are_named() -> None:
    spots = blind_spots({"safetensors": 3, "torch-zip": 9, "npz": 2, "npy": 1}, deep=False, digests=True)
    assert [(s.format, s.files) for s in spots] == [("npy", 1), ("safetensors", 3)]
    assert "invisible to this quick scan" in spots[1].unseen and "unchanged size, times and inode" in spots[1].unseen


def test_deep_scan_without_state_says_no_digest_was_kept() -> None:
    [spot] = blind_spots({"safetensors": 1}, deep=True, digests=False)
    assert "no digest was kept" in spot.unseen


def test_a_flipped_tensor_byte_passes_a_quick_and_a_first_deep_scan_and_the_report_says_why(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    for i in range(3):
        save_file({"latent": torch.full((4, 8, 8), float(i + 1))}, str(cache / f"{i}.safetensors"))
    raw = bytearray((cache / "1.safetensors").read_bytes())
    raw[-5] ^= 0x01  # a byte inside the tensor data: the value stays finite
    (cache / "1.safetensors").write_bytes(bytes(raw))
    code, out, err = cli("scan", "--deep", "--format", "json", str(cache))
    document = json.loads(out)
    assert (code, document["findings"]) == (0, [])
    [limit] = document["summary"]["limits"]
    assert (limit["format"], limit["files"]) == ("safetensors", 3)
    assert "digest this one recorded" in limit["unseen"]
    code, out, err = cli("scan", str(cache))
    assert code == 0 and "note: 3 safetensors files: the format keeps no checksum over tensor data" in " ".join(
        out.split()
    )
