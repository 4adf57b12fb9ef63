"""Readers report exact metadata for files written by real torch.save, np.savez, safetensors."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from factories import gzipped, latent, pt_bytes, save_pt, saved_on, write_npz
from safetensors.torch import save_file

from cachedoctor.formats import ReadError, read_file


def test_bare_tensor_saved_to_file_object(tmp_path: Path) -> None:
    path = save_pt(tmp_path / "a.pt", latent(4, 16, 12))
    meta = read_file(str(path))
    assert meta is not None and meta.format == "torch-zip" and meta.container == "tensor"
    (t,) = meta.tensors
    assert (t.key, t.shape, t.dtype, t.stride, t.offset) == ("", (4, 16, 12), "bfloat16", (192, 12, 1), 0)
    assert (t.storage_numel, t.record_bytes, t.location) == (4 * 16 * 12, 4 * 16 * 12 * 2, "cpu")


def test_dict_of_tensors_keeps_key_paths_and_skips_plain_values(tmp_path: Path) -> None:
    obj = {"latent_image": latent(), "original_resolution": (64, 64), "nested": {"m": [torch.zeros(3)]}}
    meta = read_file(str(save_pt(tmp_path / "d.pt", obj, fileobj=False)))
    assert meta is not None and meta.container == "dict"
    assert [(t.key, t.shape, t.dtype) for t in meta.tensors] == [
        ("latent_image", (4, 8, 8), "bfloat16"),
        ("nested.m[0]", (3,), "float32"),
    ]


def test_v3_rebuild_dtypes_count_storage_in_elements(tmp_path: Path) -> None:
    obj = {"f8": torch.zeros(6, dtype=torch.float8_e4m3fn), "u16": torch.zeros(5, dtype=torch.uint16)}
    meta = read_file(str(save_pt(tmp_path / "v3.pt", obj)))
    assert meta is not None
    assert [(t.key, t.dtype, t.storage_numel, t.record_bytes) for t in meta.tensors] == [
        ("f8", "float8_e4m3fn", 6, 6),
        ("u16", "uint16", 5, 10),
    ]


def test_view_of_batch_reports_offset_and_whole_storage(tmp_path: Path) -> None:
    batch = torch.randn(7, 4, 8, 8)
    meta = read_file(str(save_pt(tmp_path / "v.pt", batch[3])))
    (t,) = meta.tensors  # type: ignore[union-attr]
    assert (t.offset, t.storage_numel, t.record_bytes, t.span) == (3 * 256, 7 * 256, 7 * 256 * 4, 256)


def test_location_string_is_reported(tmp_path: Path) -> None:
    with saved_on("cuda:3"):
        path = save_pt(tmp_path / "g.pt", latent())
    (t,) = read_file(str(path)).tensors  # type: ignore[union-attr]
    assert t.location == "cuda:3"


def test_gzip_wrapped_torch_file(tmp_path: Path) -> None:
    path = tmp_path / "z.pt"
    path.write_bytes(gzipped(pt_bytes(latent())))
    meta = read_file(str(path))
    assert meta is not None and meta.format == "torch-gzip" and meta.size == path.stat().st_size
    assert [t.shape for t in meta.tensors] == [(4, 8, 8)]


def test_legacy_torch_save(tmp_path: Path) -> None:
    path = tmp_path / "old.pt"
    torch.save({"latents": torch.ones(4, 8, 8)}, path, _use_new_zipfile_serialization=False)
    meta = read_file(str(path), deep=True)
    assert meta is not None and meta.format == "torch-legacy"
    (t,) = meta.tensors
    assert (t.key, t.shape, t.record_bytes, t.nonfinite) == ("latents", (4, 8, 8), 4 * 8 * 8 * 4, 0)


def test_safetensors_header(tmp_path: Path) -> None:
    path = tmp_path / "s.safetensors"
    save_file({"latents": torch.zeros(4, 8, 8, dtype=torch.bfloat16), "ids": torch.arange(3)}, str(path))
    meta = read_file(str(path))
    assert meta is not None and meta.format == "safetensors"
    assert sorted((t.key, t.shape, t.dtype) for t in meta.tensors) == [
        ("ids", (3,), "int64"),
        ("latents", (4, 8, 8), "bfloat16"),
    ]


@pytest.mark.parametrize("dtype", [["F16"], {"F": 16}, 16, None])
def test_safetensors_header_with_a_non_string_dtype_is_a_bad_header(tmp_path: Path, dtype: object) -> None:
    """A crafted header whose dtype is a list (unhashable) once escaped as TypeError: an internal error."""
    import json
    import struct

    header = json.dumps({"latents": {"dtype": dtype, "shape": [2], "data_offsets": [0, 4]}}).encode()
    path = tmp_path / "s.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 4)
    with pytest.raises(ReadError) as info:
        read_file(str(path))
    assert info.value.problem == "bad-header" and "unknown dtype" in str(info.value)


def test_npz_multi_resolution_by_content_not_name(tmp_path: Path) -> None:
    path = write_npz(
        tmp_path / "img_0064x0048_sdxl.npz",
        latents_6x8=np.zeros((4, 6, 8), np.float32),
        latents_3x4=np.zeros((4, 3, 4), np.float32),
        original_size=np.array([64, 48]),
    )
    renamed = tmp_path / "img.latent"
    path.rename(renamed)
    meta = read_file(str(renamed))
    assert meta is not None and meta.format == "npz"
    assert [(t.key, t.shape, t.dtype) for t in meta.tensors] == [
        ("latents_6x8", (4, 6, 8), "float32"),
        ("latents_3x4", (4, 3, 4), "float32"),
        ("original_size", (2,), "int64"),
    ]


def test_compressed_npz_deep_reads_values(tmp_path: Path) -> None:
    path = tmp_path / "c.npz"
    arr = np.zeros((4, 4), np.float32)
    arr[1, 1] = np.inf
    np.savez_compressed(path, latents=arr)
    (t,) = read_file(str(path), deep=True).tensors  # type: ignore[union-attr]
    assert t.nonfinite == 1


def test_deep_digest_is_xxh3_of_the_file(tmp_path: Path) -> None:
    import xxhash

    path = save_pt(tmp_path / "a.pt", latent())
    assert read_file(str(path), deep=True).digest == xxhash.xxh3_128_hexdigest(path.read_bytes())  # type: ignore[union-attr]
    assert read_file(str(path)).digest is None  # type: ignore[union-attr]


def _every_deep_format(folder: Path) -> list[Path]:
    """One finite latent in every container a deep read hashes: torch.save zip, gzipped, legacy,
    npz (kohya's three arrays), a bare npy, safetensors."""
    x = torch.randn(4, 16, 16, generator=torch.Generator().manual_seed(1))
    paths = [save_pt(folder / "a.pt", x), folder / "legacy.pt"]
    torch.save(x, folder / "legacy.pt", _use_new_zipfile_serialization=False)
    (folder / "g.pt").write_bytes(gzipped(pt_bytes(x)))
    write_npz(folder / "k.npz", latents=x.numpy(), original_size=np.array([64, 64]), crop_ltrb=np.zeros(4))
    np.save(folder / "n.npy", x.numpy())
    save_file({"latents": x.to(torch.bfloat16)}, str(folder / "s.safetensors"))
    return [*paths, folder / "g.pt", folder / "k.npz", folder / "n.npy", folder / "s.safetensors"]


def test_a_deep_read_without_the_digest_differs_by_the_digest_only(tmp_path: Path) -> None:
    """``digest=False`` (a scan without a state database) spares the xxh3 pass over the file:
    every other fact of the deep read stays, counts and latent statistics included."""
    import dataclasses

    import xxhash

    for path in _every_deep_format(tmp_path):
        hashed, spared = read_file(str(path), deep=True), read_file(str(path), deep=True, digest=False)
        assert hashed is not None and spared is not None, path
        assert hashed.digest == xxhash.xxh3_128_hexdigest(path.read_bytes()), path
        assert spared == dataclasses.replace(hashed, digest=None), path
        assert any(t.stats for t in spared.tensors) and all(t.nonfinite == 0 for t in spared.tensors if t.stats), path


def test_nonfinite_counts_only_the_view(tmp_path: Path) -> None:
    batch = torch.zeros(3, 4, 4)
    batch[0, 0, 0] = float("nan")  # outside the saved view
    batch[1, 2, 2] = float("inf")
    (t,) = read_file(str(save_pt(tmp_path / "v.pt", batch[1])), deep=True).tensors  # type: ignore[union-attr]
    assert t.nonfinite == 1


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float8_e5m2, torch.float64])
def test_nonfinite_in_every_float_format(tmp_path: Path, dtype: torch.dtype) -> None:
    x = torch.zeros(8, dtype=torch.float32)
    x[2], x[5] = float("nan"), float("-inf")
    (t,) = read_file(str(save_pt(tmp_path / "x.pt", x.to(dtype))), deep=True).tensors  # type: ignore[union-attr]
    assert t.nonfinite == 2


def test_float8_e4m3fn_nan(tmp_path: Path) -> None:
    x = torch.tensor([1.0, float("nan"), 2.0]).to(torch.float8_e4m3fn)
    (t,) = read_file(str(save_pt(tmp_path / "x.pt", x)), deep=True).tensors  # type: ignore[union-attr]
    assert t.nonfinite == 1


def test_foreign_bytes_are_not_a_cache_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    assert read_file(str(path)) is None


def test_zero_bytes_is_a_read_error(tmp_path: Path) -> None:
    path = tmp_path / "e.pt"
    path.write_bytes(b"")
    with pytest.raises(ReadError) as info:
        read_file(str(path))
    assert info.value.problem == "empty"


def test_quick_read_imports_neither_torch_nor_numpy(tmp_path: Path) -> None:
    import subprocess

    path = save_pt(tmp_path / "a.pt", {"x": latent()})
    npz = write_npz(tmp_path / "b.npz", latents=np.zeros(3, np.float32))
    code = (
        "import sys; from cachedoctor.scan import scan, ScanOptions; "
        f"r = scan([{str(tmp_path)!r}], ScanOptions(workers=1)); "
        "assert r.stats.files_read == 2, r.stats; "
        "print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert path.exists() and npz.exists()
