"""Each test plants one defect and asserts the exact finding: kind, path and fix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from factories import findings_of, gzipped, latent, peers, pt_bytes, rezip, save_pt, saved_on, write_npz
from safetensors.torch import save_file


def test_healthy_mixed_cache_has_no_finding(tmp_path: Path) -> None:
    vae = tmp_path / "vae"
    peers(vae, 4)
    (vae / "gz.pt").write_bytes(gzipped(pt_bytes(latent(seed=9))))
    save_pt(vae / "bucket2.pt", latent(h=12, w=6, seed=10))
    text = tmp_path / "text"
    for i in range(3):
        save_pt(
            text / f"{i:032x}-sdxl.pt",
            {
                "prompt_embeds": torch.zeros(1, 8, 32, dtype=torch.bfloat16),
                "pooled_prompt_embeds": torch.zeros(16, dtype=torch.bfloat16),
            },
        )
    kohya = tmp_path / "kohya"
    for i, (h, w) in enumerate([(8, 6), (6, 8), (8, 8)]):
        write_npz(
            kohya / f"img{i}_{w * 8:04d}x{h * 8:04d}_sdxl.npz",
            **{
                f"latents_{h}x{w}": np.zeros((4, h, w), np.float32),
                "original_size": np.array([w * 8, h * 8]),
                "crop_ltrb": np.array([0.0, 0.0, w * 8.0, h * 8.0]),
            },
        )
    write_npz(
        kohya / "multi_0064x0064_sdxl.npz",
        latents_8x8=np.zeros((4, 8, 8), np.float32),
        latents_4x4=np.zeros((4, 4, 4), np.float32),
        original_size=np.array([64, 64]),
        crop_ltrb=np.array([0.0, 0.0, 64.0, 64.0]),
    )
    (kohya / "img0.png").write_bytes(b"\x89PNG\r\n\x1a\n not a cache file")
    save_file({"latents": torch.zeros(4, 8, 8)}, str(tmp_path / "x.safetensors"))
    assert findings_of(tmp_path, deep=True) == []
    assert findings_of(tmp_path, deep=False, workers=2) == []


# corrupt-archive ---------------------------------------------------------------------------


def test_zero_bytes(tmp_path: Path) -> None:
    peers(tmp_path)
    bad = tmp_path / "empty.pt"
    bad.write_bytes(b"")
    assert findings_of(tmp_path) == [("corrupt-archive", str(bad), "recompute")]


def test_truncated_torch_file(tmp_path: Path) -> None:
    peers(tmp_path)
    data = pt_bytes(latent())
    bad = tmp_path / "cut.pt"
    bad.write_bytes(data[: len(data) // 2])
    assert findings_of(tmp_path) == [("corrupt-archive", str(bad), "recompute")]


def test_truncated_by_one_byte(tmp_path: Path) -> None:
    peers(tmp_path)
    bad = tmp_path / "cut.pt"
    bad.write_bytes(pt_bytes(latent())[:-1])
    assert findings_of(tmp_path) == [("corrupt-archive", str(bad), "recompute")]


def test_zip_without_data_pkl(tmp_path: Path) -> None:
    peers(tmp_path)
    bad = tmp_path / "nopkl.pt"
    bad.write_bytes(rezip(pt_bytes(latent()), drop="data.pkl"))
    assert findings_of(tmp_path) == [("corrupt-archive", str(bad), "recompute")]


def test_record_smaller_than_its_storage(tmp_path: Path) -> None:
    peers(tmp_path)
    bad = tmp_path / "short.pt"
    bad.write_bytes(rezip(pt_bytes(latent()), replace={"data/0": b"\x00" * 100}))
    assert findings_of(tmp_path) == [("corrupt-archive", str(bad), "recompute")]


def test_flipped_data_byte_is_seen_only_by_deep(tmp_path: Path) -> None:
    peers(tmp_path)
    data = bytearray(pt_bytes(latent()))
    index = data.index(b"data/0") + 200  # inside the record that follows the name
    data[index] ^= 0x40
    bad = tmp_path / "flip.pt"
    bad.write_bytes(bytes(data))
    assert torch.load(bad, weights_only=True).shape == (4, 8, 8)  # torch.load does not notice
    assert findings_of(tmp_path) == []
    assert findings_of(tmp_path, deep=True) == [("corrupt-archive", str(bad), "recompute")]


def test_gzip_truncated(tmp_path: Path) -> None:
    peers(tmp_path)
    data = gzipped(pt_bytes(latent()))
    bad = tmp_path / "gz.pt"
    bad.write_bytes(data[:-10])
    assert findings_of(tmp_path) == [("corrupt-archive", str(bad), "recompute")]


def test_plain_pickle_named_pt(tmp_path: Path) -> None:
    import pickle

    peers(tmp_path)
    bad = tmp_path / "plain.pt"
    bad.write_bytes(pickle.dumps({"latents": [1, 2, 3]}, protocol=4))
    assert findings_of(tmp_path) == [("corrupt-archive", str(bad), "recompute")]


def test_unknown_bytes_under_a_cache_name(tmp_path: Path) -> None:
    peers(tmp_path)
    bad = tmp_path / "junk.pt"
    bad.write_bytes(b"<html>502 Bad Gateway</html>")
    (tmp_path / "README.txt").write_text("not a cache file, skipped")
    assert findings_of(tmp_path) == [("corrupt-archive", str(bad), "recompute")]


def test_safetensors_header_longer_than_file(tmp_path: Path) -> None:
    good = tmp_path / "ok.safetensors"
    save_file({"latents": torch.zeros(4, 8, 8)}, str(good))
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(good.read_bytes()[:-50])
    assert findings_of(tmp_path) == [("corrupt-archive", str(bad), "recompute")]


def test_npz_truncated(tmp_path: Path) -> None:
    good = write_npz(tmp_path / "a.npz", latents_8x8=np.zeros((4, 8, 8), np.float32))
    bad = tmp_path / "b.npz"
    bad.write_bytes(good.read_bytes()[:300])
    assert findings_of(tmp_path) == [("corrupt-archive", str(bad), "recompute")]


def test_npz_flipped_byte_deep(tmp_path: Path) -> None:
    good = write_npz(tmp_path / "a.npz", latents_8x8=np.zeros((4, 8, 8), np.float32))
    data = bytearray(good.read_bytes())
    data[200] ^= 0x01
    bad = tmp_path / "b.npz"
    bad.write_bytes(bytes(data))
    assert findings_of(tmp_path) == []
    assert findings_of(tmp_path, deep=True) == [("corrupt-archive", str(bad), "recompute")]


# partial-write -----------------------------------------------------------------------------


def test_simpletuner_temp_file(tmp_path: Path) -> None:
    peers(tmp_path)
    tmp = tmp_path / "tmpa1b2c3d4"
    tmp.write_bytes(pt_bytes(latent())[:500])
    assert findings_of(tmp_path) == [("partial-write", str(tmp), "quarantine")]


def test_dot_tmp_and_partial_files(tmp_path: Path) -> None:
    peers(tmp_path)
    a = tmp_path / "x.pt.tmp"
    a.write_bytes(b"")
    b = tmp_path / "y.npz.partial"
    b.write_bytes(b"PK")
    assert sorted(findings_of(tmp_path)) == [
        ("partial-write", str(a), "quarantine"),
        ("partial-write", str(b), "quarantine"),
    ]


# batch-leak --------------------------------------------------------------------------------


def test_saved_view_of_a_batch(tmp_path: Path) -> None:
    peers(tmp_path)
    batch = torch.randn(7, 4, 8, 8).to(torch.bfloat16)
    bad = save_pt(tmp_path / "view.pt", batch[2])
    assert findings_of(tmp_path) == [("batch-leak", str(bad), "clone-storage")]


def test_first_item_view_leaks_with_offset_zero(tmp_path: Path) -> None:
    peers(tmp_path)
    bad = save_pt(tmp_path / "first.pt", torch.randn(7, 4, 8, 8).to(torch.bfloat16)[0])
    assert findings_of(tmp_path) == [("batch-leak", str(bad), "clone-storage")]


def test_clone_does_not_leak(tmp_path: Path) -> None:
    peers(tmp_path)
    save_pt(tmp_path / "clone.pt", torch.randn(7, 4, 8, 8).to(torch.bfloat16)[2].clone())
    assert findings_of(tmp_path) == []


def test_leading_batch_dimension(tmp_path: Path) -> None:
    peers(tmp_path)
    bad = save_pt(tmp_path / "batch.pt", torch.randn(7, 4, 8, 8).to(torch.bfloat16))
    assert findings_of(tmp_path) == [("batch-leak", str(bad), "recompute")]


# device-tagged -----------------------------------------------------------------------------


def test_cuda_tagged_storage(tmp_path: Path) -> None:
    peers(tmp_path)
    with saved_on("cuda:3"):
        bad = save_pt(tmp_path / "gpu.pt", latent())
    found = findings_of(tmp_path)
    assert found == [("device-tagged", str(bad), "rewrite-cpu")]


def test_cuda_tagged_dict_in_gzip(tmp_path: Path) -> None:
    for i in range(3):
        (tmp_path / f"{i}.pt").write_bytes(gzipped(pt_bytes({"latent_image": latent(seed=i)})))
    with saved_on("cuda:0"):
        data = pt_bytes({"latent_image": latent()})
    bad = tmp_path / "gpu.pt"
    bad.write_bytes(gzipped(data))
    assert findings_of(tmp_path) == [("device-tagged", str(bad), "rewrite-cpu")]


# non-finite --------------------------------------------------------------------------------


def test_nan_in_bf16_latent_deep_only(tmp_path: Path) -> None:
    peers(tmp_path)
    x = latent()
    x[1, 2, 3] = float("nan")
    bad = save_pt(tmp_path / "nan.pt", x)
    assert findings_of(tmp_path) == []
    assert findings_of(tmp_path, deep=True) == [("non-finite", str(bad), "recompute")]


def test_inf_in_npz_latent(tmp_path: Path) -> None:
    for i in range(3):
        write_npz(tmp_path / f"{i}.npz", latents_8x8=np.zeros((4, 8, 8), np.float32))
    arr = np.zeros((4, 8, 8), np.float32)
    arr[0, 0, 0] = np.inf
    bad = write_npz(tmp_path / "inf.npz", latents_8x8=arr)
    assert findings_of(tmp_path, deep=True) == [("non-finite", str(bad), "recompute")]


def test_nan_in_safetensors(tmp_path: Path) -> None:
    x = torch.zeros(4, 8, 8)
    x[0, 0, 0] = float("nan")
    bad = tmp_path / "n.safetensors"
    save_file({"latents": x}, str(bad))
    assert findings_of(tmp_path, deep=True) == [("non-finite", str(bad), "recompute")]


# dtype-mismatch / shape-mismatch -----------------------------------------------------------


def test_fp32_file_in_bf16_folder(tmp_path: Path) -> None:
    peers(tmp_path)
    bad = save_pt(tmp_path / "fp32.pt", latent(dtype=torch.float32))
    assert findings_of(tmp_path) == [("dtype-mismatch", str(bad), "recompute")]


def test_dtype_tie_says_nothing(tmp_path: Path) -> None:
    save_pt(tmp_path / "a.pt", latent(dtype=torch.float32))
    save_pt(tmp_path / "b.pt", latent())
    assert findings_of(tmp_path) == []


def test_channel_count_differs(tmp_path: Path) -> None:
    peers(tmp_path)
    bad = save_pt(tmp_path / "c16.pt", latent(c=16))
    assert findings_of(tmp_path) == [("shape-mismatch", str(bad), "recompute")]


def test_rank_differs_without_batch(tmp_path: Path) -> None:
    peers(tmp_path)
    bad = save_pt(tmp_path / "flat.pt", torch.zeros(4, 64, dtype=torch.bfloat16))
    assert findings_of(tmp_path) == [("shape-mismatch", str(bad), "recompute")]


def test_text_embed_width_differs(tmp_path: Path) -> None:
    def embed(width: int) -> dict:
        return {
            "prompt_embeds": torch.zeros(1, 8, width, dtype=torch.bfloat16),
            "pooled_prompt_embeds": torch.zeros(16, dtype=torch.bfloat16),
        }

    for i in range(3):
        save_pt(tmp_path / f"{i}-sdxl.pt", embed(32))
    bad = save_pt(tmp_path / "x-sdxl.pt", embed(48))
    assert findings_of(tmp_path) == [("shape-mismatch", str(bad), "recompute")]


def test_buckets_of_different_spatial_size_are_healthy(tmp_path: Path) -> None:
    for i, (h, w) in enumerate([(8, 8), (12, 6), (6, 12), (10, 8)]):
        save_pt(tmp_path / f"{i}.pt", latent(h=h, w=w))
    assert findings_of(tmp_path) == []
