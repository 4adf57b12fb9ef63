"""Every architecture kohya-ss/musubi-tuner caches for, as plain data: how its datasets bucket,
what its ``<arch>_cache_latents.py`` encodes and how, and the keys the ``save_*`` functions write.

Written from reading musubi-tuner at commit 30c658c (paths below ``src/musubi_tuner/``):
``dataset/architectures.py:1-33`` (names), ``dataset/bucket.py:41-72`` (``reso_steps``),
``dataset/image_video_dataset.py:578-642`` (which archs a ``VideoDataset`` accepts, their fps),
``dataset/cache_io.py:40-532`` (every ``save_latent_cache_*`` / ``save_text_encoder_output_cache_*``)
and each arch's caching script (cited per entry). A key pattern's ``{F}``/``{H}``/``{W}`` are the
saved tensor's frame, height and width in latent cells (``H = bucket height / downscale``),
``{i}`` a control index, ``{dtype}`` torch's name without ``torch.`` (``float32``, ``bfloat16``:
``utils/model_utils.py:92-95``), ``{idtype}`` an index tensor's dtype (int64).

``recompute_why`` is ``None`` only when encoding the prepared image with a diffusers 2D
``AutoencoderKL`` and a known scalar transform gives musubi's latent (only Z-Image); otherwise it
says why not and what to run instead.
"""

from __future__ import annotations

from dataclasses import dataclass

LATENT = "latents_{F}x{H}x{W}_{dtype}"
HV_VAE = "HunyuanVideo AutoencoderKLCausal3D (3D causal, 8x spatial, 4x temporal, 16 channels)"
QWEN_VAE = "Qwen-Image AutoencoderKLQwenImage (3D causal, 8x, 16 channels; qwen_image/qwen_image_autoencoder_kl.py)"
QWEN_WHY = "{name} caches a Qwen-Image 3D VAE's mode normalised per channel ((z - mean) / std), which this repair does not run; re-cache it with musubi-tuner's {script}"


@dataclass(frozen=True, slots=True)
class Arch:
    """One musubi-tuner architecture: its ``_<short>.safetensors`` caches and how they were made."""

    short: str  # in file names: <key>_<WWWW>x<HHHH>_<short>.safetensors, <key>_<short>_te.safetensors
    full: str  # its ``*_FULL`` name in dataset/architectures.py
    reso_steps: int  # BucketSelector's step (bucket.py:41-72)
    downscale: int  # pixels per latent cell (the cache's H and W are the bucket's divided by it)
    video: bool  # its VideoDataset works (image_video_dataset.py:628-642)
    target_fps: float | None  # VideoDataset's target fps (image_video_dataset.py:579-640)
    layout: str  # the main latent's axes: "CHW", "CFHW" (F=1 for an image), "HWD" (pixel patch tokens)
    latent_keys: tuple[str, ...]  # every key family its save_latent_cache_* may write; the first is the latent
    te_keys: tuple[str, ...]  # every key its save_text_encoder_output_cache_* may write
    vae: str
    posterior: str  # "mode" (the mean), "sample" (a draw), "none" (no VAE)
    transform: str  # applied after the posterior, before saving
    latent_dtype: str  # default saved dtype of the latent
    latent_script: str
    te_script: str
    recompute_why: str | None
    te_merge: bool = True  # save_text_encoder_output_cache_common(merge_existing=...) (cache_io.py:487-532)
    written: str | None = None  # the files' ``architecture`` metadata where it is not ``full`` (cache_io.py:178, 397)

    @property
    def metadata_name(self) -> str:
        """The ``architecture`` its latent and text-encoder files carry (cache_io.py:305-313, 502-506)."""
        return self.written or self.full


def _why(what: str, script: str) -> str:
    return f"{what}, which this repair does not run; re-cache it with musubi-tuner's {script}"


_ARCHS = (
    Arch(
        "hv", "hunyuan_video", 16, 8, True, 24.0, "CFHW", (LATENT,),
        ("llm_{dtype}", "llm_mask", "clipL_{dtype}", "clipL_mask"),  # cache_io.py:327-341, two passes merged
        HV_VAE, "sample", "none (cache_latents.py:265-266: scaling_factor left out)", "float16",
        "cache_latents.py", "cache_text_encoder_outputs.py",
        _why("HunyuanVideo caches a 3D causal VAE's sample", "cache_latents.py"),
    ),
    Arch(
        "wan", "wan", 16, 8, True, 16.0, "CFHW",
        (LATENT, "clip_{dtype}", "latents_image_{F}x{H}x{W}_{dtype}", "latents_control_{F}x{H}x{W}_{dtype}", "f_indices_int32"),
        ("varlen_t5_{dtype}",),  # cache_io.py:344-352
        "Wan2.1 WanVAE (3D causal, 8x spatial, 4x temporal, 16 channels; wan/modules/vae.py)", "mode",
        "per channel: (mu - mean) * (1 / std), 16 fixed values (wan/modules/vae.py:530-568, 657-701)", "bfloat16",
        "wan_cache_latents.py", "wan_cache_text_encoder_outputs.py",
        _why("Wan caches a 3D causal VAE's mean normalised per channel", "wan_cache_latents.py"),
    ),
    Arch(
        "fp", "framepack", 16, 8, True, 30.0, "CFHW",
        (LATENT, "latents_clean_{F}x{H}x{W}_{dtype}", "latents_clean_2x_{F}x{H}x{W}_{dtype}",
         "latents_clean_4x_{F}x{H}x{W}_{dtype}", "image_embeddings_{dtype}", "latent_indices_{idtype}",
         "clean_latent_indices_{idtype}", "clean_latent_2x_indices_{idtype}", "clean_latent_4x_indices_{idtype}"),
        ("llama_vec_{dtype}", "llama_attention_mask", "clip_l_pooler_{dtype}"),  # cache_io.py:355-366
        HV_VAE, "sample", "scale: z * scaling_factor (frame_pack/hunyuan.py:131-134)", "float16",
        "fpack_cache_latents.py", "fpack_cache_text_encoder_outputs.py",
        _why("FramePack caches per-section 3D VAE samples with SigLIP image embeddings", "fpack_cache_latents.py"),
    ),
    Arch(
        "fk", "flux_kontext", 16, 8, False, 1.0, "CHW",  # fps is a placeholder: image_video_dataset.py:582
        ("latents_1x{H}x{W}_{dtype}", "latents_control_1x{H}x{W}_{dtype}"),  # cache_io.py:121-138
        ("t5_vec_{dtype}", "clip_l_pooler_{dtype}"),
        "FLUX.1 AutoEncoder (flux/flux_models.py; diffusers AutoencoderKL-compatible)", "sample",
        "scale and shift: 0.3611 * (z - 0.1159) (flux/flux_models.py:353-356)", "float32",
        "flux_kontext_cache_latents.py", "flux_kontext_cache_text_encoder_outputs.py",
        _why("each FLUX.1 Kontext file also holds its control image's latent (latents_control_...)", "flux_kontext_cache_latents.py"),
    ),
    *(
        Arch(
            short, full, 16, 16, False, None, "CHW",
            ("latents_{H}x{W}_{dtype}", "latents_control_{i}_{H}x{W}_{dtype}"),  # cache_io.py:141-159: no F
            ("ctx_vec_{dtype}",),  # cache_io.py:381-388
            "FLUX.2 AutoEncoder (flux_2/flux2_models.py), 8x conv then 2x2 patchify: 128 channels", "mode",
            "2x2 patchify, then BatchNorm running statistics per channel (flux_2/flux2_models.py:365-386)", "float32",
            "flux_2_cache_latents.py", "flux_2_cache_text_encoder_outputs.py",
            _why("FLUX.2 caches a patchified mean normalised per channel by BatchNorm statistics", "flux_2_cache_latents.py"),
        )
        for short, full in (("f2d", "flux_2_dev"), ("f2k4b", "flux_2_klein_4b"), ("f2k9b", "flux_2_klein_9b"))
    ),
    *(
        Arch(
            short, full, 16, 8, False, None, "CFHW",
            (LATENT, "latents_control_{i}_{F}x{H}x{W}_{dtype}"),  # cache_io.py:162-178
            ("varlen_vl_embed_{dtype}",),  # cache_io.py:391-397
            QWEN_VAE, "mode", "per channel: (z - latents_mean) * (1 / latents_std) (qwen_image_autoencoder_kl.py:1009-1038)",
            "bfloat16", "qwen_image_cache_latents.py", "qwen_image_cache_text_encoder_outputs.py",
            QWEN_WHY.format(name=name, script="qwen_image_cache_latents.py"),
            written="qwen_image",  # every Qwen-Image variant's files say qwen_image
        )
        for short, full, name in (
            ("qi", "qwen_image", "Qwen-Image"),
            ("qie", "qwen_image_edit", "Qwen-Image-Edit"),
            ("qil", "qwen_image_layered", "Qwen-Image-Layered"),
        )
    ),
    Arch(
        "k5", "kandinsky5", 16, 8, True, 24.0, "CFHW",
        (LATENT, "latents_image_{F}x{H}x{W}_{dtype}", "latents_control_{F}x{H}x{W}_{dtype}", "vae_scaling_factor"),
        ("text_embeds_{dtype}", "pooled_embed_{dtype}", "attention_mask"),  # cache_io.py:419-430
        "HunyuanVideo VAE, or a Flux AutoencoderKL for image configs (kandinsky5/models/vae.py:1058-1150)", "sample",
        "scale: z * vae.config.scaling_factor, no shift (kandinsky5_cache_latents.py:60-70)", "float16",
        "kandinsky5_cache_latents.py", "kandinsky5_cache_text_encoder_outputs.py",
        _why("Kandinsky 5 caches a VAE sample with first/last-frame latents (latents_image_...)", "kandinsky5_cache_latents.py"),
    ),
    Arch(
        "hv15", "hunyuan_video_1_5", 16, 16, True, 24.0, "CFHW",
        (LATENT, "latents_image_{F}x{H}x{W}_{dtype}", "siglip_{dtype}"),  # cache_io.py:229-249
        ("varlen_vl_embed_{dtype}", "varlen_byt5_embed_{dtype}"),  # cache_io.py:433-440
        "HunyuanVideo 1.5 AutoencoderKLConv3D (16x spatial, 32 channels)", "mode",
        "none (hv_1_5_cache_latents.py:43-44)", "float16",
        "hv_1_5_cache_latents.py", "hv_1_5_cache_text_encoder_outputs.py",
        _why("HunyuanVideo 1.5 caches a 3D VAE's mean", "hv_1_5_cache_latents.py"),
    ),
    Arch(
        "zi", "z_image", 16, 8, False, None, "CHW",
        ("latents_1x{H}x{W}_{dtype}",),  # cache_io.py:252-261: (C, H, W) under an F=1 name
        ("varlen_llm_embed_{dtype}",),  # cache_io.py:443-449, trimmed to the mask's length
        "Z-Image AutoencoderKL (zimage/zimage_autoencoder.py; the Flux VAE, diffusers key names, float32)", "mode",
        "none (zimage_cache_latents.py:65-74)", "float32",
        "zimage_cache_latents.py", "zimage_cache_text_encoder_outputs.py", None,
    ),
    Arch(
        "ho1", "hidream_o1_image", 32, 32, False, None, "HWD",
        ("latents_1x{H}x{W}_{dtype}", "latents_control_{i}_{H}x{W}_{dtype}"),  # cache_io.py:264-290
        ("varlen_input_ids_{dtype}", "varlen_input_embeds_{dtype}", "varlen_position_ids_{dtype}",
         "varlen_token_types_{dtype}", "varlen_pixel_values_{dtype}", "varlen_image_grid_thw_{dtype}"),
        "none: 32x32 pixel patches of x / 127.5 - 1 (hidream_o1/hidream_o1_utils.py:191-223)", "none",
        "none", "bfloat16", "hidream_o1_cache_pixel.py", "hidream_o1_cache_text_encoder_outputs.py",
        _why("HiDream-O1 caches 32x32 pixel patch tokens, not a VAE latent", "hidream_o1_cache_pixel.py"),
        te_merge=False,  # cache_io.py:484
    ),
    Arch(
        "i4", "ideogram4", 16, 16, False, None, "CHW",
        ("latents_1x{H}x{W}_{dtype}",),  # cache_io.py:293-302
        ("varlen_i4_llm_features_{dtype}",),  # cache_io.py:452-458
        "Ideogram 4 AutoEncoder (ideogram4/ideogram4_autoencoder.py), mean then 2x2 patchify", "mode",
        "2x2 patchify as (pi pj c) channels, no normalisation; input x / 255 * 2 - 1 (ideogram4_utils.py:585-587)",
        "bfloat16", "ideogram4_cache_latents.py", "ideogram4_cache_text_encoder_outputs.py",
        _why("Ideogram 4 caches a patchified VAE mean", "ideogram4_cache_latents.py"),
    ),
    Arch(
        "kr2", "krea2", 16, 8, False, None, "CFHW",
        (LATENT,),  # cache_io.py:181-194
        ("varlen_krea2_vl_embed_{dtype}",),  # cache_io.py:400-416
        QWEN_VAE, "mode", "per channel: (z - latents_mean) * (1 / latents_std) (krea2_cache_latents.py:25-43)",
        "bfloat16", "krea2_cache_latents.py", "krea2_cache_text_encoder_outputs.py",
        QWEN_WHY.format(name="Krea 2", script="krea2_cache_latents.py"),
    ),
)  # fmt: skip

#: short name -> Arch, for every name in musubi's dataset/architectures.py
ARCHS: dict[str, Arch] = {a.short: a for a in _ARCHS}


def arch_of(short: str) -> Arch:
    """The architecture of a short name (``wan``, ``zi``); ``ValueError`` for any other."""
    found = ARCHS.get(short)
    if found is None:
        raise ValueError(f"unknown musubi-tuner architecture {short!r}; known: {', '.join(ARCHS)}")
    return found
