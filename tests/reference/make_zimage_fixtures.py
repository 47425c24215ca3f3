#!/usr/bin/env python3
"""Generates tests/data/zimage/: a tiny random Z-Image transformer (diffusers' ZImageTransformer2DModel) in the three
layouts users download (diffusers/authors' sharded `transformer/` folder, ComfyUI single file, ComfyUI scaled-fp8
single file), its outputs on a batch of two samples of different sizes and caption lengths, the same outputs from
the authors' own code (Tongyi-MAI/Z-Image, src/zimage/transformer.py) fed through this script's own converter, and a
LoRA forward + backward computed with PEFT (on the base and on the base with float8 block Linears as wick quantizes
them), that LoRA as diffusers' training example saves it, and a flow-matching training loss as diffusers' Z-Image
training example computes it. See tests/data/zimage/README.md for every file and tensor.

Made with (pip, CPU only): torch 2.15.0, diffusers 0.42.1, peft 0.21.2, safetensors 0.8.0, numpy; the authors'
repository Tongyi-MAI/Z-Image at commit c7ec135. Run from the repository root:
    git --git-dir=<mirror of Tongyi-MAI/Z-Image> archive c7ec135 src | tar -x -C /tmp/zimage_src
    python tests/reference/make_zimage_fixtures.py --authors-src /tmp/zimage_src/src
(or set ZIMAGE_AUTHORS_SRC). Without it the check against the authors' code is skipped with a notice; the files
written are the same. Everything runs in float32 on the CPU, one thread, deterministic algorithms; every random
tensor comes from a seeded torch.Generator, so a rerun rewrites byte-identical files.

Model: ZImageTransformer2DModel(all_patch_size=(2,), all_f_patch_size=(1,), in_channels=16, dim=64, n_layers=2,
n_refiner_layers=1, n_heads=2, n_kv_heads=2, norm_eps=1e-5, qk_norm=True, cap_feat_dim=32, rope_theta=256.0,
t_scale=1000.0, axes_dims=[8, 12, 12], axes_lens=[256, 64, 64]) (MODELS2 section 1.7): 590,816 parameters, head
width 32, adaLN width min(64, 256) = 64, FFN hidden int(64 / 3 * 8) = 170. After construction every parameter is
redrawn (diffusers initialises the pad tokens to zero, which would hide pad-token bugs): matrices N(0, (0.2 *
sqrt(64 / fan_in))^2), biases N(0, 0.1^2), norm weights 1 + 0.1 N(0, 1), x_pad_token and cap_pad_token N(0, 0.5^2);
then every value is rounded to bfloat16, so that the bf16 files hold the f32 model exactly (the reference outputs
are computed in f32 from those values).

Inputs (case.safetensors): two samples, latents (16, 1, 6, 10) and (16, 1, 8, 4) (15 and 8 image tokens, each padded
to 32), captions of 7 and 40 tokens of width 32 (padded to 32 and 64), t = (0.27, 0.81) as the model takes it
(1 = clean; the model multiplies by 1000). The unified sequences are 64 and 96 tokens long, so the main layers and
the context refiner see a batch-padding mask; the noise refiner does not (32 and 32).

Measured (this script's last run; errors are max|a - b| / max|b|): see the printout, copied into the README.
"""
import argparse
import copy
import json
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

import diffusers
import peft
from diffusers import ZImageTransformer2DModel
from diffusers.loaders import ZImageLoraLoaderMixin
from diffusers.loaders.single_file_utils import convert_z_image_transformer_checkpoint_to_diffusers
from peft import LoraConfig

from reference_common import REPO, data_dir, print_total_size, sort_metadata
from reference_torch import (adapted_modules, deterministic_torch, generator_metadata, peft_layer, quantize_linears,
                             rel_err, save_peft_lora, save_sharded_diffusers, write_f32)

OUT_DIR = data_dir("zimage")
AUTHORS_COMMIT = "c7ec135"
KWARGS = dict(all_patch_size=(2,), all_f_patch_size=(1,), in_channels=16, dim=64, n_layers=2, n_refiner_layers=1,
              n_heads=2, n_kv_heads=2, norm_eps=1e-5, qk_norm=True, cap_feat_dim=32, rope_theta=256.0, t_scale=1000.0,
              axes_dims=[8, 12, 12], axes_lens=[256, 64, 64])
SIZES = [(6, 10), (8, 4)]
CAPTION_LENGTHS = [7, 40]
TIMESTEPS = (0.27, 0.81)
RANK, ALPHA = 4, 8.0
COMFY_PREFIX = "model.diffusion_model."
F8 = torch.float8_e4m3fn


def build_model(seed, kwargs=KWARGS):
    torch.manual_seed(seed)
    model = ZImageTransformer2DModel(**kwargs)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "pad_token" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif p.ndim == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.2 * (64.0 / p.shape[1]) ** 0.5 * torch.randn(p.shape, generator=gen))
            p.copy_(p.to(torch.bfloat16).float())
    return model.eval()


def make_inputs(seed):
    gen = torch.Generator().manual_seed(seed)
    latents = [torch.randn((16, 1, h, w), generator=gen) for h, w in SIZES]
    captions = [torch.randn((n, KWARGS["cap_feat_dim"]), generator=gen) for n in CAPTION_LENGTHS]
    return latents, captions, torch.tensor(TIMESTEPS, dtype=torch.float32)


def forward(model, latents, captions, t, dtype=torch.float32):
    out = model([x.to(dtype) for x in latents], t, [c.to(dtype) for c in captions], return_dict=False)[0]
    return [o.float() for o in out]


# ---------------------------------------------------------------------------------------------------------------
# Layouts: ComfyUI single file (this script's own converter, checked against diffusers' converter) and float8.
# ---------------------------------------------------------------------------------------------------------------

def blocks(sd):
    return sorted({k.rsplit(".attention.", 1)[0] for k in sd if ".attention.to_q." in k})


def diffusers_to_comfy(sd):
    """diffusers names -> ComfyUI/Lumina names: fused attention.qkv (rows q|k|v), out, q_norm/k_norm, x_embedder,
    final_layer; plus the unused norm_final.weight the Lumina-style files carry."""
    out, used = {}, set()

    def take(k):
        used.add(k)
        return sd[k]

    for b in blocks(sd):
        a = f"{b}.attention"
        out[f"{a}.qkv.weight"] = torch.cat([take(f"{a}.to_{p}.weight") for p in "qkv"], 0)
        out[f"{a}.out.weight"] = take(f"{a}.to_out.0.weight")
        out[f"{a}.q_norm.weight"] = take(f"{a}.norm_q.weight")
        out[f"{a}.k_norm.weight"] = take(f"{a}.norm_k.weight")
    for k in sd:
        if k in used:
            continue
        name = k.replace("all_x_embedder.2-1.", "x_embedder.").replace("all_final_layer.2-1.", "final_layer.")
        out[name] = take(k)
    out["norm_final.weight"] = torch.ones(KWARGS["dim"])
    return {k: v.contiguous() for k, v in out.items()}


def check_comfy_with_diffusers(comfy, sd):
    back = convert_z_image_transformer_checkpoint_to_diffusers({COMFY_PREFIX + k: v for k, v in comfy.items()})
    assert sorted(back) == sorted(sd), (sorted(set(back) ^ set(sd)))[:10]
    for k, v in sd.items():
        assert torch.equal(back[k], v), k


def float8_comfy(comfy):
    """ComfyUI's scaled fp8 layout of every Linear weight in the blocks: codes F8_E4M3 = e4m3(w / s), s = amax / 448
    per tensor in `<module>.scale_weight` (f32 [1]), and the `scaled_fp8` marker; everything else bf16. Returns the file's
    tensors and the dequantized f32 weights (diffusers-free ComfyUI names) the reference computes with."""
    out, dequantized = {}, {}
    for k, v in comfy.items():
        block = k.startswith(("layers.", "noise_refiner.", "context_refiner."))
        if block and k.endswith(".weight") and v.ndim == 2:
            scale = (v.abs().max() / 448.0).reshape(1).float()
            codes = (v / scale).clamp(-448, 448).to(F8)
            out[k] = codes
            out[k[: -len(".weight")] + ".scale_weight"] = scale
            dequantized[k] = codes.float() * scale
        else:
            out[k] = v.to(torch.bfloat16)
            dequantized[k] = v
    out["scaled_fp8"] = torch.zeros(0, dtype=F8)
    return out, dequantized


def save_tensors(tensors, path, metadata):
    save_file({k: v.contiguous() for k, v in tensors.items()}, path, metadata=metadata)
    sort_metadata(path)
    print(f"  wrote {os.path.relpath(path, REPO)}: {len(tensors)} tensors, {os.path.getsize(path)} bytes")


# ---------------------------------------------------------------------------------------------------------------
# The authors' code.
# ---------------------------------------------------------------------------------------------------------------

def diffusers_to_authors(sd, authors_model):
    """diffusers names -> the authors' module tree. The trees are the same except that the blocks' adaLN_modulation
    is an nn.Sequential in diffusers and an nn.ModuleList in the authors' code (both hold the Linear at index 0, so the
    key is adaLN_modulation.0.* in both) and the attention (diffusers' Attention with a Z-Image processor vs the
    authors' ZImageAttention; both name to_q, to_k, to_v, to_out.0, norm_q, norm_k). Checked here key by key."""
    wanted = authors_model.state_dict()
    out = {}
    for k, v in wanted.items():
        assert k in sd, f"authors' key {k} has no diffusers counterpart"
        assert sd[k].shape == v.shape, (k, sd[k].shape, v.shape)
        out[k] = sd[k]
    extra = sorted(set(sd) - set(wanted))
    assert not extra, f"diffusers keys the authors' model lacks: {extra}"
    return out


def authors_outputs(src, sd, latents, captions, t):
    # src/zimage/__init__.py imports the pipeline (and its logging package): load transformer.py alone, with src/
    # on the path for the `config` and `utils` packages it imports.
    import importlib.util
    sys.path.insert(0, src)
    spec = importlib.util.spec_from_file_location("zimage_authors_transformer",
                                                  os.path.join(src, "zimage", "transformer.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    AuthorsModel = module.ZImageTransformer2DModel

    kw = {k: v for k, v in KWARGS.items()}
    model = AuthorsModel(**kw).eval()
    model.load_state_dict(diffusers_to_authors(sd, model), strict=True)
    ada = [n for n, m in model.named_modules() if n.endswith("adaLN_modulation") and ".final" not in n
           and not n.startswith("all_final_layer")]
    assert ada and all(isinstance(model.get_submodule(n), torch.nn.ModuleList) for n in ada), ada
    with torch.no_grad():
        out, _ = model([x.clone() for x in latents], t.clone(), [c.clone() for c in captions])
    return [o.float() for o in out]


# ---------------------------------------------------------------------------------------------------------------
# LoRA (PEFT) on the main layers' Linears.
# ---------------------------------------------------------------------------------------------------------------

def lora_targets():
    names = []
    for i in range(KWARGS["n_layers"]):
        a, f = f"layers.{i}.attention", f"layers.{i}.feed_forward"
        names += [f"{a}.to_q", f"{a}.to_k", f"{a}.to_v", f"{a}.to_out.0", f"{f}.w1", f"{f}.w2", f"{f}.w3"]
    return sorted(names)


def flat(samples):
    """The samples' tensors flattened and concatenated, as the losses take them."""
    return torch.cat([x.flatten() for x in samples])


def input_tensors(latents, captions, t):
    """The inputs as case.safetensors holds them: latents_i [16, H, W], caption_i [L, 32], timestep [2]."""
    out = {"timestep": t}
    for i in range(len(latents)):
        out[f"latents_{i}"] = latents[i][:, 0]
        out[f"caption_{i}"] = captions[i]
    return out


def float8_lora_case(base, lora_case, latents, captions, t):
    """lora_case's adapters (factors and target) on the base whose block Linears are float8 as wick's model.quantize
    makes them (reference_torch.quantize_e4m3, per-row scales): the output (flattened, concatenated), the loss and
    the adapter gradients."""
    model = copy.deepcopy(base)
    n = quantize_linears(model, ("layers.", "noise_refiner.", "context_refiner."))
    assert n == 31, n  # 4 blocks x (to_q, to_k, to_v, to_out.0, w1, w2, w3) + 3 modulated blocks' adaLN_modulation.0
    model.add_adapter(LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=lora_targets(),
                                 init_lora_weights=True))
    with torch.no_grad():
        for m in lora_targets():
            layer = peft_layer(model, m)
            layer.lora_A["default"].weight.copy_(lora_case[f"lora.{m}.lora_down"])
            layer.lora_B["default"].weight.copy_(lora_case[f"lora.{m}.lora_up"])
    for name, p in model.named_parameters():
        p.requires_grad_(".lora_" in name)
    model.train()
    outs = forward(model, latents, captions, t)
    loss = F.mse_loss(flat(outs), lora_case["target"])
    loss.backward()
    case = {"output": flat(outs).detach(), "loss": loss.detach().reshape(())}
    for m in lora_targets():
        layer = peft_layer(model, m)
        case[f"grad.lora.{m}.lora_down"] = layer.lora_A["default"].weight.grad
        case[f"grad.lora.{m}.lora_up"] = layer.lora_B["default"].weight.grad
    return case


def make_lora_case(base, latents, captions, t, seed):
    model = copy.deepcopy(base)
    model.add_adapter(LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=lora_targets(),
                                 init_lora_weights=True))
    assert adapted_modules(model) == lora_targets(), adapted_modules(model)
    gen = torch.Generator().manual_seed(seed)
    case = {}
    with torch.no_grad():
        for m in lora_targets():
            layer = peft_layer(model, m)
            layer.lora_A["default"].weight.copy_(0.3 * torch.randn(layer.lora_A["default"].weight.shape, generator=gen))
            layer.lora_B["default"].weight.copy_(0.3 * torch.randn(layer.lora_B["default"].weight.shape, generator=gen))
    for n, p in model.named_parameters():
        p.requires_grad_(".lora_" in n)
    model.train()
    targets = [torch.randn(x.shape, generator=gen) for x in latents]
    outs = forward(model, latents, captions, t)
    loss = F.mse_loss(torch.cat([o.flatten() for o in outs]), torch.cat([x.flatten() for x in targets]))
    loss.backward()
    for i, (o, target) in enumerate(zip(outs, targets)):
        case[f"output_{i}"] = o.detach()[:, 0]
        case[f"target_{i}"] = target[:, 0]
    # The case self-contained, for the tables that run a case file's inputs: the inputs, and the output and target
    # as the loss takes them (flattened, concatenated).
    case["output"] = flat(outs).detach()
    case["target"] = flat(targets)
    case.update(input_tensors(latents, captions, t))
    case["loss"] = loss.detach().reshape(())
    case["alpha"] = torch.tensor(ALPHA)
    case["rank"] = torch.tensor(RANK, dtype=torch.int64)
    for m in lora_targets():
        layer = peft_layer(model, m)
        a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
        assert float(a.grad.abs().max()) > 0 and float(b.grad.abs().max()) > 0, m
        case[f"lora.{m}.lora_down"] = a.detach()
        case[f"lora.{m}.lora_up"] = b.detach()
        case[f"grad.lora.{m}.lora_down"] = a.grad
        case[f"grad.lora.{m}.lora_up"] = b.grad
    return case, outs, model


def exp_table_rounding():
    """The entries of the 128 timestep frequencies exp(-ln(10000) i / 128) (the t_embedder's sinusoid) where torch's
    f32 exp differs from the correctly rounded value on this machine; with arguments t x 1000 of hundreds of radians
    one ulp there moves a feature by ~1e-5, which is the leading difference between two correct implementations."""
    import math
    e = -math.log(10000) * torch.arange(0, 128, dtype=torch.float32) / 128
    exact = torch.exp(e.double()).float()
    return torch.nonzero(torch.exp(e) != exact).flatten().tolist()


def full_grad_names():
    """The parameters whose gradients full training is checked on (small tensors on every kind of path: pad tokens,
    embedders, norms, adaLN and final-layer biases of one block of each kind)."""
    names = ["x_pad_token", "cap_pad_token", "cap_embedder.0.weight", "cap_embedder.1.bias", "t_embedder.mlp.0.bias",
             "t_embedder.mlp.2.bias", "all_x_embedder.2-1.bias", "all_final_layer.2-1.linear.bias",
             "all_final_layer.2-1.adaLN_modulation.1.bias"]
    for block in ("noise_refiner.0", "context_refiner.0", "layers.1"):
        names += [f"{block}.attention.norm_q.weight", f"{block}.attention.norm_k.weight"]
        names += [f"{block}.{n}.weight" for n in ("attention_norm1", "attention_norm2", "ffn_norm1", "ffn_norm2")]
        if not block.startswith("context"):
            names.append(f"{block}.adaLN_modulation.0.bias")
    return names


def full_gradients(base, latents, captions, t, seed):
    """Every parameter trainable; loss = mean squared error of the two outputs (flattened, concatenated) against
    random targets; the gradients of full_grad_names()."""
    model = copy.deepcopy(base)
    for p in model.parameters():
        p.requires_grad_(True)
    gen = torch.Generator().manual_seed(seed)
    targets = [torch.randn(x.shape, generator=gen) for x in latents]
    outs = forward(model, latents, captions, t)
    loss = F.mse_loss(torch.cat([o.flatten() for o in outs]), torch.cat([x.flatten() for x in targets]))
    loss.backward()
    params = dict(model.named_parameters())
    out = {f"full_target_{i}": x[:, 0] for i, x in enumerate(targets)}
    out["full_loss"] = loss.detach().reshape(())
    for name in full_grad_names():
        assert float(params[name].grad.abs().max()) > 0, name
        out[f"grad.{name}"] = params[name].grad
    return out


def flow_matching_case(model, seed):
    """A training step's loss as diffusers' examples/dreambooth/train_dreambooth_lora_z_image.py computes it (weighting
    scheme none): x_sigma = (1 - sigma) x0 + sigma eps, the model at (1000 - T) / 1000 with T = 1000 sigma, the
    prediction negated, MSE against eps - x0. Two samples of SIZES[0]; captions of CAPTION_LENGTHS padded to the
    longest with a mask (1 = caption token), as wick's dataset stores them; sigmas 0.25 and 0.875, exact in f32."""
    gen = torch.Generator().manual_seed(seed)
    h, w = SIZES[0]
    x0 = torch.randn((2, 16, h, w), generator=gen)
    noise = torch.randn((2, 16, h, w), generator=gen)
    length = max(CAPTION_LENGTHS)
    context = torch.randn((2, length, KWARGS["cap_feat_dim"]), generator=gen)
    mask = torch.zeros((2, length))
    for i, n in enumerate(CAPTION_LENGTHS):
        mask[i, :n] = 1
        context[i, n:] = 0
    timesteps = torch.tensor([250.0, 875.0])
    sigmas = (timesteps / 1000).view(-1, 1, 1, 1)
    noisy = (1.0 - sigmas) * x0 + sigmas * noise
    timestep_normalized = (1000 - timesteps) / 1000
    with torch.no_grad():
        out = model(list(noisy.unsqueeze(2).unbind(dim=0)), timestep_normalized,
                    [context[i, :n] for i, n in enumerate(CAPTION_LENGTHS)], return_dict=False)[0]
    pred = -torch.stack(out, dim=0).squeeze(2)
    target = noise - x0
    loss = torch.mean(((pred.float() - target.float()) ** 2).reshape(target.shape[0], -1), 1).mean()
    return {"x0": x0, "noise": noise, "sigma": timesteps / 1000, "context": context, "context_mask": mask,
            "prediction": pred, "loss": loss}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--authors-src", default=os.environ.get("ZIMAGE_AUTHORS_SRC", ""),
                        help="the src/ folder of a Tongyi-MAI/Z-Image checkout (commit c7ec135)")
    args = parser.parse_args()
    deterministic_torch()
    os.makedirs(OUT_DIR, exist_ok=True)
    meta = generator_metadata(__file__, diffusers, peft)

    print(f"torch's f32 exp of the timestep frequencies differs from the correctly rounded value at entries "
          f"{exp_table_rounding()}")
    model = build_model(1234)
    latents, captions, t = make_inputs(99)
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    n_params = sum(v.numel() for v in sd.values())
    print(f"model: {n_params} parameters, {len(sd)} tensors")
    assert n_params == 590816 and len(sd) == 73

    with torch.no_grad():
        outs = forward(model, latents, captions, t)
        singles = [forward(model, [x], [c], t[i:i + 1])[0] for i, (x, c) in enumerate(zip(latents, captions))]
        outs_bf16 = forward(copy.deepcopy(model).to(torch.bfloat16), latents, captions, t, torch.bfloat16)
        _, _, _, x_pos, cap_pos, x_pad, cap_pad = model.patchify_and_embed(latents, captions, 2, 1)
    batch_vs_single = max(rel_err(a, b) for a, b in zip(singles, outs))
    bf16_err = max(rel_err(a, b) for a, b in zip(outs_bf16, outs))
    print(f"  output max |.| {max(float(o.abs().max()) for o in outs):.4f}; batched vs single {batch_vs_single:.3e}; "
          f"bf16 model vs f32 {bf16_err:.3e}")

    # Pad tokens take part in attention: perturbing either one changes the real tokens' output.
    for name in ("x_pad_token", "cap_pad_token"):
        other = copy.deepcopy(model)
        with torch.no_grad():
            getattr(other, name).add_(1.0)
            changed = max(rel_err(a, b) for a, b in zip(forward(other, latents, captions, t), outs))
        print(f"  {name} + 1 changes the output by {changed:.3e}")
        assert changed > 1e-3, name

    case = {"timestep": t}
    for i in range(2):
        case[f"latents_{i}"] = latents[i][:, 0]
        case[f"caption_{i}"] = captions[i]
        case[f"output_{i}"] = outs[i][:, 0]
        case[f"output_bf16_{i}"] = outs_bf16[i][:, 0]
        case[f"image_positions_{i}"] = x_pos[i].float()
        case[f"caption_positions_{i}"] = cap_pos[i].float()
    case["output"] = flat(outs)
    case.update(full_gradients(model, latents, captions, t, 555))
    case_meta = dict(meta, model=json.dumps(KWARGS, sort_keys=True), bf16_rel_err=f"{bf16_err:.3e}",
                     batched_vs_single=f"{batch_vs_single:.3e}")
    write_f32(case, os.path.join(OUT_DIR, "case.safetensors"), case_meta)

    # (a) diffusers / authors' layout: a sharded transformer/ folder with its index and config.json, in bf16.
    folder = os.path.join(OUT_DIR, "diffusers", "transformer")
    bf16_model = copy.deepcopy(model).to(torch.bfloat16)
    save_sharded_diffusers(bf16_model, folder, "300KB")
    reloaded = ZImageTransformer2DModel.from_pretrained(folder, torch_dtype=torch.float32)
    with torch.no_grad():
        print(f"  diffusers folder reloaded vs model: {max(rel_err(a, b) for a, b in zip(forward(reloaded, latents, captions, t), outs)):.3e}")

    # (b) ComfyUI single file (bf16, prefix model.diffusion_model.).
    comfy = diffusers_to_comfy(sd)
    check_comfy_with_diffusers(comfy, sd)
    save_tensors({COMFY_PREFIX + k: v.to(torch.bfloat16) for k, v in comfy.items()},
                 os.path.join(OUT_DIR, "comfyui_bf16.safetensors"), {"format": "pt"})

    # (c) ComfyUI scaled fp8 (no prefix), and the f32 output of the dequantized model.
    f8, dequantized = float8_comfy(comfy)
    save_tensors(f8, os.path.join(OUT_DIR, "comfyui_fp8_scaled.safetensors"), {"format": "pt"})
    f8_model = copy.deepcopy(model)
    f8_model.load_state_dict(convert_z_image_transformer_checkpoint_to_diffusers(
        {COMFY_PREFIX + k: v for k, v in dequantized.items()}), strict=True)
    with torch.no_grad():
        f8_outs = forward(f8_model, latents, captions, t)
    print(f"  float8 model vs f32 model: {max(rel_err(a, b) for a, b in zip(f8_outs, outs)):.3e}")
    write_f32({f"output_{i}": o[:, 0] for i, o in enumerate(f8_outs)},
              os.path.join(OUT_DIR, "fp8_case.safetensors"), meta)

    # The authors' code, through this script's converter.
    src = args.authors_src
    if src and os.path.isdir(src):
        authors = authors_outputs(src, sd, latents, captions, t)
        err = max(rel_err(a, b) for a, b in zip(authors, outs))
        print(f"  authors' code ({AUTHORS_COMMIT}) vs diffusers: {err:.3e}")
        assert err < 1e-5
        write_f32({f"output_{i}": o[:, 0] for i, o in enumerate(authors)},
                  os.path.join(OUT_DIR, "authors_case.safetensors"), dict(meta, authors_commit=AUTHORS_COMMIT))
    else:
        print("notice: no --authors-src (or ZIMAGE_AUTHORS_SRC): the check against the authors' code is skipped")

    lora_case, lora_outs, lora_model = make_lora_case(model, latents, captions, t, 777)
    print(f"  LoRA loss {float(lora_case['loss']):.6f}; output change vs base "
          f"{max(rel_err(a, b) for a, b in zip(lora_outs, outs)):.3f}")
    write_f32(lora_case, os.path.join(OUT_DIR, "lora_case.safetensors"),
              dict(meta, lora=json.dumps({"r": RANK, "lora_alpha": ALPHA, "targets": lora_targets()})))
    # The case's LoRA as diffusers' Z-Image training example saves it (PEFT names, lora_alpha in the metadata), and
    # diffusers' ZImagePipeline loading it back gives the case's output.
    peft_path = os.path.join(OUT_DIR, "lora_peft.safetensors")
    save_peft_lora(lora_model, peft_path, ZImageLoraLoaderMixin)
    reloaded = copy.deepcopy(model)
    state, alphas = ZImageLoraLoaderMixin.lora_state_dict(peft_path, return_lora_metadata=True)
    ZImageLoraLoaderMixin.load_lora_into_transformer(state, reloaded, metadata=alphas)
    with torch.no_grad():
        peft_err = rel_err(flat(forward(reloaded, latents, captions, t)), lora_case["output"])
    print(f"  lora_peft.safetensors loaded by diffusers vs the case's output: {peft_err:.3e}")
    assert peft_err < 1e-6, peft_err
    f8_lora = float8_lora_case(model, lora_case, latents, captions, t)
    print(f"  float8 LoRA loss {float(f8_lora['loss']):.6f} (unquantized base: {float(lora_case['loss']):.6f}); "
          f"output change vs the f32 case {rel_err(f8_lora['output'], lora_case['output']):.3e}")
    write_f32(f8_lora, os.path.join(OUT_DIR, "float8_lora_case.safetensors"),
              dict(meta, float8="e4m3fn per-row scales on every block Linear; base computes in f32 with codes * scale"))
    fm = flow_matching_case(model, 4321)
    print(f"  flow-matching loss (diffusers' training step) {float(fm['loss']):.6f}")
    write_f32(fm, os.path.join(OUT_DIR, "flow_matching_case.safetensors"), meta)
    print_total_size(OUT_DIR)


if __name__ == "__main__":
    main()
