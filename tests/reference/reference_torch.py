"""What the reference scripts that run PyTorch share: the deterministic set-up, error measures, writing fixtures so
that a rerun gives byte-identical files, wick's float8 quantizer, Flux's latent packing, the CLIP vocabulary, and the
PEFT / diffusers plumbing of the LoRA cases (adapter layers, diffusers' LoRA save and load paths, model folders).

    from reference_torch import deterministic_torch, generator_metadata, rel_err, write_f32
    deterministic_torch()                                   # one thread, deterministic algorithms
    write_f32(case, os.path.join(OUT_DIR, "case.safetensors"), generator_metadata(__file__, diffusers, peft))
    assert rel_err(out, case["output"]) <= 1e-6

Needs torch and safetensors; peft, diffusers and open_clip are imported by the functions that use them, so a script
with none of them (make_float8_fixtures.py) can import this module. The standard-library helpers are in
reference_common.py.
"""
import gzip
import json
import logging
import math
import os
import shutil
import tempfile
from contextlib import contextmanager

import torch
from safetensors.torch import save_file

from reference_common import REPO, sort_metadata


def deterministic_torch():
    """One CPU thread and torch.use_deterministic_algorithms(True): a rerun computes the same bits."""
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)


def rel_err(a, b):
    """max |a - b| / max |b|, computed in float64."""
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).abs().max() / b.abs().max())


def rel_err_f32(a, b):
    """max |a - b| / max |b|, computed in float32."""
    return float((a.float() - b.float()).abs().max() / b.float().abs().max())


def uniform(gen, shape, bound):
    """float32 values uniform in [-bound, bound) from the torch.Generator `gen`."""
    return (torch.rand(shape, generator=gen, dtype=torch.float32) * 2 - 1) * bound


# ---------------------------------------------------------------------------------------------------------------
# Writing fixtures
# ---------------------------------------------------------------------------------------------------------------

def generator_metadata(script, *packages):
    """{"generator": "tests/reference/<script's file name>", "torch": torch.__version__, and for each module in
    `packages` its __name__: its __version__}, e.g. generator_metadata(__file__, diffusers, peft)."""
    metadata = {"generator": "tests/reference/" + os.path.basename(script), "torch": torch.__version__}
    for package in packages:
        metadata[package.__name__] = package.__version__
    return metadata


def write_f32(tensors, path, metadata=None):
    """Saves detached contiguous copies of `tensors`, floating ones as float32, with the metadata keys sorted, and
    prints the file's size."""
    tensors = {k: v.detach().to(torch.float32 if v.is_floating_point() else v.dtype).contiguous().clone()
               for k, v in tensors.items()}
    save_file(tensors, path, metadata=metadata)
    sort_metadata(path)
    print(f"  wrote {os.path.relpath(path, REPO)}: {len(tensors)} tensors, {os.path.getsize(path)} bytes")


def save_sorted(tensors, path, metadata):
    """save_file of `tensors` (contiguous, in name order) with the metadata keys sorted; dtypes are kept."""
    save_file({k: v.contiguous() for k, v in sorted(tensors.items())}, path, metadata=metadata)
    sort_metadata(path)


# ---------------------------------------------------------------------------------------------------------------
# wick's float8 weight quantizer (runtime/ops/float8.h; make_float8_fixtures.py documents it)
# ---------------------------------------------------------------------------------------------------------------

F8 = torch.float8_e4m3fn


def quantize_e4m3(w, per_row=True):
    """(codes float8_e4m3fn [out, in], scale f32 [out] per row or [1] per tensor): amax = max |w| in f32,
    scale = amax / 448 (1 where amax is 0), codes = e4m3(clamp(w / scale, -448, 448))."""
    w32 = w.float()
    amax = w32.abs().amax(dim=1, keepdim=True) if per_row else w32.abs().amax().reshape(1, 1)
    scale = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    codes = (w32 / scale).clamp(-448.0, 448.0).to(F8)
    return codes, scale.reshape(-1)


def dequantize_e4m3(codes, scale):
    """codes.float() * scale per row: the f32 weight a float8 base computes with."""
    return codes.float() * scale[:, None]


def quantize_linears(model, prefixes):
    """Replaces the weight of every nn.Linear whose module name starts with one of `prefixes` by its per-row e4m3
    round trip (what wick's model.quantize computes with); returns how many Linears it changed."""
    n = 0
    with torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, torch.nn.Linear) and name.startswith(prefixes):
                module.weight.copy_(dequantize_e4m3(*quantize_e4m3(module.weight)))
                n += 1
    return n


# ---------------------------------------------------------------------------------------------------------------
# Flux's latent packing (diffusers' FluxPipeline._pack_latents / _unpack_latents and its image ids)
# ---------------------------------------------------------------------------------------------------------------

@contextmanager
def correctly_rounded_sinusoid():
    """diffusers' get_timestep_embedding with its frequency table correctly rounded (exp in float64, then float32) and
    everything else as diffusers computes it: (t * f) * scale in float32, [cos, sin] (flip_sin_to_cos, shift 0: the
    Qwen-Image sinusoid). torch's f32 exp of the table differs from the correctly rounded value at a few entries, which
    vary between CPUs (make_qwenimage_fixtures.py torch_exp_rounding); with angles sigma x 1000 of hundreds of radians
    one ulp there moves the tiny model's output by ~1e-5. Outputs computed under it differ from diffusers' own only by
    that libm rounding, and wick computes the table correctly rounded."""
    import diffusers.models.embeddings as embeddings
    original = embeddings.get_timestep_embedding

    def exact(timesteps, embedding_dim, flip_sin_to_cos=False, downscale_freq_shift=1, scale=1, max_period=10000):
        assert flip_sin_to_cos and downscale_freq_shift == 0 and embedding_dim % 2 == 0
        half = embedding_dim // 2
        exponent = -math.log(max_period) * torch.arange(0, half, dtype=torch.float32) / half
        angles = scale * (timesteps[:, None].float() * torch.exp(exponent.double()).float()[None, :])
        return torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)

    embeddings.get_timestep_embedding = exact
    try:
        yield
    finally:
        embeddings.get_timestep_embedding = original


def pack_flux_latents(latents):
    """[B, C, H, W] -> [B, (H/2)(W/2), 4C], features ordered (c, ph, pw)."""
    b, c, h, w = latents.shape
    x = latents.view(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b, (h // 2) * (w // 2), c * 4).contiguous()


def unpack_flux_latents(packed, h, w):
    """The inverse of pack_flux_latents for latents of H x W."""
    b, _, f = packed.shape
    c = f // 4
    x = packed.view(b, h // 2, w // 2, c, 2, 2).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(b, c, h, w).contiguous()


def flux_img_ids(h, w):
    """[(H/2)(W/2), 3] f32: row r * (W/2) + c holds (0, r, c)."""
    ids = torch.zeros(h // 2, w // 2, 3, dtype=torch.float32)
    ids[..., 1] = torch.arange(h // 2, dtype=torch.float32)[:, None]
    ids[..., 2] = torch.arange(w // 2, dtype=torch.float32)[None, :]
    return ids.reshape(-1, 3)


# ---------------------------------------------------------------------------------------------------------------
# The CLIP BPE vocabulary (MODELS.md 4.1)
# ---------------------------------------------------------------------------------------------------------------

def clip_vocabulary(bpe_path):
    """(vocab {token: id}, merges [(a, b)]) of open_clip's bpe_simple_vocab_16e6.txt.gz at `bpe_path`: 256 byte
    symbols, the same with "</w>", the 48,894 merges, <|startoftext|> 49406 and <|endoftext|> 49407."""
    from open_clip.tokenizer import bytes_to_unicode

    lines = gzip.open(bpe_path).read().decode("utf-8").split("\n")
    merges = [tuple(m.split()) for m in lines[1:49152 - 256 - 2 + 1]]
    symbols = list(bytes_to_unicode().values())
    tokens = symbols + [s + "</w>" for s in symbols] + [a + b for a, b in merges] + ["<|startoftext|>", "<|endoftext|>"]
    vocab = {t: i for i, t in enumerate(tokens)}
    assert len(vocab) == len(tokens) == 49408 and vocab["!"] == 0
    return vocab, merges


# ---------------------------------------------------------------------------------------------------------------
# PEFT adapters and diffusers' LoRA paths
# ---------------------------------------------------------------------------------------------------------------

def peft_layer(model, module_path):
    """The PEFT-wrapped module at `module_path` (asserts it has the "default" adapter)."""
    layer = model.get_submodule(module_path)
    assert hasattr(layer, "lora_A") and "default" in layer.lora_A, module_path
    return layer


def adapted_modules(model):
    """The sorted module paths that carry PEFT's "default" adapter."""
    return sorted(n[: -len(".lora_A.default.weight")] for n, _ in model.named_parameters()
                  if n.endswith(".lora_A.default.weight"))


class WarningCapture(logging.Handler):
    """Collects the messages of WARNING and above."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@contextmanager
def captured_warnings(logger_name="diffusers"):
    """with captured_warnings() as messages: ... -- the warnings the logger (diffusers') gave inside the block."""
    capture = WarningCapture()
    logger = logging.getLogger(logger_name)
    logger.addHandler(capture)
    try:
        yield capture.messages
    finally:
        logger.removeHandler(capture)


def lora_key_warnings(messages):
    """The messages in which diffusers reports missing or unexpected LoRA keys."""
    return [m for m in messages if "missing keys" in m or "unexpected keys" in m]


def adapter_param_name(file_key, adapter):
    """'transformer.X.lora_A.weight' -> 'X.lora_A.<adapter>.weight' (also lora_B, lora_magnitude_vector)."""
    key = file_key[len("transformer."):] if file_key.startswith("transformer.") else file_key
    if key.endswith(".lora_magnitude_vector"):
        key += ".weight"
    module, sep, tail = key.rpartition(".lora_")
    if not sep:
        return None
    kind, _, rest = tail.partition(".")
    return f"{module}.lora_{kind}.{adapter}.{rest or 'weight'}"


def reconcile_lora_keys(file_tensors, model, adapter):
    """(params, missing, unexpected) after diffusers loaded a PEFT-format LoRA file into `model` as `adapter`:
    params = the adapter's parameters by name; a file tensor is unexpected unless it equals the parameter it should
    have become (adapter_param_name); missing = the sorted parameters no file tensor filled."""
    params = {n: p for n, p in model.named_parameters() if ".lora_" in n and f".{adapter}." in n}
    matched, unexpected = set(), []
    for key, value in file_tensors.items():
        name = adapter_param_name(key, adapter)
        if name in params and params[name].shape == value.shape and torch.equal(params[name].detach(),
                                                                               value.to(params[name].dtype)):
            matched.add(name)
        else:
            unexpected.append(key)
    return params, sorted(set(params) - matched), unexpected


def load_lora_reported(who, mixin, model, lora_path, adapter="wick_check"):
    """Loads a PEFT-format LoRA file into `model` the way a pipeline's load_lora_weights does (mixin.lora_state_dict
    with its metadata, then mixin.load_lora_into_transformer) and prints what check_<arch>_lora.py reports: the file's
    tensors, the adapter parameters they became, the missing and unexpected keys (reconcile_lora_keys and diffusers' own
    warnings) and the scale the metadata gives. True when every tensor landed and none is missing."""
    with captured_warnings() as messages:
        try:
            state_dict, metadata = mixin.lora_state_dict(lora_path, return_lora_metadata=True)
            file_tensors = dict(state_dict)
            mixin.load_lora_into_transformer(state_dict, transformer=model, metadata=metadata, adapter_name=adapter)
        except Exception as e:  # noqa: BLE001
            print(f"{who}: diffusers failed to load {lora_path}: {type(e).__name__}: {e}")
            return False
    params, missing, unexpected = reconcile_lora_keys(file_tensors, model, adapter)
    warned = lora_key_warnings(messages)
    scale = None
    if metadata:
        r, a = metadata.get("transformer.r"), metadata.get("transformer.lora_alpha")
        scale = f"lora_alpha {a} / r {r}" if r is not None else None
    print(f"{who}: {len(file_tensors)} LoRA tensors -> {len(params)} adapter parameters; "
          f"{len(missing)} missing, {len(unexpected)} unexpected; scale from metadata: {scale or 'none (alpha = r)'}")
    for k in missing:
        print(f"  missing: {k}")
    for k in unexpected:
        print(f"  unexpected: {k}")
    for m in warned:
        print(f"  diffusers warning: {m}")
    return bool(params) and not (missing or unexpected or warned)


def save_peft_lora(model, path, loader):
    """Writes the model's adapters the way diffusers' training scripts do: get_peft_model_state_dict ->
    loader.save_lora_weights(transformer_lora_layers=..., transformer_lora_adapter_metadata=config), `loader` being
    the pipeline's LoRA mixin (FluxLoraLoaderMixin, SD3LoraLoaderMixin); the metadata's sets sorted."""
    from diffusers.training_utils import _collate_lora_metadata
    from peft.utils import get_peft_model_state_dict

    layers = get_peft_model_state_dict(model)
    metadata = _collate_lora_metadata({"transformer": model})
    for cfg in metadata.values():  # sets are written in hash order; sort them so the file is reproducible
        for k, v in list(cfg.items()):
            if isinstance(v, (set, frozenset)):
                cfg[k] = sorted(v)
    tmp = tempfile.mkdtemp()
    try:
        loader.save_lora_weights(tmp, transformer_lora_layers=layers, weight_name="lora.safetensors", **metadata)
        shutil.copyfile(os.path.join(tmp, "lora.safetensors"), path)
    finally:
        shutil.rmtree(tmp)
    sort_metadata(path)
    print(f"  wrote {os.path.relpath(path, REPO)}: {len(layers)} tensors, {os.path.getsize(path)} bytes")


# ---------------------------------------------------------------------------------------------------------------
# diffusers model folders
# ---------------------------------------------------------------------------------------------------------------

def save_sharded_diffusers(model, folder, max_shard_size):
    """model.save_pretrained(folder) in at least two shards of at most `max_shard_size`, metadata sorted; checks that
    from_pretrained gives back the same tensors."""
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    model.save_pretrained(folder, safe_serialization=True, max_shard_size=max_shard_size)
    files = sorted(os.listdir(folder))
    shards = [f for f in files if f.endswith(".safetensors")]
    assert len(shards) >= 2, files
    for f in shards:
        sort_metadata(os.path.join(folder, f))
    for f in files:
        print(f"  wrote {os.path.relpath(os.path.join(folder, f), REPO)}: "
              f"{os.path.getsize(os.path.join(folder, f))} bytes")
    reloaded = type(model).from_pretrained(folder, torch_dtype=torch.float32)
    ref = model.state_dict()
    for k, v in reloaded.state_dict().items():
        assert torch.equal(v, ref[k]), k
    return folder


def write_fp16_diffusers(model, folder, dtype=torch.float16):
    """A diffusers model folder of the model's state dict in float16 (or `dtype`, e.g. torch.bfloat16; one file,
    metadata {"format": "pt"}) and its config (sorted keys, "_class_name" and "_diffusers_version"); checks that
    from_pretrained runs the same weights (so the model's values must be exact in `dtype`)."""
    import diffusers

    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    state = {k: v.to(dtype) for k, v in model.state_dict().items()}
    save_sorted(state, os.path.join(folder, "diffusion_pytorch_model.safetensors"), {"format": "pt"})
    config = {k: v for k, v in dict(model.config).items() if not k.startswith("_")}
    config = {"_class_name": type(model).__name__, "_diffusers_version": diffusers.__version__, **config}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    # What wick loads must be what diffusers runs.
    reloaded = type(model).from_pretrained(folder, torch_dtype=torch.float32)
    for name, p in model.state_dict().items():
        assert torch.equal(p, reloaded.state_dict()[name]), name
