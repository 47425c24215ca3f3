#!/usr/bin/env python3
"""Generates tests/data/flux2/: a tiny random FLUX.2 transformer (dev-style, with guidance, and klein-style, the same
weights without guidance_in) in Black Forest Labs' and diffusers' layouts, its forward outputs (also with a reference
image), full-training gradients, a LoRA forward + backward computed with PEFT on diffusers, that LoRA as diffusers
saves it and in the BFL naming that ai-toolkit / diffusion-pipe write, and an independent check of the BFL conversion
against BFL's own code. See tests/data/flux2/README.md for every file and tensor.

Made with (pip, CPU only): torch 2.15.0 (+cu132 wheel), diffusers 0.42.1, peft 0.21.2, transformers 5.25.0,
safetensors 0.8.0, numpy 2.4.6, einops 0.8.2 (for BFL's code), Python 3.11; Black Forest Labs' flux2 repository at
commit ab7cca6. Run from the repository root:
    /tmp/refvenv/bin/pip install torch diffusers peft transformers safetensors numpy einops
    git --git-dir=<mirror of black-forest-labs/flux2> archive ab7cca6 src | tar -x -C /tmp/bfl_flux2
    /tmp/refvenv/bin/python tests/reference/make_flux2_fixtures.py --bfl-src /tmp/bfl_flux2/src
--bfl-src may also be given as the environment variable FLUX2_BFL_SRC. Without it (or when <src>/flux2/model.py does
not exist) the checks against BFL's code are skipped with a notice; the files written are the same. Only
flux2/model.py is imported (by file path). Everything runs in float32 on the CPU, one thread,
torch.use_deterministic_algorithms(True); torch.manual_seed is set before each constructor and every random tensor
comes from a seeded torch.Generator, so a rerun rewrites byte-identical files (safetensors metadata is re-serialised
with sorted keys: reference_common.sort_metadata).

Models (MODELS2 section D3). dev: Flux2Transformer2DModel(patch_size=1, in_channels=16, out_channels=None,
num_layers=2, num_single_layers=2, attention_head_dim=32, num_attention_heads=2, joint_attention_dim=24,
timestep_guidance_channels=256, mlp_ratio=3.0, axes_dims_rope=(8, 8, 8, 8), rope_theta=2000, eps=1e-6,
guidance_embeds=True): hidden 64, 2 heads of 32, SwiGLU MLP 192, 434,048 parameters, no biases anywhere. BFL's
equivalent: Flux2Params(in_channels=16, context_in_dim=24, hidden_size=64, num_heads=2, depth=2,
depth_single_blocks=2, axes_dim=[8, 8, 8, 8], theta=2000, mlp_ratio=3.0). klein: the same with guidance_embeds=False
(413,568 parameters) holding exactly the dev weights minus the guidance embedder. After construction every parameter
is redrawn: matrices N(0, (0.2 sqrt(64 / fan_in))^2), RMSNorm scales 1 + 0.1 N(0, 1); then every value is rounded to
bfloat16, so that the bf16 files hold the f32 model exactly (the references are computed in f32 from those values).

BFL layout (dev_bfl) is made by this script's own converter (diffusers_to_bfl, one name table for the weights and the
LoRA): img_attn.qkv = rows of to_q|to_k|to_v, txt_attn.qkv = rows of add_q_proj|add_k_proj|add_v_proj, linear1 =
attn.to_qkv_mlp_proj, linear2 = attn.to_out, RMSNorm .weight -> .scale, final_layer.adaLN_modulation.1 =
norm_out.linear with its two row halves swapped (diffusers scale|shift, BFL shift|scale); the rest are renames
(MODELS2 section B3). BFL's check (strict load of dev_bfl into BFL's Flux2) proves the converter.

Inputs: batch 2, latents [2, 16, 3, 4] (a 3 x 4 token grid: non-square), 5 text tokens of width 24, sigma
(0.375, 0.8125) and guidance (1.0, 4.0) (both multiplied by 1000 inside the model; all four exact in bf16), one
2 x 2 reference image per sample. Packing, position ids and the order of the reference tokens are taken from
diffusers' Flux2Pipeline itself (_pack_latents, _prepare_latent_ids, _prepare_text_ids, _prepare_image_ids,
_unpack_latents_with_ids, and its denoising loop: hidden states = cat(target, reference), ids likewise, output sliced
to the target) and asserted against the explicit formulas written in the README.

The _exact outputs (and the full-training and LoRA cases) patch diffusers' timestep sinusoid to take its frequency
table correctly rounded (reference_torch.correctly_rounded_sinusoid): torch's f32 exp of that table differs from the
correctly rounded value at a few entries that vary between CPUs, and wick computes the table correctly rounded.

LoRA (dev): PEFT LoraConfig(r=4, lora_alpha=8, lora_dropout=0) on the 28 Linear layers inside the blocks (full module
names, nothing else adapted). The lora_A of the layers BFL fuses (img to_q/to_k/to_v; txt add_q/add_k/add_v_proj)
are one shared random matrix, so PEFT's adapters equal one adapter on each of the 20 BFL Linears; lora_A and lora_B
random (std 0.3). The scale alpha / r = 2 is not baked into lora_case. lora_bfl is written as ai-toolkit and
diffusion-pipe write FLUX.2 LoRAs, without alpha tensors (ai-toolkit forces alpha = rank for these models; ComfyUI
merges a module without alpha with scale 1, and diffusers' converter for this naming raises on an alpha tensor), so
its lora_B holds (alpha / r) x lora_up.

Measured (this script's last run; errors are max|a - b| / max|b|): see the printout and the README's "Measured".
"""
import argparse
import contextlib
import copy
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

import diffusers
import peft
import safetensors
import transformers
from diffusers import Flux2Transformer2DModel
from diffusers.loaders import Flux2LoraLoaderMixin
from diffusers.pipelines.flux2.pipeline_flux2 import Flux2Pipeline
from peft import LoraConfig

from reference_common import REPO, data_dir, print_total_size, sort_metadata
from reference_torch import (adapted_modules, captured_warnings, correctly_rounded_sinusoid, deterministic_torch,
                             generator_metadata, lora_key_warnings, peft_layer, reconcile_lora_keys, rel_err,
                             save_peft_lora, save_sorted, write_f32)

OUT_DIR = data_dir("flux2")

N_DOUBLE, N_SINGLE, HIDDEN, HEADS, HEAD_DIM, MLP_HIDDEN = 2, 2, 64, 2, 32, 192
LATENT_C, H, W, REF_H, REF_W, TXT_LEN, BATCH = 16, 3, 4, 2, 2, 5, 2
CONTEXT_DIM = 24
TIMESTEPS = (0.375, 0.8125)
GUIDANCE = (1.0, 4.0)
RANK, ALPHA = 4, 8.0
BFL_COMMIT = "ab7cca6"
N_PARAMS = {True: 434048, False: 413568}
GUIDANCE_PREFIX = "time_guidance_embed.guidance_embedder."


def model_kwargs(guidance):
    return dict(patch_size=1, in_channels=LATENT_C, out_channels=None, num_layers=N_DOUBLE,
                num_single_layers=N_SINGLE, attention_head_dim=HEAD_DIM, num_attention_heads=HEADS,
                joint_attention_dim=CONTEXT_DIM, timestep_guidance_channels=256, mlp_ratio=3.0,
                axes_dims_rope=(8, 8, 8, 8), rope_theta=2000, eps=1e-6, guidance_embeds=guidance)


# ---------------------------------------------------------------------------------------------------------------
# Name tables: BFL module <- diffusers module(s). One table drives the weight converter and the LoRA converter.
# ---------------------------------------------------------------------------------------------------------------

def linear_groups():
    """(BFL Linear path, [diffusers Linear paths concatenated by rows in this order]) for every Linear inside the
    blocks: the modules the LoRA case adapts."""
    groups = []
    for i in range(N_DOUBLE):
        d, b = f"transformer_blocks.{i}", f"double_blocks.{i}"
        groups += [
            (f"{b}.img_attn.qkv", [f"{d}.attn.to_q", f"{d}.attn.to_k", f"{d}.attn.to_v"]),
            (f"{b}.img_attn.proj", [f"{d}.attn.to_out.0"]),
            (f"{b}.img_mlp.0", [f"{d}.ff.linear_in"]),
            (f"{b}.img_mlp.2", [f"{d}.ff.linear_out"]),
            (f"{b}.txt_attn.qkv", [f"{d}.attn.add_q_proj", f"{d}.attn.add_k_proj", f"{d}.attn.add_v_proj"]),
            (f"{b}.txt_attn.proj", [f"{d}.attn.to_add_out"]),
            (f"{b}.txt_mlp.0", [f"{d}.ff_context.linear_in"]),
            (f"{b}.txt_mlp.2", [f"{d}.ff_context.linear_out"]),
        ]
    for i in range(N_SINGLE):
        s, b = f"single_transformer_blocks.{i}", f"single_blocks.{i}"
        groups += [(f"{b}.linear1", [f"{s}.attn.to_qkv_mlp_proj"]), (f"{b}.linear2", [f"{s}.attn.to_out"])]
    return groups


def outer_linears(guidance):
    """(BFL Linear path, diffusers Linear path) outside the blocks (final_layer.adaLN_modulation.1 is handled apart)."""
    pairs = [
        ("img_in", "x_embedder"),
        ("txt_in", "context_embedder"),
        ("time_in.in_layer", "time_guidance_embed.timestep_embedder.linear_1"),
        ("time_in.out_layer", "time_guidance_embed.timestep_embedder.linear_2"),
        ("double_stream_modulation_img.lin", "double_stream_modulation_img.linear"),
        ("double_stream_modulation_txt.lin", "double_stream_modulation_txt.linear"),
        ("single_stream_modulation.lin", "single_stream_modulation.linear"),
        ("final_layer.linear", "proj_out"),
    ]
    if guidance:
        pairs += [("guidance_in.in_layer", GUIDANCE_PREFIX + "linear_1"),
                  ("guidance_in.out_layer", GUIDANCE_PREFIX + "linear_2")]
    return pairs


def norm_pairs():
    """(BFL RMSNorm scale key, diffusers RMSNorm weight key): the per-head QK norms."""
    pairs = []
    for i in range(N_DOUBLE):
        d, b = f"transformer_blocks.{i}.attn", f"double_blocks.{i}"
        pairs += [(f"{b}.img_attn.norm.query_norm.scale", f"{d}.norm_q.weight"),
                  (f"{b}.img_attn.norm.key_norm.scale", f"{d}.norm_k.weight"),
                  (f"{b}.txt_attn.norm.query_norm.scale", f"{d}.norm_added_q.weight"),
                  (f"{b}.txt_attn.norm.key_norm.scale", f"{d}.norm_added_k.weight")]
    for i in range(N_SINGLE):
        s, b = f"single_transformer_blocks.{i}.attn", f"single_blocks.{i}"
        pairs += [(f"{b}.norm.query_norm.scale", f"{s}.norm_q.weight"),
                  (f"{b}.norm.key_norm.scale", f"{s}.norm_k.weight")]
    return pairs


def swap_halves(t):
    """(a | b) -> (b | a) along rows: diffusers norm_out.linear (scale, shift) <-> BFL final adaLN (shift, scale)."""
    first, second = t.chunk(2, dim=0)
    return torch.cat([second, first], dim=0).contiguous()


def diffusers_to_bfl(sd, guidance):
    """Our own diffusers -> BFL converter for FLUX.2 (sizes read from the tensors). Linear: it also converts a dict of
    gradients of the same names."""
    out, used = {}, set()

    def take(key):
        assert key not in used, f"{key} used twice"
        used.add(key)
        return sd[key]

    for bfl, parts in linear_groups():
        out[f"{bfl}.weight"] = torch.cat([take(f"{p}.weight") for p in parts], dim=0).contiguous()
    for bfl, dif in outer_linears(guidance):
        out[f"{bfl}.weight"] = take(f"{dif}.weight").contiguous()
    for bfl, dif in norm_pairs():
        out[bfl] = take(dif).contiguous()
    out["final_layer.adaLN_modulation.1.weight"] = swap_halves(take("norm_out.linear.weight"))
    unused = sorted(set(sd) - used)
    assert not unused, f"diffusers keys not converted: {unused}"
    return out


# ---------------------------------------------------------------------------------------------------------------
# Models, inputs, forward
# ---------------------------------------------------------------------------------------------------------------

def base_metadata():
    return generator_metadata(__file__, diffusers, peft)


def build_dev(seed):
    torch.manual_seed(seed)
    model = Flux2Transformer2DModel(**model_kwargs(True))
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            assert not name.endswith(".bias"), name  # FLUX.2 has no biases
            if p.ndim == 1:  # the QK RMSNorm scales
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.2 * (64.0 / p.shape[1]) ** 0.5 * torch.randn(p.shape, generator=gen))
            p.copy_(p.to(torch.bfloat16).float())
    assert sum(p.numel() for p in model.parameters()) == N_PARAMS[True]
    return model.eval()


def klein_of(dev, seed):
    """The klein-style model: guidance_embeds=False, exactly dev's weights minus the guidance embedder."""
    torch.manual_seed(seed)
    model = Flux2Transformer2DModel(**model_kwargs(False))
    sd = {k: v for k, v in dev.state_dict().items() if not k.startswith(GUIDANCE_PREFIX)}
    model.load_state_dict(sd, strict=True)
    assert sum(p.numel() for p in model.parameters()) == N_PARAMS[False]
    return model.eval()


def torch_exp_rounding():
    """The entries of the 128 timestep frequencies exp(-ln(10000) i / 128) where torch's f32 exp differs from the
    correctly rounded value on this machine (it varies between CPUs)."""
    e = -math.log(10000) * torch.arange(0, 128, dtype=torch.float32) / 128
    return torch.nonzero(torch.exp(e) != torch.exp(e.double()).float()).flatten().tolist()


def pack(latents):
    """Flux2Pipeline._pack_latents: [B, C, h, w] -> [B, h * w, C], token r * w + c = latents[:, :, r, c]."""
    return Flux2Pipeline._pack_latents(latents).contiguous()


def make_inputs(seed):
    gen = torch.Generator().manual_seed(seed)
    latents = torch.randn((BATCH, LATENT_C, H, W), generator=gen)
    context = torch.randn((BATCH, TXT_LEN, CONTEXT_DIM), generator=gen)
    reference = torch.randn((BATCH, LATENT_C, REF_H, REF_W), generator=gen)
    # The position ids as Flux2Pipeline builds them (int64 there; the model takes ids.float()), one row per token.
    img_ids = Flux2Pipeline._prepare_latent_ids(latents)
    txt_ids = Flux2Pipeline._prepare_text_ids(context)
    ref_ids = Flux2Pipeline._prepare_image_ids([reference[:1]])
    for ids in (img_ids, txt_ids, ref_ids):
        assert ids.dtype == torch.int64 and all(torch.equal(ids[i], ids[0]) for i in range(ids.shape[0]))
    img_ids, txt_ids, ref_ids = img_ids[0].float(), txt_ids[0].float(), ref_ids[0].float()
    # ... and the explicit formulas the README gives.
    rows, cols = torch.meshgrid(torch.arange(H), torch.arange(W), indexing="ij")
    assert torch.equal(img_ids, torch.stack([torch.zeros(H * W), rows.flatten(), cols.flatten(),
                                             torch.zeros(H * W)], 1).float())
    assert torch.equal(txt_ids, torch.stack([torch.zeros(TXT_LEN)] * 3 + [torch.arange(TXT_LEN)], 1).float())
    rows, cols = torch.meshgrid(torch.arange(REF_H), torch.arange(REF_W), indexing="ij")
    assert torch.equal(ref_ids, torch.stack([torch.full((REF_H * REF_W,), 10), rows.flatten(), cols.flatten(),
                                             torch.zeros(REF_H * REF_W)], 1).float())
    packed = pack(latents)
    for r in range(H):
        for c in range(W):
            assert torch.equal(packed[:, r * W + c], latents[:, :, r, c])
    return {"latents": latents, "packed": packed, "context": context,
            "timestep": torch.tensor(TIMESTEPS, dtype=torch.float32),
            "guidance": torch.tensor(GUIDANCE, dtype=torch.float32),
            "img_ids": img_ids, "txt_ids": txt_ids, "ref_ids": ref_ids, "reference_latents": reference}


def unpack(tokens, img_ids):
    """Flux2Pipeline._unpack_latents_with_ids: [B, h * w, C] -> [B, C, h, w] (the inverse of pack)."""
    out = Flux2Pipeline._unpack_latents_with_ids(tokens, img_ids[None].expand(tokens.shape[0], -1, -1))
    assert torch.equal(out, tokens.permute(0, 2, 1).reshape(out.shape))
    return out.contiguous()


def diffusers_forward(model, inputs, reference=False, dtype=torch.float32, guidance=True):
    """The model as Flux2Pipeline's denoising loop calls it: hidden states = cat(target, reference) tokens with
    img_ids = cat(target ids, reference ids), 2-D ids, timestep sigma and guidance passed in f32; the prediction
    sliced to the target's tokens and unpacked to [B, C, h, w]."""
    x, ids = inputs["packed"], inputs["img_ids"]
    if reference:
        x = torch.cat([x, pack(inputs["reference_latents"])], dim=1)
        ids = torch.cat([ids, inputs["ref_ids"]], dim=0)
    out = model(hidden_states=x.to(dtype), encoder_hidden_states=inputs["context"].to(dtype),
                timestep=inputs["timestep"], img_ids=ids, txt_ids=inputs["txt_ids"],
                guidance=inputs["guidance"] if guidance else None, return_dict=False)[0]
    return unpack(out[:, : H * W].float(), inputs["img_ids"])


def sample(inputs, i):
    """Sample i of the batch alone."""
    return {k: (v[i:i + 1] if k in ("latents", "packed", "context", "timestep", "guidance", "reference_latents")
                else v) for k, v in inputs.items()}


def batch_vs_single(model, inputs, **kwargs):
    with torch.no_grad():
        out = diffusers_forward(model, inputs, **kwargs)
        return max(rel_err(diffusers_forward(model, sample(inputs, i), **kwargs), out[i:i + 1])
                   for i in range(BATCH))


# ---------------------------------------------------------------------------------------------------------------
# 1-3: weights (BFL, diffusers) and case.safetensors
# ---------------------------------------------------------------------------------------------------------------

def write_bfl(model):
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    bfl = diffusers_to_bfl(sd, True)
    meta = base_metadata()
    meta["model"] = json.dumps(model_kwargs(True), sort_keys=True)
    meta["format"] = "pt"
    path = os.path.join(OUT_DIR, "dev_bfl.safetensors")
    save_sorted({k: v.to(torch.bfloat16) for k, v in bfl.items()}, path, meta)
    reread = load_file(path)
    for k, v in bfl.items():
        assert torch.equal(reread[k].float(), v), k  # the bf16 file holds the f32 model exactly
    print(f"  wrote {os.path.relpath(path, REPO)}: {len(bfl)} tensors, {os.path.getsize(path)} bytes")
    return bfl


def write_diffusers(model, inputs, expected):
    folder = os.path.join(OUT_DIR, "dev_diffusers")
    shutil.rmtree(folder, ignore_errors=True)
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)
    files = sorted(os.listdir(folder))
    assert files == ["config.json", "diffusion_pytorch_model.safetensors"], files
    sort_metadata(os.path.join(folder, "diffusion_pytorch_model.safetensors"))
    for f in files:
        print(f"  wrote {os.path.relpath(os.path.join(folder, f), REPO)}: "
              f"{os.path.getsize(os.path.join(folder, f))} bytes")
    reloaded = Flux2Transformer2DModel.from_pretrained(folder, torch_dtype=torch.float32).eval()
    ref = model.state_dict()
    for k, v in reloaded.state_dict().items():
        assert torch.equal(v, ref[k]), k
    with torch.no_grad():
        assert torch.equal(diffusers_forward(reloaded, inputs), expected)


def full_training(dev, inputs, seed):
    """Every parameter trainable, loss = mean((output - full_target)^2) with the correctly rounded sinusoid; the
    gradients of selected tensors in BFL names and layout (the converter is linear, so it converts gradients)."""
    model = copy.deepcopy(dev)
    for p in model.parameters():
        p.requires_grad_(True)
    gen = torch.Generator().manual_seed(seed)
    target = torch.randn((BATCH, LATENT_C, H, W), generator=gen)
    with correctly_rounded_sinusoid():
        out = diffusers_forward(model, inputs)
    loss = F.mse_loss(out, target)
    loss.backward()
    grads = diffusers_to_bfl({n: p.grad for n, p in model.named_parameters()}, True)
    names = [bfl for bfl, _ in norm_pairs()] + [
        "img_in.weight", "txt_in.weight", "final_layer.linear.weight", "final_layer.adaLN_modulation.1.weight",
        "time_in.in_layer.weight", "guidance_in.out_layer.weight", "double_stream_modulation_img.lin.weight",
        "single_stream_modulation.lin.weight", "double_blocks.1.img_mlp.2.weight"]
    case = {"full_target": target, "full_loss": loss.detach().reshape(())}
    for n in names:
        assert float(grads[n].abs().max()) > 0, n
        case[f"grad.{n}"] = grads[n]
    return case, out.detach()


def make_case(dev, klein, inputs):
    print("case:")
    with torch.no_grad():
        out = diffusers_forward(dev, inputs)
        out_klein = diffusers_forward(klein, inputs, guidance=False)
        out_ref = diffusers_forward(dev, inputs, reference=True)
        with correctly_rounded_sinusoid():
            out_exact = diffusers_forward(dev, inputs)
            out_klein_exact = diffusers_forward(klein, inputs, guidance=False)
            out_ref_exact = diffusers_forward(dev, inputs, reference=True)
        bf16_model = copy.deepcopy(dev).to(torch.bfloat16)
        out_bf16 = diffusers_forward(bf16_model, inputs, dtype=torch.bfloat16)
        # What the bf16 forward feeds the sinusoid: bf16(bf16(x) * 1000), for the timestep and the guidance.
        scaled = {k: (inputs[k].to(torch.bfloat16) * 1000).float() for k in ("timestep", "guidance")}
        quantized = dict(inputs)
        for k, v in scaled.items():
            quantized[k] = v / 1000
            assert torch.equal(quantized[k] * 1000, v), (k, quantized[k] * 1000, v)
        out_f32_bf16t = diffusers_forward(dev, quantized)
    # The klein trick the BFL check uses: dev with the guidance embedder's output layer zeroed (no biases) adds
    # exactly 0 to the timestep embedding, so it computes the klein model's bits.
    zeroed = copy.deepcopy(dev)
    with torch.no_grad():
        zeroed.time_guidance_embed.guidance_embedder.linear_2.weight.zero_()
        assert torch.equal(diffusers_forward(zeroed, inputs), out_klein)
    singles = {"output": batch_vs_single(dev, inputs), "output_klein": batch_vs_single(klein, inputs, guidance=False),
               "output_reference": batch_vs_single(dev, inputs, reference=True)}
    for k, v in singles.items():
        assert v < 1e-5, (k, v)
    print(f"  output max |.| {out.abs().max().item():.4f}, std {out.std().item():.4f}; klein vs dev "
          f"{rel_err(out_klein, out):.3f}; with the reference vs without {rel_err(out_ref, out):.3f}")
    print(f"  each sample alone vs the batch: " + ", ".join(f"{k} {v:.3e}" for k, v in singles.items()))
    print(f"  torch's f32 exp of the sinusoid frequencies differs from the correctly rounded value at entries "
          f"{torch_exp_rounding()}")
    print(f"  correctly rounded sinusoid vs torch's: output {rel_err(out_exact, out):.3e}, klein "
          f"{rel_err(out_klein_exact, out_klein):.3e}, reference {rel_err(out_ref_exact, out_ref):.3e}")
    bf16_err, bf16_arith = rel_err(out_bf16, out), rel_err(out_bf16, out_f32_bf16t)
    print(f"  output_bf16 vs output {bf16_err:.3e}, vs output_f32_bf16t {bf16_arith:.3e}; bf16 timestep x 1000 "
          f"{scaled['timestep'].tolist()}, guidance x 1000 {scaled['guidance'].tolist()}")
    full, full_out = full_training(dev, inputs, 5000)
    assert torch.equal(full_out, out_exact)
    print(f"  full training: loss {full['full_loss'].item():.6f}, {len(full) - 2} gradients")

    case = {k: inputs[k] for k in ("latents", "packed", "context", "timestep", "guidance", "img_ids", "txt_ids",
                                   "ref_ids", "reference_latents")}
    case.update({"output": out, "output_klein": out_klein, "output_reference": out_ref, "output_exact": out_exact,
                 "output_klein_exact": out_klein_exact, "output_reference_exact": out_ref_exact,
                 "output_bf16": out_bf16, "output_f32_bf16t": out_f32_bf16t,
                 "timestep_scaled_bf16": scaled["timestep"], "guidance_scaled_bf16": scaled["guidance"]})
    case.update(full)
    meta = base_metadata()
    meta["model"] = json.dumps(model_kwargs(True), sort_keys=True)
    meta["bf16_rel_err_vs_output"] = f"{bf16_err:.3e}"
    meta["bf16_rel_err_vs_output_f32_bf16t"] = f"{bf16_arith:.3e}"
    write_f32(case, os.path.join(OUT_DIR, "case.safetensors"), meta)
    return case


# ---------------------------------------------------------------------------------------------------------------
# 4-6: LoRA case, PEFT and BFL files
# ---------------------------------------------------------------------------------------------------------------

def target_modules():
    return [m for _, parts in linear_groups() for m in parts]


def make_lora_case(dev, inputs, seed):
    print("lora_case:")
    model = copy.deepcopy(dev)
    model.add_adapter(LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=target_modules(),
                                 init_lora_weights=True))
    assert adapted_modules(model) == sorted(target_modules()), "PEFT adapted other modules than the targets"
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, parts in linear_groups():
            shared_a = 0.3 * torch.randn(peft_layer(model, parts[0]).lora_A["default"].weight.shape, generator=gen)
            for p in parts:
                layer = peft_layer(model, p)
                layer.lora_A["default"].weight.copy_(shared_a)
                layer.lora_B["default"].weight.copy_(0.3 * torch.randn(layer.lora_B["default"].weight.shape,
                                                                      generator=gen))
    for n, p in model.named_parameters():
        p.requires_grad_(".lora_" in n)
    model.train()  # no dropout anywhere (lora_dropout=0; the attention's Dropout has p = 0)
    target = torch.randn((BATCH, LATENT_C, H, W), generator=gen)
    with correctly_rounded_sinusoid():
        out = diffusers_forward(model, inputs)
    loss = F.mse_loss(out, target)
    loss.backward()
    with torch.no_grad():
        out_plain = diffusers_forward(model, inputs)  # torch's sinusoid table, as BFL's code computes it

    case = {k: inputs[k] for k in ("latents", "context", "timestep", "guidance")}
    case.update({"target": target, "loss": loss.detach().reshape(()), "output": out.detach(),
                 "alpha": torch.tensor(ALPHA, dtype=torch.float32), "rank": torch.tensor(RANK, dtype=torch.int64)})
    for bfl, parts in linear_groups():
        layers = [peft_layer(model, p) for p in parts]
        a = [l.lora_A["default"].weight for l in layers]
        b = [l.lora_B["default"].weight for l in layers]
        for x in a[1:]:
            assert torch.equal(x, a[0])
        case[f"bfl.{bfl}.lora_down"] = a[0].detach()
        case[f"bfl.{bfl}.lora_up"] = torch.cat([x.detach() for x in b], 0)
        case[f"grad.bfl.{bfl}.lora_down"] = torch.stack([x.grad for x in a]).sum(0)
        case[f"grad.bfl.{bfl}.lora_up"] = torch.cat([x.grad for x in b], 0)
    for k, v in case.items():
        if k.startswith("grad."):
            assert float(v.abs().max()) > 0, f"{k}: zero gradient"
    meta = base_metadata()
    meta["lora"] = json.dumps({"r": RANK, "lora_alpha": ALPHA, "scale_baked_in": False,
                               "bfl_modules": [bfl for bfl, _ in linear_groups()],
                               "diffusers_targets": target_modules()}, sort_keys=True)
    write_f32(case, os.path.join(OUT_DIR, "lora_case.safetensors"), meta)
    print(f"  loss {loss.item():.6f}, output max |.| {out.abs().max().item():.4f}; change vs the base "
          f"{rel_err(out, diffusers_forward(dev, inputs).detach()):.3f}")
    return model, case, out_plain


def bfl_lora_tensors(case, with_alpha=False):
    """The LoRA in BFL names as ai-toolkit / diffusion-pipe write it: diffusion_model.<P>.lora_A.weight [r, in] and
    .lora_B.weight [out, r], fused layers as one adapter, no alpha (scale 1), so lora_B = (alpha / r) x lora_up.
    with_alpha: lora_B = lora_up plus a .alpha scalar (the kohya-style scale), for the rejection check."""
    out = {}
    for bfl, _ in linear_groups():
        stem = f"diffusion_model.{bfl}"
        out[f"{stem}.lora_A.weight"] = case[f"bfl.{bfl}.lora_down"]
        if with_alpha:
            out[f"{stem}.lora_B.weight"] = case[f"bfl.{bfl}.lora_up"]
            out[f"{stem}.alpha"] = torch.tensor(ALPHA, dtype=torch.float32)
        else:
            out[f"{stem}.lora_B.weight"] = (ALPHA / RANK) * case[f"bfl.{bfl}.lora_up"]
    return out


def load_lora_into_fresh(dev, path):
    """diffusers' FLUX.2 LoRA loading path (what Flux2Pipeline.load_lora_weights does: lora_state_dict, which converts
    the BFL / ai-toolkit naming, then load_lora_into_transformer) on a fresh copy of the dev model; returns it and the
    missing / unexpected LoRA keys (diffusers' warnings and our reconciliation of the loaded keys vs the adapter)."""
    model = copy.deepcopy(dev)
    with captured_warnings() as messages:
        state_dict, metadata = Flux2LoraLoaderMixin.lora_state_dict(path, return_lora_metadata=True)
        loaded_keys = dict(state_dict)
        Flux2LoraLoaderMixin.load_lora_into_transformer(state_dict, transformer=model, metadata=metadata,
                                                        adapter_name="check")
    _, missing, unexpected = reconcile_lora_keys(loaded_keys, model, "check")
    return model.eval(), missing, unexpected, lora_key_warnings(messages)


def check_diffusers_load(dev, path, inputs, expected, label):
    model, missing, unexpected, warned = load_lora_into_fresh(dev, path)
    with torch.no_grad(), correctly_rounded_sinusoid():
        out = diffusers_forward(model, inputs)
    err = rel_err(out, expected)
    print(f"  {label}: diffusers load on a fresh dev model: {len(missing)} missing, {len(unexpected)} unexpected "
          f"LoRA keys, {len(warned)} warnings; output vs lora_case {err:.3e}")
    assert not missing and not unexpected and not warned, (missing, unexpected, warned)
    assert err <= 1e-6, err
    return err


def diffusers_rejects_alpha(case):
    """diffusers' FLUX.2 converter for the BFL naming accepts no .alpha tensors (it raises on any key left over)."""
    tmp = tempfile.mkdtemp()
    try:
        path = os.path.join(tmp, "with_alpha.safetensors")
        save_file({k: v.contiguous().clone() for k, v in bfl_lora_tensors(case, with_alpha=True).items()}, path)
        try:
            Flux2LoraLoaderMixin.lora_state_dict(path)
        except ValueError as e:
            print(f"  the same file with .alpha tensors: diffusers raises ValueError ({str(e)[:60]}...)")
            return True
        print("  the same file with .alpha tensors: diffusers loads it")
        return False
    finally:
        shutil.rmtree(tmp)


def run_checker(args):
    proc = subprocess.run([sys.executable] + args, cwd=REPO, capture_output=True, text=True)
    last = [l for l in proc.stdout.splitlines() if l.strip()]
    print(f"  {os.path.basename(args[0])} {os.path.basename(args[-1])}: exit {proc.returncode}"
          f" ({last[-1] if last else proc.stderr.strip()[-200:]})")
    for line in last[:-1]:
        print(f"    {line}")
    return proc.returncode


def comfyui_checks(bfl_lora):
    comfy = [os.path.join(REPO, "tests", "reference", "comfyui_lora_keys.py"), "--model-keys",
             os.path.join(OUT_DIR, "dev_bfl.safetensors"), "--lora"]
    assert run_checker(comfy + [os.path.join(OUT_DIR, "lora_bfl.safetensors")]) == 0
    assert run_checker(comfy + [os.path.join(OUT_DIR, "lora_peft.safetensors")]) == 0
    tmp = tempfile.mkdtemp()
    try:  # the checker must reject a fused lora_B cut to one third and a key with a '.' changed
        broken = dict(bfl_lora)
        key = "diffusion_model.double_blocks.0.img_attn.qkv.lora_B.weight"
        broken[key] = broken[key][:HIDDEN]
        broken["diffusion_model.single_blocks.1.linear_1.lora_A.weight"] = \
            broken.pop("diffusion_model.single_blocks.1.linear1.lora_A.weight")
        path = os.path.join(tmp, "broken.safetensors")
        save_file({k: v.contiguous().clone() for k, v in broken.items()}, path)
        assert run_checker(comfy + [path]) == 1
    finally:
        shutil.rmtree(tmp)


# ---------------------------------------------------------------------------------------------------------------
# 7: independent checks against Black Forest Labs' code
# ---------------------------------------------------------------------------------------------------------------

def load_bfl_model_module(bfl_src):
    path = os.path.join(bfl_src, "flux2", "model.py") if bfl_src else None
    if not path or not os.path.isfile(path):
        print(f"NOTICE: BFL source not found (--bfl-src {bfl_src!r}); skipping the checks against BFL's code")
        return None
    spec = importlib.util.spec_from_file_location("bfl_flux2_model", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)  # Black Forest Labs' reference implementation (needs einops)
    return module


def bfl_forward(model, case, reference=False, guidance=None):
    x, ids = case["packed"], case["img_ids"]
    if reference:
        x = torch.cat([x, pack(case["reference_latents"])], dim=1)
        ids = torch.cat([ids, case["ref_ids"]], dim=0)
    with torch.no_grad():
        out = model(x=x, x_ids=ids[None].expand(BATCH, -1, -1), timesteps=case["timestep"], ctx=case["context"],
                    ctx_ids=case["txt_ids"][None].expand(BATCH, -1, -1),
                    guidance=case["guidance"] if guidance is None else guidance)
    return unpack(out[:, : H * W], case["img_ids"])


@contextlib.contextmanager
def float32_rope():
    """diffusers' FLUX.2 RoPE with its angles in float32 (Flux2PosEmbed asks maybe_adjust_dtype_for_device for
    float64), as BFL's rope() computes them."""
    import diffusers.models.transformers.transformer_flux2 as flux2_module
    original = flux2_module.maybe_adjust_dtype_for_device
    flux2_module.maybe_adjust_dtype_for_device = lambda dtype, device: torch.float32
    try:
        yield
    finally:
        flux2_module.maybe_adjust_dtype_for_device = original


def bfl_checks(bfl, case, lora_bfl, lora_plain_output, dev, klein):
    params = bfl.Flux2Params(in_channels=LATENT_C, context_in_dim=CONTEXT_DIM, hidden_size=HIDDEN, num_heads=HEADS,
                             depth=N_DOUBLE, depth_single_blocks=N_SINGLE, axes_dim=[8, 8, 8, 8], theta=2000,
                             mlp_ratio=3.0)
    torch.manual_seed(0)
    model = bfl.Flux2(params).eval()
    sd = {k: v.float() for k, v in load_file(os.path.join(OUT_DIR, "dev_bfl.safetensors")).items()}
    model.load_state_dict(sd, strict=True)
    results = {"output": rel_err(bfl_forward(model, case), case["output"]),
               "output_reference": rel_err(bfl_forward(model, case, reference=True), case["output_reference"])}
    # klein: BFL's Flux2 always has guidance_in; with its out_layer zeroed (no biases) it adds exactly 0 to vec.
    klein_sd = dict(sd)
    klein_sd["guidance_in.out_layer.weight"] = torch.zeros_like(sd["guidance_in.out_layer.weight"])
    model.load_state_dict(klein_sd, strict=True)
    results["output_klein"] = rel_err(bfl_forward(model, case), case["output_klein"])
    # The LoRA merged as ComfyUI merges lora_bfl (no alpha tensor: scale 1): W += B @ A.
    merged = dict(sd)
    n = 0
    for key in lora_bfl:
        if key.endswith(".lora_A.weight"):
            stem = key[: -len(".lora_A.weight")]
            down, up = lora_bfl[key], lora_bfl[f"{stem}.lora_B.weight"]
            scale = float(lora_bfl[f"{stem}.alpha"]) / down.shape[0] if f"{stem}.alpha" in lora_bfl else 1.0
            wkey = stem[len("diffusion_model."):] + ".weight"
            merged[wkey] = sd[wkey] + scale * (up @ down)
            n += 1
    model.load_state_dict(merged, strict=True)
    results["lora_bfl_merged"] = rel_err(bfl_forward(model, case), lora_plain_output)
    for k, v in results.items():
        print(f"  BFL Flux2 ({BFL_COMMIT}) vs diffusers, {k}: max rel err {v:.3e}"
              + (f" ({n} modules merged, vs the PEFT model's output with torch's sinusoid)" if k.startswith("lora")
                 else ""))
        assert v <= 1e-5, (k, v)
    # All of the difference is the RoPE angles: with diffusers' in float32 the outputs are the same bits.
    model.load_state_dict(sd, strict=True)
    with torch.no_grad(), float32_rope():
        same = [torch.equal(bfl_forward(model, case), diffusers_forward(dev, case)),
                torch.equal(bfl_forward(model, case, reference=True), diffusers_forward(dev, case, reference=True))]
        model.load_state_dict(klein_sd, strict=True)
        same.append(torch.equal(bfl_forward(model, case), diffusers_forward(klein, case, guidance=False)))
    print(f"  with diffusers' RoPE angles in float32 (BFL's precision): dev, reference, klein bit-identical: {same}")
    assert all(same)
    return results


# ---------------------------------------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bfl-src", default=os.environ.get("FLUX2_BFL_SRC"),
                        help="Black Forest Labs' flux2/src directory (git archive ab7cca6 src); optional "
                             "(default: $FLUX2_BFL_SRC)")
    args = parser.parse_args()
    deterministic_torch()
    os.makedirs(OUT_DIR, exist_ok=True)
    print(f"torch {torch.__version__}, diffusers {diffusers.__version__}, peft {peft.__version__}, "
          f"transformers {transformers.__version__}, safetensors {safetensors.__version__}, numpy {np.__version__}")

    dev = build_dev(1000)
    klein = klein_of(dev, 1002)
    inputs = make_inputs(1100)
    print("dev_bfl:")
    bfl_sd = write_bfl(dev)
    klein_bfl = diffusers_to_bfl({k: v for k, v in klein.state_dict().items()}, False)
    assert sorted(klein_bfl) == sorted(k for k in bfl_sd if not k.startswith("guidance_in."))
    for k, v in klein_bfl.items():
        assert torch.equal(v, bfl_sd[k]), k
    case = make_case(dev, klein, inputs)
    print("dev_diffusers:")
    write_diffusers(dev, inputs, case["output"])

    lora_model, lora_case, lora_plain = make_lora_case(dev, inputs, 3000)
    print("lora_peft:")
    peft_path = os.path.join(OUT_DIR, "lora_peft.safetensors")
    save_peft_lora(lora_model, peft_path, Flux2LoraLoaderMixin)
    check_diffusers_load(dev, peft_path, inputs, lora_case["output"], "lora_peft")
    print("lora_bfl:")
    bfl_lora = bfl_lora_tensors(lora_case)
    bfl_path = os.path.join(OUT_DIR, "lora_bfl.safetensors")
    write_f32(bfl_lora, bfl_path, {"format": "pt", "generator": "tests/reference/" + os.path.basename(__file__)})
    check_diffusers_load(dev, bfl_path, inputs, lora_case["output"], "lora_bfl")
    assert diffusers_rejects_alpha(lora_case)
    print("ComfyUI's key rule (tests/reference/comfyui_lora_keys.py):")
    comfyui_checks(bfl_lora)

    print("check against BFL's code:")
    bfl = load_bfl_model_module(args.bfl_src)
    if bfl is not None:
        bfl_checks(bfl, case, bfl_lora, lora_plain, dev, klein)

    print_total_size(OUT_DIR)


if __name__ == "__main__":
    main()
