#!/usr/bin/env python3
"""Generates tests/data/flux/: tiny random Flux.1 models (dev and schnell) in Black Forest Labs' and diffusers'
layouts, their forward outputs, LoRA/DoRA forward+backward cases computed with PEFT on diffusers, the same LoRA
as diffusers/PEFT and kohya/ComfyUI files, and an independent check of the BFL conversion against BFL's own code.
See tests/data/flux/README.md for every file and tensor.

Made with (pip, CPU only): torch 2.15.0 (+cu132 wheel), diffusers 0.42.1, peft 0.21.2, transformers 5.24.0,
safetensors 0.8.0, numpy 2.4.6, einops 0.8.2 (for BFL's code), Python 3; Black Forest Labs' flux repository at
commit 802fb47 ("FLUX.1 Krea Release"). Run from the repository root:
    /tmp/venv/bin/pip install torch diffusers peft transformers safetensors numpy einops
    git --git-dir=<mirror of black-forest-labs/flux> archive 802fb47 src | tar -x -C /tmp/bfl_flux
    /tmp/venv/bin/python tests/reference/make_flux_fixtures.py --bfl-src /tmp/bfl_flux/src
Without --bfl-src (or when it does not exist) the check against BFL's code is skipped with a notice; the files
written are the same. Everything runs in float32 on the CPU, one thread, torch.use_deterministic_algorithms(True);
torch.manual_seed is set before each constructor and every random tensor comes from a seeded torch.Generator, so a
rerun rewrites byte-identical files (safetensors metadata is re-serialised with sorted keys, because the library
writes it in hash order: reference_common.sort_metadata).

Models. FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=2, num_single_layers=2,
attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=24,
axes_dims_rope=[4, 6, 6], guidance_embeds=True for "dev" / False for "schnell"): hidden 32, 2 heads of 16,
MLP 128, 4 latent channels packed 2x2 into 16 features. After construction every parameter is redrawn (so that
every weight is non-zero, independent and large enough to matter): weights N(0, (0.2 * sqrt(32 / fan_in))^2), i.e.
std 0.2 for the 32-wide inputs, 0.28 for img_in (16), 0.23 for vector_in (24), 0.1 / 0.089 for the 128 / 160-wide
inputs, 0.071 for the 256-wide timestep/guidance inputs; biases N(0, 0.1^2); RMSNorm scales 1 + 0.1 N(0, 1).
Outputs stay O(1) (dev: max 4.4, std 1.4; schnell: max 3.8, std 1.2).

BFL layout (dev_bfl / schnell_bfl) is made by this script's own converter (diffusers_to_bfl): qkv = rows of
to_q|to_k|to_v (weight and bias), linear1 = rows of to_q|to_k|to_v|proj_mlp, RMSNorm .weight -> .scale, and
final_layer.adaLN_modulation.1 = norm_out.linear with its two row halves swapped (diffusers: scale|shift,
BFL: shift|scale); everything else is a rename (MODELS.md section 1.1).

Inputs (dev_case / schnell_case): batch 2, latents [2, 4, 6, 10] (non-square; 3 x 5 = 15 image tokens),
7 text tokens of width 32, pooled [2, 24], timestep sigma = (0.27, 0.81) (the model multiplies by 1000),
guidance (1.0, 3.5) for dev. Packing: view (B, C, H/2, 2, W/2, 2) -> permute (0, 2, 4, 1, 3, 5) -> (B, HW/4, 4C),
features ordered (c, ph, pw). img_ids[r*w + c] = (0, r, c), txt_ids = 0; diffusers takes them 2-D, BFL per sample.

LoRA / DoRA cases (dev only): PEFT LoraConfig(r=4, lora_alpha=8, lora_dropout=0, use_dora=False/True) on the 40
Linear layers inside transformer_blocks / single_transformer_blocks (full module names, nothing else adapted). The
lora_A of the layers that BFL fuses (img to_q/to_k/to_v; txt add_q/add_k/add_v_proj; single to_q/to_k/to_v/
proj_mlp) are set to one shared random matrix (std 0.3), so PEFT's separate adapters equal one adapter on the fused
BFL layer; every lora_B is random (std 0.3), DoRA magnitudes are PEFT's initial row norms times (1 + 0.1 N(0, 1)).
Loss = mean((output_packed - target)^2), target random [2, 15, 16]. The scale alpha / r = 2 is NOT baked into any
stored tensor: wick applies W + (alpha / r) * lora_up @ lora_down. DoRA follows PEFT: W' = m / ||W + s B A||_row *
(W + s B A), with the row norm treated as a constant in backward (PEFT detaches it, DoRA paper section 4.3); bias
added after. The row norm is per output row, so the fused layer's magnitude is the row-concatenation.

Measured (this script's last run; errors are max|a - b| / max|b|):
  BFL's Flux (802fb47, strict load of dev_bfl / schnell_bfl) vs diffusers output:  dev 3.3e-07, schnell 2.2e-07.
    All of it comes from the RoPE angles: diffusers computes them in float64, BFL in float32; with diffusers'
    RoPE forced to float32 (maybe_adjust_dtype_for_device patched) the two outputs were bit-identical (0.0).
  BFL's Flux with dev_lora_kohya merged (W += alpha/r * up @ down, 26 modules) vs the PEFT LoRA output:  5.9e-07
  diffusers (lora_state_dict + load_lora_into_transformer) of dev_lora_peft on a fresh dev model vs the PEFT case
    output: 0 (bit-identical), 0 missing / 0 unexpected LoRA keys; the same for a PEFT DoRA export (not committed).
  bf16 (diffusers model .to(bfloat16), CPU, inputs cast to bf16, timestep/guidance passed in f32):
    output_bf16 vs output: dev 5.0e-01, schnell 2.0e-01 -- dominated by the timestep: diffusers casts sigma to bf16
    and multiplies by 1000 in bf16, so 0.27 -> 270 but 0.81 -> 808 (not 810) and guidance 3.5 -> 3504 (not 3500),
    which moves the highest-frequency sinusoid features by whole radians. output_bf16 vs output_f32_bf16t (the f32
    model fed the same quantised values): dev 1.5e-02, schnell 1.0e-02 -- the bf16 arithmetic. Suggested tolerance
    for a bf16 port that quantises t the same way: 5e-2 against output_bf16 or output_f32_bf16t.

diffusers 0.42.1 details that a port must match: the forward casts timestep and guidance to the hidden-state dtype
and multiplies by 1000 in that dtype (see above); the 256-wide sinusoid (cos first) is computed in f32 from that
value and cast to the pooled-projection dtype; RoPE angles are pos (f32) x frequencies (f64) -> f64, cos/sin cast to
f32, and the rotation is done in f32 and cast back to the activation dtype; 2-D img_ids/txt_ids (3-D is deprecated
and only sample 0 is used); default constructor init is non-zero everywhere (nothing is zero-initialised in 0.42.1's
FluxTransformer2DModel), the redraw is for larger, independent weights. PEFT 0.21.2 rewrites a long target_modules
list into minimal suffixes when it saves the config ("2", "proj", "0.proj_out", "to_q", ...), so
dev_lora_peft's lora_adapter_metadata does not list the full module names.
"""
import argparse
import copy
import json
import os
import shutil
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
from diffusers import FluxTransformer2DModel
from diffusers.loaders import FluxLoraLoaderMixin
from peft import LoraConfig

from reference_common import REPO, data_dir, print_total_size
from reference_torch import (adapted_modules, captured_warnings, deterministic_torch, flux_img_ids,
                             generator_metadata, lora_key_warnings, pack_flux_latents, peft_layer,
                             reconcile_lora_keys, rel_err, save_peft_lora, save_sharded_diffusers,
                             unpack_flux_latents, write_f32)

OUT_DIR = data_dir("flux")

N_DOUBLE, N_SINGLE, HIDDEN, HEAD_DIM, HEADS = 2, 2, 32, 16, 2
LATENT_C, H, W, TXT_LEN, BATCH = 4, 6, 10, 7, 2
CONTEXT_DIM, POOLED_DIM = 32, 24
RANK, ALPHA = 4, 8.0
TIMESTEPS = (0.27, 0.81)
GUIDANCE = (1.0, 3.5)
BFL_COMMIT = "802fb47"


def model_kwargs(guidance):
    return dict(patch_size=1, in_channels=LATENT_C * 4, num_layers=N_DOUBLE, num_single_layers=N_SINGLE,
                attention_head_dim=HEAD_DIM, num_attention_heads=HEADS, joint_attention_dim=CONTEXT_DIM,
                pooled_projection_dim=POOLED_DIM, guidance_embeds=guidance, axes_dims_rope=[4, 6, 6])


# ---------------------------------------------------------------------------------------------------------------
# Name tables: BFL module <- diffusers module(s). One table drives the weight converter and the LoRA converter.
# ---------------------------------------------------------------------------------------------------------------

def linear_groups(n_double=N_DOUBLE, n_single=N_SINGLE):
    """(BFL Linear path, [diffusers Linear paths concatenated by rows in this order]) for every Linear inside the
    blocks: the modules the LoRA cases adapt."""
    groups = []
    for i in range(n_double):
        d, b = f"transformer_blocks.{i}", f"double_blocks.{i}"
        groups += [
            (f"{b}.img_mod.lin", [f"{d}.norm1.linear"]),
            (f"{b}.img_attn.qkv", [f"{d}.attn.to_q", f"{d}.attn.to_k", f"{d}.attn.to_v"]),
            (f"{b}.img_attn.proj", [f"{d}.attn.to_out.0"]),
            (f"{b}.img_mlp.0", [f"{d}.ff.net.0.proj"]),
            (f"{b}.img_mlp.2", [f"{d}.ff.net.2"]),
            (f"{b}.txt_mod.lin", [f"{d}.norm1_context.linear"]),
            (f"{b}.txt_attn.qkv", [f"{d}.attn.add_q_proj", f"{d}.attn.add_k_proj", f"{d}.attn.add_v_proj"]),
            (f"{b}.txt_attn.proj", [f"{d}.attn.to_add_out"]),
            (f"{b}.txt_mlp.0", [f"{d}.ff_context.net.0.proj"]),
            (f"{b}.txt_mlp.2", [f"{d}.ff_context.net.2"]),
        ]
    for i in range(n_single):
        s, b = f"single_transformer_blocks.{i}", f"single_blocks.{i}"
        groups += [
            (f"{b}.linear1", [f"{s}.attn.to_q", f"{s}.attn.to_k", f"{s}.attn.to_v", f"{s}.proj_mlp"]),
            (f"{b}.linear2", [f"{s}.proj_out"]),
            (f"{b}.modulation.lin", [f"{s}.norm.linear"]),
        ]
    return groups


def outer_linears(guidance):
    """(BFL Linear path, diffusers Linear path) outside the blocks (final_layer.adaLN_modulation.1 is handled apart)."""
    pairs = [
        ("img_in", "x_embedder"),
        ("txt_in", "context_embedder"),
        ("time_in.in_layer", "time_text_embed.timestep_embedder.linear_1"),
        ("time_in.out_layer", "time_text_embed.timestep_embedder.linear_2"),
        ("vector_in.in_layer", "time_text_embed.text_embedder.linear_1"),
        ("vector_in.out_layer", "time_text_embed.text_embedder.linear_2"),
        ("final_layer.linear", "proj_out"),
    ]
    if guidance:
        pairs += [("guidance_in.in_layer", "time_text_embed.guidance_embedder.linear_1"),
                  ("guidance_in.out_layer", "time_text_embed.guidance_embedder.linear_2")]
    return pairs


def norm_pairs(n_double=N_DOUBLE, n_single=N_SINGLE):
    """(BFL RMSNorm scale key, diffusers RMSNorm weight key)."""
    pairs = []
    for i in range(n_double):
        d, b = f"transformer_blocks.{i}.attn", f"double_blocks.{i}"
        pairs += [(f"{b}.img_attn.norm.query_norm.scale", f"{d}.norm_q.weight"),
                  (f"{b}.img_attn.norm.key_norm.scale", f"{d}.norm_k.weight"),
                  (f"{b}.txt_attn.norm.query_norm.scale", f"{d}.norm_added_q.weight"),
                  (f"{b}.txt_attn.norm.key_norm.scale", f"{d}.norm_added_k.weight")]
    for i in range(n_single):
        s, b = f"single_transformer_blocks.{i}.attn", f"single_blocks.{i}"
        pairs += [(f"{b}.norm.query_norm.scale", f"{s}.norm_q.weight"),
                  (f"{b}.norm.key_norm.scale", f"{s}.norm_k.weight")]
    return pairs


def swap_halves(t):
    """(a | b) -> (b | a) along rows: diffusers norm_out.linear (scale, shift) <-> BFL final adaLN (shift, scale)."""
    first, second = t.chunk(2, dim=0)
    return torch.cat([second, first], dim=0).contiguous()


def diffusers_to_bfl(sd, guidance):
    """Our own diffusers -> BFL converter for Flux (sizes read from the tensors, so it works on tiny models)."""
    out, used = {}, set()

    def take(key):
        assert key not in used, f"{key} used twice"
        used.add(key)
        return sd[key]

    for bfl, parts in linear_groups():
        for suffix in ("weight", "bias"):
            out[f"{bfl}.{suffix}"] = torch.cat([take(f"{p}.{suffix}") for p in parts], dim=0).contiguous()
    for bfl, dif in outer_linears(guidance):
        for suffix in ("weight", "bias"):
            out[f"{bfl}.{suffix}"] = take(f"{dif}.{suffix}").contiguous()
    for bfl, dif in norm_pairs():
        out[bfl] = take(dif).contiguous()
    for suffix in ("weight", "bias"):
        out[f"final_layer.adaLN_modulation.1.{suffix}"] = swap_halves(take(f"norm_out.linear.{suffix}"))
    unused = sorted(set(sd) - used)
    assert not unused, f"diffusers keys not converted: {unused}"
    return out


# ---------------------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------------------

def base_metadata():
    return generator_metadata(__file__, diffusers, peft)


def build_model(guidance, seed):
    torch.manual_seed(seed)
    model = FluxTransformer2DModel(**model_kwargs(guidance))
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif p.ndim == 1:  # RMSNorm scales (norm_q / norm_k / norm_added_q / norm_added_k)
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                std = 0.2 * (32.0 / p.shape[1]) ** 0.5
                p.copy_(std * torch.randn(p.shape, generator=gen))
    return model.eval()


def make_inputs(seed, guidance):
    gen = torch.Generator().manual_seed(seed)
    inputs = {
        "latents": torch.randn((BATCH, LATENT_C, H, W), generator=gen),
        "context": torch.randn((BATCH, TXT_LEN, CONTEXT_DIM), generator=gen),
        "pooled": torch.randn((BATCH, POOLED_DIM), generator=gen),
        "timestep": torch.tensor(TIMESTEPS, dtype=torch.float32),
        "img_ids": flux_img_ids(H, W),
        "txt_ids": torch.zeros((TXT_LEN, 3), dtype=torch.float32),
    }
    if guidance:
        inputs["guidance"] = torch.tensor(GUIDANCE, dtype=torch.float32)
    inputs["packed"] = pack_flux_latents(inputs["latents"])
    return inputs


def diffusers_forward(model, inputs, dtype=torch.float32):
    def cast(t):
        return t.to(dtype)
    return model(hidden_states=cast(inputs["packed"]), encoder_hidden_states=cast(inputs["context"]),
                 pooled_projections=cast(inputs["pooled"]), timestep=inputs["timestep"],
                 img_ids=inputs["img_ids"], txt_ids=inputs["txt_ids"], guidance=inputs.get("guidance"),
                 return_dict=False)[0]


# ---------------------------------------------------------------------------------------------------------------
# 1-3: base models, BFL / diffusers weights, forward cases
# ---------------------------------------------------------------------------------------------------------------

def make_base(name, guidance, seed):
    print(f"{name}:")
    model = build_model(guidance, seed)
    inputs = make_inputs(seed + 100, guidance)
    with torch.no_grad():
        out_packed = diffusers_forward(model, inputs)
        bf16_model = copy.deepcopy(model).to(torch.bfloat16)
        out_bf16 = diffusers_forward(bf16_model, inputs, torch.bfloat16).float()
        # What the bf16 forward feeds the sinusoidal embeddings: timestep.to(bf16) * 1000, rounded to bf16 again.
        scaled = {k: (inputs[k].to(torch.bfloat16) * 1000).float() for k in ("timestep", "guidance") if k in inputs}
        quantized = dict(inputs)
        for k, v in scaled.items():
            quantized[k] = v / 1000
            assert torch.equal(quantized[k] * 1000, v), (k, quantized[k] * 1000, v)
        out_f32_bf16t = diffusers_forward(model, quantized)
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    bfl = diffusers_to_bfl(sd, guidance)
    meta = base_metadata()
    meta["model"] = json.dumps(model_kwargs(guidance), sort_keys=True)
    write_f32(bfl, os.path.join(OUT_DIR, f"{name}_bfl.safetensors"), meta)
    case = dict(inputs)
    case["output_packed"] = out_packed
    case["output"] = unpack_flux_latents(out_packed, H, W)
    case["output_bf16"] = unpack_flux_latents(out_bf16, H, W)
    case["output_f32_bf16t"] = unpack_flux_latents(out_f32_bf16t, H, W)
    for k, v in scaled.items():
        case[f"{k}_scaled_bf16"] = v
    bf16_err = rel_err(case["output_bf16"], case["output"])
    bf16_arith_err = rel_err(case["output_bf16"], case["output_f32_bf16t"])
    case_meta = base_metadata()
    case_meta["bf16_rel_err_vs_output"] = f"{bf16_err:.3e}"
    case_meta["bf16_rel_err_vs_output_f32_bf16t"] = f"{bf16_arith_err:.3e}"
    write_f32(case, os.path.join(OUT_DIR, f"{name}_case.safetensors"), case_meta)
    print(f"  output max |.| {out_packed.abs().max().item():.4f}, std {out_packed.std().item():.4f}; "
          f"output_bf16 vs output max rel err {bf16_err:.3e}, vs output_f32_bf16t {bf16_arith_err:.3e}; "
          f"scaled bf16 t/g {[v.tolist() for v in scaled.values()]}")
    return model, inputs, case


# ---------------------------------------------------------------------------------------------------------------
# 4-6: LoRA / DoRA cases, PEFT and kohya files
# ---------------------------------------------------------------------------------------------------------------

def target_modules():
    return [m for _, parts in linear_groups() for m in parts]


def lora_config(use_dora):
    return LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, use_dora=use_dora, target_modules=target_modules(),
                      init_lora_weights=True)


def make_lora_case(base_model, inputs, use_dora, seed):
    kind = "dora" if use_dora else "lora"
    print(f"dev_{kind}:")
    model = copy.deepcopy(base_model)
    model.add_adapter(lora_config(use_dora))
    assert adapted_modules(model) == sorted(target_modules()), "PEFT adapted other modules than the targets"
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, parts in linear_groups():
            first = peft_layer(model, parts[0])
            shared_a = 0.3 * torch.randn(first.lora_A["default"].weight.shape, generator=gen)
            for p in parts:
                layer = peft_layer(model, p)
                layer.lora_A["default"].weight.copy_(shared_a)
                layer.lora_B["default"].weight.copy_(0.3 * torch.randn(layer.lora_B["default"].weight.shape,
                                                                      generator=gen))
                if use_dora:
                    mag = layer.lora_magnitude_vector["default"].weight
                    mag.mul_(1.0 + 0.1 * torch.randn(mag.shape, generator=gen))
    for n, p in model.named_parameters():
        p.requires_grad_(".lora_" in n)
    model.train()  # no dropout anywhere (lora_dropout=0, Flux has none); train mode disables PEFT's DoRA cache
    target = torch.randn((BATCH, (H // 2) * (W // 2), LATENT_C * 4), generator=gen)
    out_packed = diffusers_forward(model, inputs)
    loss = F.mse_loss(out_packed, target)
    loss.backward()

    case = {k: v for k, v in inputs.items()}
    case["target"] = target
    case["loss"] = loss.detach().reshape(())
    case["output_packed"] = out_packed.detach()
    case["output"] = unpack_flux_latents(out_packed.detach(), H, W)
    case["alpha"] = torch.tensor(ALPHA, dtype=torch.float32)
    case["rank"] = torch.tensor(RANK, dtype=torch.int64)
    kohya = {}
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
        if use_dora:
            m = [l.lora_magnitude_vector["default"].weight for l in layers]
            case[f"bfl.{bfl}.magnitude"] = torch.cat([x.detach() for x in m], 0)
            case[f"grad.bfl.{bfl}.magnitude"] = torch.cat([x.grad for x in m], 0)
        for p, layer in zip(parts, layers):
            case[f"peft.{p}.lora_A"] = layer.lora_A["default"].weight.detach()
            case[f"peft.{p}.lora_B"] = layer.lora_B["default"].weight.detach()
            case[f"grad.peft.{p}.lora_A"] = layer.lora_A["default"].weight.grad
            case[f"grad.peft.{p}.lora_B"] = layer.lora_B["default"].weight.grad
            if use_dora:
                case[f"peft.{p}.lora_magnitude_vector"] = layer.lora_magnitude_vector["default"].weight.detach()
                case[f"grad.peft.{p}.lora_magnitude_vector"] = layer.lora_magnitude_vector["default"].weight.grad
        stem = "lora_unet_" + bfl.replace(".", "_")
        kohya[f"{stem}.lora_down.weight"] = case[f"bfl.{bfl}.lora_down"]
        kohya[f"{stem}.lora_up.weight"] = case[f"bfl.{bfl}.lora_up"]
        kohya[f"{stem}.alpha"] = torch.tensor(ALPHA, dtype=torch.float32)
    for k, v in case.items():
        assert v is not None, f"{k}: no gradient"
        if k.startswith("grad."):
            assert float(v.abs().max()) > 0, f"{k}: zero gradient"
    meta = base_metadata()
    meta["lora"] = json.dumps({"r": RANK, "lora_alpha": ALPHA, "use_dora": use_dora, "scale_baked_in": False},
                              sort_keys=True)
    write_f32(case, os.path.join(OUT_DIR, f"dev_{kind}_case.safetensors"), meta)
    print(f"  loss {loss.item():.6f}, output max |.| {out_packed.abs().max().item():.4f}, "
          f"change vs base {rel_err(out_packed, diffusers_forward(base_model, inputs)):.3f}")
    return model, case, kohya


def load_peft_into_fresh(base_model, path):
    """diffusers' Flux LoRA loading path (lora_state_dict + load_lora_into_transformer, what
    FluxPipeline.load_lora_weights does) on a fresh copy; returns the model and the count of missing /
    unexpected LoRA keys (diffusers' warnings and our own reconciliation of file keys vs adapter parameters)."""
    model = copy.deepcopy(base_model)
    with captured_warnings() as messages:
        state_dict, alphas, metadata = FluxLoraLoaderMixin.lora_state_dict(path, return_alphas=True,
                                                                           return_lora_metadata=True)
        file_keys = dict(state_dict)
        FluxLoraLoaderMixin.load_lora_into_transformer(state_dict, network_alphas=alphas or None, transformer=model,
                                                      metadata=metadata, adapter_name="check")
    _, missing, unexpected = reconcile_lora_keys(file_keys, model, "check")
    return model.eval(), missing, unexpected, lora_key_warnings(messages)


def check_peft_file(base_model, path, inputs, expected_packed, label):
    model, missing, unexpected, warned = load_peft_into_fresh(base_model, path)
    with torch.no_grad():
        out = diffusers_forward(model, inputs)
    err = rel_err(out, expected_packed)
    print(f"  {label}: diffusers load: {len(missing)} missing, {len(unexpected)} unexpected LoRA keys, "
          f"{len(warned)} warnings; output vs PEFT case max rel err {err:.3e}")
    assert not missing and not unexpected and not warned, (missing, unexpected, warned)
    assert err <= 1e-6, err
    return err


# ---------------------------------------------------------------------------------------------------------------
# 7: independent check against Black Forest Labs' code
# ---------------------------------------------------------------------------------------------------------------

def bfl_check(bfl_src, cases, kohya):
    if not bfl_src or not os.path.isdir(os.path.join(bfl_src, "flux")):
        print(f"NOTICE: BFL source not found (--bfl-src {bfl_src!r}); skipping the check against BFL's code")
        return None
    sys.path.insert(0, bfl_src)
    from flux.model import Flux, FluxParams  # noqa: E402  (Black Forest Labs' reference implementation)

    results = {}
    for name, guidance in (("dev", True), ("schnell", False)):
        params = FluxParams(in_channels=16, out_channels=16, vec_in_dim=POOLED_DIM, context_in_dim=CONTEXT_DIM,
                            hidden_size=HIDDEN, mlp_ratio=4.0, num_heads=HEADS, depth=N_DOUBLE,
                            depth_single_blocks=N_SINGLE, axes_dim=[4, 6, 6], theta=10000, qkv_bias=True,
                            guidance_embed=guidance)
        torch.manual_seed(0)
        model = Flux(params).eval()
        sd = load_file(os.path.join(OUT_DIR, f"{name}_bfl.safetensors"))
        model.load_state_dict(sd, strict=True)
        case = cases[name]

        def run(m):
            with torch.no_grad():
                return m(img=case["packed"], img_ids=case["img_ids"][None].repeat(BATCH, 1, 1),
                         txt=case["context"], txt_ids=case["txt_ids"][None].repeat(BATCH, 1, 1),
                         timesteps=case["timestep"], y=case["pooled"], guidance=case.get("guidance"))

        err = rel_err(run(model), case["output_packed"])
        results[name] = err
        print(f"  BFL Flux ({BFL_COMMIT}) vs diffusers, {name}: max rel err {err:.3e}")
        assert err <= 1e-5, err
        if name == "dev":
            merged = dict(sd)
            n = 0
            for key in kohya:
                if not key.endswith(".lora_down.weight"):
                    continue
                stem = key[: -len(".lora_down.weight")]
                path = stem[len("lora_unet_"):]
                # undo '.'->'_' by matching against the model's Linear weights
                wkey = next(k for k in sd if k.endswith(".weight") and k[: -len(".weight")].replace(".", "_") == path)
                down, up = kohya[f"{stem}.lora_down.weight"], kohya[f"{stem}.lora_up.weight"]
                alpha = float(kohya[f"{stem}.alpha"])
                merged[wkey] = sd[wkey] + (alpha / down.shape[0]) * (up @ down)
                n += 1
            model.load_state_dict(merged, strict=True)
            err = rel_err(run(model), cases["dev_lora"]["output_packed"])
            results["kohya_merged"] = err
            print(f"  BFL Flux + merged dev_lora_kohya ({n} modules) vs PEFT LoRA output: max rel err {err:.3e}")
            assert err <= 1e-5, err
    return results


# ---------------------------------------------------------------------------------------------------------------
# 8-9: the checkers must accept the fixtures and reject broken copies
# ---------------------------------------------------------------------------------------------------------------

def run_checker(args):
    import subprocess
    proc = subprocess.run([sys.executable] + args, cwd=REPO, capture_output=True, text=True)
    last = [l for l in proc.stdout.splitlines() if l.strip()]
    print(f"  {os.path.basename(args[0])} {os.path.basename(args[-1])}: exit {proc.returncode}"
          f" ({last[-1] if last else proc.stderr.strip()[-200:]})")
    return proc.returncode


def self_test_checkers(kohya):
    ref = os.path.join(REPO, "tests", "reference")
    comfy = [os.path.join(ref, "comfyui_lora_keys.py"), "--model-keys", os.path.join(OUT_DIR, "dev_bfl.safetensors"),
             "--lora"]
    assert run_checker(comfy + [os.path.join(OUT_DIR, "dev_lora_kohya.safetensors")]) == 0
    assert run_checker(comfy + [os.path.join(OUT_DIR, "dev_lora_peft.safetensors")]) == 0
    tmp = tempfile.mkdtemp()
    try:
        broken = dict(kohya)  # one key with a '.' left in the module path, one lora_up cut to the wrong height
        broken["lora_unet_double_blocks_0_img_attn.qkv.lora_down.weight"] = \
            broken.pop("lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight")
        broken["lora_unet_single_blocks_1_linear1.lora_up.weight"] = \
            broken["lora_unet_single_blocks_1_linear1.lora_up.weight"][: 3 * HIDDEN]
        path = os.path.join(tmp, "broken_kohya.safetensors")
        save_file({k: v.contiguous().clone() for k, v in broken.items()}, path)
        assert run_checker(comfy + [path]) == 1
    finally:
        shutil.rmtree(tmp)
    check = [os.path.join(ref, "check_flux_lora.py"), "--weights", os.path.join(OUT_DIR, "dev_diffusers"),
             "--case", os.path.join(OUT_DIR, "dev_lora_case.safetensors"), "--lora"]
    assert run_checker(check + [os.path.join(OUT_DIR, "dev_lora_peft.safetensors")]) == 0
    base_check = list(check)
    base_check[base_check.index("--case") + 1] = os.path.join(OUT_DIR, "dev_case.safetensors")
    assert run_checker(base_check + [os.path.join(OUT_DIR, "dev_lora_peft.safetensors")]) == 1


# ---------------------------------------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bfl-src", default=None,
                        help="Black Forest Labs' flux/src directory (git archive 802fb47 src); optional")
    args = parser.parse_args()
    deterministic_torch()
    os.makedirs(OUT_DIR, exist_ok=True)
    print(f"torch {torch.__version__}, diffusers {diffusers.__version__}, peft {peft.__version__}, "
          f"transformers {transformers.__version__}, safetensors {safetensors.__version__}, numpy {np.__version__}")

    dev, dev_inputs, dev_case = make_base("dev", True, 1000)
    schnell, _, schnell_case = make_base("schnell", False, 2000)
    print("dev_diffusers:")
    save_sharded_diffusers(dev, os.path.join(OUT_DIR, "dev_diffusers"), "200KB")

    lora_model, lora_case, kohya = make_lora_case(dev, dev_inputs, use_dora=False, seed=3000)
    save_peft_lora(lora_model, os.path.join(OUT_DIR, "dev_lora_peft.safetensors"), FluxLoraLoaderMixin)
    check_peft_file(dev, os.path.join(OUT_DIR, "dev_lora_peft.safetensors"), dev_inputs,
                    lora_case["output_packed"], "dev_lora_peft")
    kohya_meta = {"ss_network_module": "networks.lora_flux", "ss_network_dim": str(RANK),
                  "ss_network_alpha": str(ALPHA), "ss_base_model_version": "flux1",
                  "generator": "tests/reference/make_flux_fixtures.py"}
    write_f32(kohya, os.path.join(OUT_DIR, "dev_lora_kohya.safetensors"), kohya_meta)

    dora_model, dora_case, _ = make_lora_case(dev, dev_inputs, use_dora=True, seed=4000)
    tmp = tempfile.mkdtemp()
    try:  # not committed: checks that diffusers reloads a PEFT DoRA export (lora_magnitude_vector keys)
        dora_path = os.path.join(tmp, "dora.safetensors")
        save_peft_lora(dora_model, dora_path, FluxLoraLoaderMixin)
        check_peft_file(dev, dora_path, dev_inputs, dora_case["output_packed"], "dev_dora_peft (temporary)")
    finally:
        shutil.rmtree(tmp)

    print("check against BFL's code:")
    bfl_check(args.bfl_src, {"dev": dev_case, "schnell": schnell_case, "dev_lora": lora_case}, kohya)

    print("self-test of the checkers:")
    self_test_checkers(kohya)

    print_total_size(OUT_DIR)


if __name__ == "__main__":
    main()
