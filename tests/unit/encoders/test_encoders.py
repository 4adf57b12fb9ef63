"""Encoder adapters against the real libraries, with tiny real models built offline.

Every recompute is compared bit for bit with calling diffusers / transformers directly; every
refusal is an ``EncoderError`` naming the path and saying what to do. The Hub is switched off
for the whole module so an accidental download fails loudly instead of passing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from tiny_models import (
    CLIP_MAX_LENGTH,
    T5_MAX_LENGTH,
    build_tiny_clip,
    build_tiny_t5,
    build_tiny_vae,
    ldm_vae_state_dict,
)

from cachedoctor.encoders import (
    BUILTINS,
    ENTRY_POINT_GROUP,
    Encoder,
    EncoderError,
    Modality,
    Scaling,
    available,
    load_encoder,
)
from cachedoctor.install_hint import install_command

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No Hub: the env vars for fresh imports, the constants for huggingface_hub already imported."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    import huggingface_hub.constants as hub

    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))


@pytest.fixture(scope="module")
def vae_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_vae(tmp_path_factory.mktemp("vae") / "vae")


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_clip(tmp_path_factory.mktemp("clip") / "clip")


def images(seed: int = 0, size: tuple[int, int] = (16, 24)) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(2, 3, *size, generator=g) * 2 - 1


def direct_vae_latent(folder: Path, x: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    from diffusers import AutoencoderKL

    with torch.no_grad():
        return AutoencoderKL.from_pretrained(folder, torch_dtype=dtype).encode(x.to(dtype)).latent_dist.mode().float()


def encode_with(spec: str, batch: object) -> dict[str, torch.Tensor]:
    encoder = load_encoder(spec)
    encoder.load("cpu")
    return encoder.encode(batch)


# --- diffusers-vae ---------------------------------------------------------------------------


def test_vae_latents_equal_diffusers_posterior_mode(vae_dir: Path) -> None:
    encoder = load_encoder(f"diffusers-vae:{vae_dir}")
    assert (encoder.name, encoder.modality, encoder.output_keys) == (
        "diffusers-vae",
        Modality.IMAGE,
        ("latent", "latent_std"),
    )
    assert (encoder.dtype, encoder.downscale, encoder.latent_channels) == ("float32", 2, 4)
    encoder.load("cpu")
    x = images()
    out = encoder.encode(x)
    assert list(out) == ["latent", "latent_std"] and out["latent_std"].shape == out["latent"].shape
    latent = out["latent"]
    assert latent.shape == (2, 4, 8, 12) and latent.dtype == torch.float32 and latent.device.type == "cpu"
    assert torch.equal(latent, direct_vae_latent(vae_dir, x))
    assert torch.equal(encoder.encode(x)["latent"], latent)  # the mode, not a sample: repeatable
    assert not latent.is_inference()
    latent.mul_(2)  # an ordinary tensor: in-place scaling by the caller works


@pytest.mark.parametrize(
    ("shift", "expected"), [(None, Scaling(0.13025, 0.0)), (0.1159, Scaling(0.3611, 0.1159))], ids=["sdxl", "flux"]
)
def test_vae_scaling_is_the_configs(tmp_path: Path, shift: float | None, expected: Scaling) -> None:
    folder = build_tiny_vae(tmp_path / "vae", scaling_factor=expected.factor, shift_factor=shift)
    assert json.loads((folder / "config.json").read_text())["shift_factor"] == shift
    encoder = load_encoder(f"diffusers-vae:{folder}")
    assert encoder.scaling == expected
    latent = torch.tensor([1.0, -2.0])
    assert torch.equal(encoder.scaling.apply(latent), (latent - expected.shift) * expected.factor)


def test_vae_latent_channels_follow_the_config(tmp_path: Path) -> None:
    folder = build_tiny_vae(tmp_path / "vae", latent_channels=16)
    assert encode_with(f"diffusers-vae:{folder}", images())["latent"].shape == (2, 16, 8, 12)


def test_vae_pipeline_folder_uses_its_vae_subfolder(tmp_path: Path, vae_dir: Path) -> None:
    shutil.copytree(vae_dir, tmp_path / "pipe" / "vae")
    (tmp_path / "pipe" / "model_index.json").write_text("{}")
    encoder = load_encoder(f"diffusers-vae:{tmp_path / 'pipe'}")
    assert encoder.config_dir == tmp_path / "pipe" / "vae"
    x = images(1)
    encoder.load("cpu")
    assert torch.equal(encoder.encode(x)["latent"], direct_vae_latent(vae_dir, x))


def test_vae_bfloat16_computes_in_bfloat16_and_returns_float32(vae_dir: Path) -> None:
    encoder = load_encoder(f"diffusers-vae:{vae_dir}@bfloat16")
    assert encoder.dtype == "bfloat16" and encoder.path == vae_dir
    encoder.load("cpu")
    x = images(2)
    latent = encoder.encode(x)["latent"]
    assert latent.dtype == torch.float32
    assert torch.equal(latent, direct_vae_latent(vae_dir, x, torch.bfloat16))
    assert not torch.equal(latent, direct_vae_latent(vae_dir, x))


@pytest.mark.parametrize("form", ["diffusers-names", "ldm-safetensors", "ldm-ckpt"])
def test_vae_single_file_with_config_beside_it(tmp_path: Path, vae_dir: Path, form: str) -> None:
    from safetensors.torch import load_file, save_file

    state = load_file(vae_dir / "diffusion_pytorch_model.safetensors")
    shutil.copy(vae_dir / "config.json", tmp_path / "config.json")
    if form == "diffusers-names":
        path = tmp_path / "vae.safetensors"
        save_file(state, path)
    elif form == "ldm-safetensors":
        path = tmp_path / "sdxl_vae.safetensors"
        save_file(ldm_vae_state_dict(state), path)
    else:  # a whole-model LDM checkpoint: the VAE under first_stage_model., inside "state_dict"
        path = tmp_path / "model.ckpt"
        ldm = {f"first_stage_model.{k}": v for k, v in ldm_vae_state_dict(state).items()}
        torch.save({"state_dict": {**ldm, "model.diffusion_model.x": torch.zeros(1)}}, path)
    encoder = load_encoder(f"diffusers-vae:{path}")
    assert encoder.weights_file == path
    x = images(3)
    assert torch.equal(encode_with(f"diffusers-vae:{path}", x)["latent"], direct_vae_latent(vae_dir, x))


@pytest.mark.filterwarnings("ignore:The `local_dir_use_symlinks` argument is deprecated")
def test_diffusers_single_file_loading_needs_the_hub_for_its_config(tmp_path: Path, vae_dir: Path) -> None:
    """The fact behind refusing a lone weights file: diffusers fetches a config from the Hub."""
    from diffusers import AutoencoderKL

    lone = tmp_path / "vae.safetensors"
    shutil.copy(vae_dir / "diffusion_pytorch_model.safetensors", lone)
    with pytest.raises(OSError, match=r"config\.json"):
        AutoencoderKL.from_single_file(lone)
    with pytest.raises(EncoderError) as info:
        load_encoder(f"diffusers-vae:{lone}")
    assert info.value.path == str(lone)
    assert "config.json beside it" in info.value.message and "pass the diffusers VAE folder" in info.value.message


def write_unet_config(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"_class_name": "UNet2DConditionModel"}))
    (folder / "diffusion_pytorch_model.safetensors").write_bytes(b"")
    return folder


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda d: d / "nowhere", "no such file or folder"),
        (lambda d: d, "no model folder here"),
        (lambda d: (d / "notes.txt", (d / "notes.txt").write_text("hi"))[0], "not a model"),
        (
            lambda d: (
                d / "x.safetensors",
                (d / "x.safetensors").write_bytes(b"\xff" * 64),
                (d / "config.json").write_text("{}"),
            )[0],
            "not a safetensors file",
        ),
        (lambda d: write_unet_config(d / "unet") / "config.json", "not a model"),
        (lambda d: write_unet_config(d / "unet"), "describes a UNet2DConditionModel"),
        (
            lambda d: (d / "config.json", (d / "config.json").write_text("{}"))[0].parent,
            "no diffusion_pytorch_model weights",
        ),
    ],
    ids=["missing", "no-config", "text-file", "garbage-safetensors", "config-file", "unet", "no-weights"],
)
def test_vae_unusable_paths_say_what_to_do(tmp_path: Path, make, says: str) -> None:
    path = make(tmp_path)
    with pytest.raises(EncoderError) as info:
        load_encoder(f"diffusers-vae:{path}")
    assert info.value.path.startswith(str(tmp_path)) and says in info.value.message
    assert ("pass" in info.value.message and "never downloads" in info.value.message) or "adapter" in info.value.message


def test_vae_spec_without_a_path(tmp_path: Path) -> None:
    with pytest.raises(EncoderError, match="needs a model path: --encoder diffusers-vae:/path/to/vae"):
        load_encoder("diffusers-vae")


@pytest.mark.parametrize("single_file", [False, True], ids=["folder", "single-file"])
def test_vae_weights_missing_a_tensor_are_refused_not_randomly_filled(
    tmp_path: Path, vae_dir: Path, single_file: bool
) -> None:
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "vae"
    shutil.copytree(vae_dir, folder)
    weights = folder / "diffusion_pytorch_model.safetensors"
    state = load_file(weights)
    del state["decoder.conv_in.bias"]
    save_file(state, weights)
    encoder = load_encoder(f"diffusers-vae:{weights if single_file else folder}")
    with pytest.raises(
        EncoderError, match=r"1 of the VAE's 124 tensors are not in the weights .first: decoder\.conv_in\.bias"
    ):
        encoder.load("cpu")


def test_vae_fingerprint_is_stable_and_tracks_weights_and_dtype(tmp_path: Path) -> None:
    folder = build_tiny_vae(tmp_path / "vae")
    before = load_encoder(f"diffusers-vae:{folder}").fingerprint()
    encoder = load_encoder(f"diffusers-vae:{folder}")
    encoder.load("cpu")
    assert encoder.fingerprint() == before
    assert before.startswith(f"diffusers-vae|{folder.resolve()}|config=") and before.endswith("|float32")
    assert load_encoder(f"diffusers-vae:{folder}@bfloat16").fingerprint() == before[: -len("float32")] + "bfloat16"
    size = (folder / "diffusion_pytorch_model.safetensors").stat().st_size
    time.sleep(0.02)  # past the filesystem's timestamp granularity, as any real rewrite is
    build_tiny_vae(folder, seed=1)  # other weights, same size
    assert (folder / "diffusion_pytorch_model.safetensors").stat().st_size == size
    assert encoder.fingerprint() != before  # what a resumed repair computes: the files as they are now


# --- transformers-text -----------------------------------------------------------------------


def direct_text(model_cls: str, folder: Path, prompts: list[str]):
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    tokens = tokenizer(
        prompts, padding="max_length", max_length=tokenizer.model_max_length, truncation=True, return_tensors="pt"
    )
    with torch.no_grad():
        return tokens, getattr(transformers, model_cls).from_pretrained(folder)(input_ids=tokens.input_ids)


PROMPTS = ["the cat", "a cat sat on the mat with the other cat and the hat"]  # the second is truncated


def test_clip_with_projection_embeds_equal_transformers(clip_dir: Path) -> None:
    encoder = load_encoder(f"transformers-text:{clip_dir}")
    assert (encoder.modality, encoder.output_keys) == (Modality.TEXT, ("prompt_embeds", "pooled_prompt_embeds"))
    assert (encoder.downscale, encoder.latent_channels, encoder.scaling) == (1, None, Scaling())
    out = encode_with(f"transformers-text:{clip_dir}", PROMPTS)
    _, direct = direct_text("CLIPTextModelWithProjection", clip_dir, PROMPTS)
    assert out["prompt_embeds"].shape == (2, CLIP_MAX_LENGTH, 32) and out["pooled_prompt_embeds"].shape == (2, 16)
    assert torch.equal(out["prompt_embeds"], direct.last_hidden_state)
    assert torch.equal(out["pooled_prompt_embeds"], direct.text_embeds)
    assert all(t.dtype == torch.float32 and not t.is_inference() for t in out.values())


def test_clip_bfloat16_computes_in_bfloat16_and_returns_float32(clip_dir: Path) -> None:
    from transformers import AutoTokenizer, CLIPTextModelWithProjection

    out = encode_with(f"transformers-text:{clip_dir}@bfloat16", PROMPTS)
    model = CLIPTextModelWithProjection.from_pretrained(clip_dir, dtype=torch.bfloat16)
    assert model.dtype == torch.bfloat16
    tokens = AutoTokenizer.from_pretrained(clip_dir)(
        PROMPTS, padding="max_length", truncation=True, return_tensors="pt"
    )
    with torch.no_grad():
        direct = model(input_ids=tokens.input_ids)
    assert out["prompt_embeds"].dtype == torch.float32
    assert torch.equal(out["prompt_embeds"], direct.last_hidden_state.float())
    assert torch.equal(out["pooled_prompt_embeds"], direct.text_embeds.float())


def test_plain_clip_pools_with_pooler_output(tmp_path: Path, clip_dir: Path) -> None:
    folder = shutil.copytree(clip_dir, tmp_path / "clip")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["CLIPTextModel"]}))
    out = encode_with(f"transformers-text:{folder}", PROMPTS)
    _, direct = direct_text("CLIPTextModel", folder, PROMPTS)
    assert out["pooled_prompt_embeds"].shape == (2, 32)
    assert torch.equal(out["pooled_prompt_embeds"], direct.pooler_output)
    assert torch.equal(out["prompt_embeds"], direct.last_hidden_state)


def split_pipeline(clip_dir: Path, root: Path, suffix: str = "") -> Path:
    """A pipeline's layout: weights in text_encoder{suffix}/, tokenizer files in tokenizer{suffix}/."""
    for path in clip_dir.iterdir():
        is_model = path.name in ("config.json", "model.safetensors")
        target = root / (f"text_encoder{suffix}" if is_model else f"tokenizer{suffix}")
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target / path.name)
    return root


@pytest.mark.parametrize("which", ["pipeline", "text_encoder", "text_encoder_2"])
def test_text_pipeline_layouts_find_the_sibling_tokenizer(tmp_path: Path, clip_dir: Path, which: str) -> None:
    root = split_pipeline(clip_dir, tmp_path / "pipe", "_2" if which == "text_encoder_2" else "")
    path = root if which == "pipeline" else root / which
    encoder = load_encoder(f"transformers-text:{path}")
    assert encoder.tokenizer_dir == root / which.replace("text_encoder", "tokenizer").replace("pipeline", "tokenizer")
    out = encode_with(f"transformers-text:{path}", PROMPTS)
    assert torch.equal(out["prompt_embeds"], encode_with(f"transformers-text:{clip_dir}", PROMPTS)["prompt_embeds"])


def test_t5_embeds_and_int64_mask_equal_transformers(tmp_path: Path) -> None:
    folder = build_tiny_t5(tmp_path / "t5")
    encoder = load_encoder(f"transformers-text:{folder}")
    assert encoder.output_keys == ("prompt_embeds", "attention_mask")
    out = encode_with(f"transformers-text:{folder}", PROMPTS)
    tokens, direct = direct_text("T5EncoderModel", folder, PROMPTS)
    assert out["prompt_embeds"].shape == (2, T5_MAX_LENGTH, 32)
    assert torch.equal(out["prompt_embeds"], direct.last_hidden_state)
    assert out["attention_mask"].dtype == torch.int64 and torch.equal(out["attention_mask"], tokens.attention_mask)
    assert out["attention_mask"].tolist()[0] == [1, 1, 1, 1, 1, 1, 1, 0]  # "the cat": 6 letters' pieces + </s>


def test_text_fingerprint_tracks_the_tokenizer(tmp_path: Path, clip_dir: Path) -> None:
    folder = shutil.copytree(clip_dir, tmp_path / "clip")
    before = load_encoder(f"transformers-text:{folder}").fingerprint()
    assert before == load_encoder(f"transformers-text:{folder}").fingerprint()
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": 8}))
    assert load_encoder(f"transformers-text:{folder}").fingerprint() != before


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda d, c: d / "nowhere", "no such folder"),
        (lambda d, c: shutil.copy(c / "config.json", d / "config.json"), "not a folder"),
        (lambda d, c: d, "no model folder here"),
        (lambda d, c: build_tiny_vae(d / "vae"), "model_type None is not supported"),
        (lambda d, c: split_pipeline(c, d / "p") / "text_encoder_3", "no such folder"),
        (lambda d, c: shutil.rmtree(split_pipeline(c, d / "p") / "tokenizer") or d / "p", "no tokenizer files"),
    ],
    ids=["missing", "file", "empty", "vae-config", "missing-encoder", "no-tokenizer"],
)
def test_text_unusable_paths_say_what_to_do(tmp_path: Path, clip_dir: Path, make, says: str) -> None:
    path = make(tmp_path, clip_dir)
    with pytest.raises(EncoderError) as info:
        load_encoder(f"transformers-text:{path}")
    assert info.value.path.startswith(str(tmp_path)) and says in info.value.message


# --- specs, the registry, third parties ------------------------------------------------------

TOY_MODULE = """
from cachedoctor.encoders import Encoder, Modality

class Toy(Encoder):
    name, modality, output_keys = "toy", Modality.TEXT, ("prompt_embeds",)
    def __init__(self, arg):
        self.arg = arg
    def fingerprint(self):
        return f"toy|{self.arg}"
    def load(self, device):
        pass
    def encode(self, batch):
        import torch
        return {"prompt_embeds": torch.zeros(len(batch), 1)}

class Future(Toy):
    api_version = 2

def factory(arg):
    return Toy(arg)

def not_an_encoder(arg):
    return object()

def future(arg):
    return Future(arg)

def needs_missing_lib(arg):
    import cachedoctor_no_such_dependency  # noqa: F401

def broken(arg):
    raise ValueError("ARG must be a number")
"""


@pytest.fixture
def toy_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    """A factory module on sys.path, uniquely named per test (imports are cached)."""
    name = "toy_" + request.node.name.split("[")[0].replace("test_", "")
    (tmp_path / f"{name}.py").write_text(TOY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return name


def test_module_factory_spec_passes_the_arg(toy_module: str) -> None:
    assert load_encoder(f"{toy_module}:factory").arg is None
    encoder = load_encoder(f"{toy_module}:factory:C:/models/x:y@bfloat16")
    assert encoder.arg == "C:/models/x:y@bfloat16"  # everything after the second ':' is the ARG
    encoder.load("cpu")
    assert encoder.encode(["a", "b"])["prompt_embeds"].shape == (2, 1)


def test_third_party_entry_point_is_listed_and_loads(
    tmp_path: Path, toy_module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dist = tmp_path / "toy_dist-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-dist\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\ntoy = {toy_module}:factory\ndiffusers-vae = {toy_module}:factory\n"
    )
    registry = available()
    assert registry["toy"] == f"{toy_module}:factory"
    assert registry["diffusers-vae"] == BUILTINS["diffusers-vae"]  # a third party cannot take a built-in name
    assert load_encoder("toy:x").arg == "x"
    assert load_encoder("toy").arg is None


def test_installed_metadata_declares_the_builtins() -> None:
    from importlib.metadata import entry_points

    declared = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    assert {k: declared.get(k) for k in BUILTINS} == BUILTINS


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("nosuch", "unknown encoder 'nosuch'; use one of diffusers-vae, transformers-text"),
        ("no such/thing:x", "unknown encoder 'no such/thing'"),
        ("cachedoctor_no_such_module:factory", "no module named 'cachedoctor_no_such_module'; check the spelling"),
        ("{toy}:nope", "has no attribute 'nope'; name its factory"),
        ("{toy}:TOY_CONSTANT", "is not callable (int); name a factory function"),
        ("{toy}:not_an_encoder", "returned 'object', not a cachedoctor.encoders.Encoder"),
        ("{toy}:future", "adapter speaks encoder API v2, this cachedoctor v1"),
        ("{toy}:needs_missing_lib", "'cachedoctor_no_such_dependency' is not installed"),
        ("{toy}:broken:x", "failed: ValueError: ARG must be a number; check the ARG"),
    ],
)
def test_bad_specs_say_what_to_do(toy_module: str, tmp_path: Path, spec: str, says: str) -> None:
    (tmp_path / f"{toy_module}.py").write_text(TOY_MODULE + "\nTOY_CONSTANT = 3\n")
    spec = spec.format(toy=toy_module)
    with pytest.raises(EncoderError) as info:
        load_encoder(spec)
    assert info.value.path == spec and says in info.value.message


@pytest.mark.parametrize(
    ("adapter", "library"),
    [("diffusers-vae", "diffusers"), ("transformers-text", "transformers"), ("diffusers-vae", "torch")],
)
def test_builtin_without_its_library_names_the_encoders_extra(
    monkeypatch: pytest.MonkeyPatch, vae_dir: Path, adapter: str, library: str
) -> None:
    """The [repair] extra has no model library: a built-in adapter points to [encoders]."""
    monkeypatch.setitem(sys.modules, library, None)  # Python's own way to make an import fail
    with pytest.raises(EncoderError) as info:
        load_encoder(f"{adapter}:{vae_dir}")
    assert info.value.message == f"'{library}' is not installed; install it with: {install_command('encoders')}"


def test_the_documented_example_adapter_runs_and_is_shown_verbatim() -> None:
    example = REPO / "cachedoctor" / "encoders" / "example_adapter.py"
    assert example.read_text() in (REPO / "cachedoctor" / "encoders" / "EXAMPLE.md").read_text()
    encoder = load_encoder("cachedoctor.encoders.example_adapter:factory:4")
    assert isinstance(encoder, Encoder) and encoder.downscale == 4
    encoder.load("cpu")
    x = images(size=(16, 24))
    latent = encoder.encode(x)["latent"]
    assert latent.shape == (2, 3, 4, 6)
    torch.testing.assert_close(latent, x.reshape(2, 3, 4, 4, 6, 4).mean(dim=(3, 5)), rtol=0, atol=1e-6)


def test_listing_and_building_encoders_imports_no_torch(vae_dir: Path, clip_dir: Path) -> None:
    code = textwrap.dedent(
        f"""
        import sys
        from cachedoctor.encoders import available, load_encoder
        assert "diffusers-vae" in available()
        load_encoder({f"diffusers-vae:{vae_dir}"!r}).fingerprint()
        load_encoder({f"transformers-text:{clip_dir}"!r}).fingerprint()
        print(sorted(m for m in ("torch", "diffusers", "transformers", "numpy") if m in sys.modules))
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert result.stdout.strip() == "[]"
