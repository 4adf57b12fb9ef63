"""Tiny real models for encoder tests, built offline in milliseconds (no weights downloaded).

Each builder writes a folder that the real library loads with ``from_pretrained``: a diffusers
``AutoencoderKL``, a transformers CLIP text encoder with a real BPE tokenizer, a T5 encoder
with a real Unigram tokenizer (transformers 5 builds it from a vocab list; no sentencepiece).
"""

from __future__ import annotations

import json
import string
from pathlib import Path

import torch

#: The tiny CLIP's sequence length and widths, for tests that check shapes.
CLIP_MAX_LENGTH, CLIP_HIDDEN, CLIP_PROJECTION = 16, 32, 16
T5_MAX_LENGTH, T5_HIDDEN = 8, 32


def build_tiny_vae(
    folder: Path,
    *,
    latent_channels: int = 4,
    scaling_factor: float = 0.13025,
    shift_factor: float | None = None,
    seed: int = 0,
) -> Path:
    """A two-block ``AutoencoderKL`` (downscale 2) saved with ``save_pretrained``; returns ``folder``."""
    from diffusers import AutoencoderKL

    torch.manual_seed(seed)
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2,
        block_out_channels=(8, 16),
        layers_per_block=1,
        latent_channels=latent_channels,
        norm_num_groups=4,
        sample_size=32,
        scaling_factor=scaling_factor,
        shift_factor=shift_factor,
    )
    vae.save_pretrained(folder)
    return Path(folder)


def build_tiny_clip(folder: Path, *, seed: int = 0) -> Path:
    """A ``CLIPTextModelWithProjection`` (hidden 32, projection 16) and a ``CLIPTokenizer``
    built from a tiny ``vocab.json`` + ``merges.txt`` (max length 16); returns ``folder``."""
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, CLIPTokenizer

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokens = ["<|startoftext|>", "<|endoftext|>", *string.ascii_lowercase]
    tokens += [c + "</w>" for c in string.ascii_lowercase] + ["th", "th</w>", "the</w>", "ca", "cat</w>"]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    merges = ["#version: 0.2", "t h", "th e</w>", "t h</w>", "c a", "ca t</w>"]
    (folder / "merges.txt").write_text("\n".join(merges) + "\n", encoding="utf-8")
    tokenizer = CLIPTokenizer(
        vocab=str(folder / "vocab.json"), merges=str(folder / "merges.txt"), model_max_length=CLIP_MAX_LENGTH
    )
    config = CLIPTextConfig(
        vocab_size=len(vocab),
        hidden_size=CLIP_HIDDEN,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=CLIP_MAX_LENGTH,
        projection_dim=CLIP_PROJECTION,
        bos_token_id=vocab["<|startoftext|>"],
        eos_token_id=vocab["<|endoftext|>"],
        pad_token_id=vocab["<|endoftext|>"],
    )
    torch.manual_seed(seed)
    CLIPTextModelWithProjection(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def build_tiny_t5(folder: Path, *, seed: int = 0) -> Path:
    """A ``T5EncoderModel`` (d_model 32) and a Unigram ``T5Tokenizer`` (max length 8)."""
    from transformers import T5Config, T5EncoderModel, T5Tokenizer

    folder = Path(folder)
    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -2.0)]
    vocab += [(c, -3.0) for c in string.ascii_lowercase] + [("\u2581" + c, -4.0) for c in string.ascii_lowercase]
    tokenizer = T5Tokenizer(vocab=vocab, extra_ids=0, model_max_length=T5_MAX_LENGTH)
    config = T5Config(
        vocab_size=len(vocab), d_model=T5_HIDDEN, d_kv=8, d_ff=64, num_layers=2, num_heads=2, decoder_start_token_id=0
    )
    torch.manual_seed(seed)
    T5EncoderModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def ldm_vae_state_dict(state: dict[str, torch.Tensor], num_blocks: int = 2) -> dict[str, torch.Tensor]:
    """A diffusers VAE state dict renamed to the original (LDM) checkpoint names.

    The inverse of diffusers' ``convert_ldm_vae_checkpoint``, after the mapping in diffusers'
    ``scripts/convert_diffusers_to_original_stable_diffusion.py``: what kohya-style single-file
    VAEs (``sdxl_vae.safetensors``) hold.
    """
    renames = [("nin_shortcut", "conv_shortcut"), ("norm_out", "conv_norm_out"), ("mid.attn_1.", "mid_block.attentions.0.")]
    for i in range(num_blocks):
        up = num_blocks - 1 - i
        renames += [(f"encoder.down.{i}.block.", f"encoder.down_blocks.{i}.resnets.")]
        renames += [(f"decoder.up.{up}.block.", f"decoder.up_blocks.{i}.resnets.")]
        if i < num_blocks - 1:
            renames += [(f"down.{i}.downsample.", f"down_blocks.{i}.downsamplers.0.")]
            renames += [(f"up.{up}.upsample.", f"up_blocks.{i}.upsamplers.0.")]
    renames += [(f"mid.block_{i + 1}.", f"mid_block.resnets.{i}.") for i in range(2)]
    attention = [("norm.", "group_norm."), ("q.", "to_q."), ("k.", "to_k."), ("v.", "to_v."), ("proj_out.", "to_out.0.")]
    out = {}
    for key, value in state.items():
        new = key
        for ldm, hf in renames:
            new = new.replace(hf, ldm)
        if "attn_1." in new:
            for ldm, hf in attention:
                new = new.replace(hf, ldm)
            if value.ndim == 2:  # LDM attention projections are 1x1 convolutions
                value = value.reshape(*value.shape, 1, 1)
        out[new] = value.clone()
    return out
