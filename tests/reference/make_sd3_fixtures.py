#!/usr/bin/env python3
"""Generates tests/data/sd3/: tiny random SD3 / SD3.5 MMDiTs (a Medium-like one with dual attention and QK norm, a
Large-like one with QK norm only, an SD3.0-like one with neither) in Stability AI's and diffusers' layouts, their
forward outputs on latents that need the position table cropped (square and non-square) and on one that fills it,
LoRA/DoRA forward+backward cases computed with PEFT on diffusers, the same LoRA as diffusers/PEFT and kohya files, and
two independent checks of the SAI conversion: diffusers' own SAI -> diffusers converter, and Stability AI's own
mmditx.py / sd3_impls.py code. See tests/data/sd3/README.md for every file and tensor.

Made with (pip, CPU only): torch 2.15.0 (+cu132 wheel), diffusers 0.42.1, peft 0.21.2, transformers 5.24.0,
safetensors 0.8.0, numpy 2.4.6, einops 0.8.2 (for SAI's code), Python 3; Stability AI's sd3.5 repository at commit
fbf8f48. Run from the repository root:
    /tmp/venv/bin/pip install torch diffusers peft transformers safetensors numpy einops
    git --git-dir=<mirror of Stability-AI/sd3.5> archive fbf8f48 | tar -x -C /tmp/sai_sd35
    /tmp/venv/bin/python tests/reference/make_sd3_fixtures.py --sai-src /tmp/sai_sd35
Without --sai-src the checks against SAI's code are skipped with a notice; the files written are the same. Everything
runs in float32 on the CPU, one thread, torch.use_deterministic_algorithms(True); torch.manual_seed is set before each
constructor and every random tensor comes from a seeded torch.Generator, so a rerun rewrites byte-identical files.

Models. SD3Transformer2DModel(patch_size=2, in_channels=16, out_channels=16, attention_head_dim=8,
num_attention_heads=4, joint_attention_dim=32, caption_projection_dim=32, pooled_projection_dim=64,
pos_embed_max_size=6) with
  medium: num_layers=3, dual_attention_layers=(0, 1), qk_norm="rms_norm"   (block 2, the pre-only one, has no attn2)
  large:  num_layers=2, dual_attention_layers=(),     qk_norm="rms_norm"
  sd3:    num_layers=2, dual_attention_layers=(),     qk_norm=None
hidden 32 (4 heads of 8), MLP 128, 16 latent channels in 2x2 patches (64 features). Every parameter is redrawn after
construction: weights N(0, (0.2 sqrt(32 / fan_in))^2), biases N(0, 0.1^2), RMSNorm scales 1 + 0.1 N(0, 1), and the
position table pos_embed.pos_embed (a persistent buffer, sin-cos at construction) N(0, 0.5^2) so that a wrong crop
cannot go unseen.

SAI layout (<model>_sai.safetensors) is made by this script's own converter (diffusers_to_sai): qkv = rows of
to_q|to_k|to_v (attn, attn2) or add_q|add_k|add_v_proj (context), norm_q/norm_k/norm_added_q/norm_added_k -> ln_q/ln_k,
and the two (shift, scale) <-> (scale, shift) half swaps: norm_out.linear -> final_layer.adaLN_modulation.1 and the
last block's norm1_context.linear (AdaLayerNormContinuous) -> its context_block.adaLN_modulation.1.

Inputs (<model>_case): batch 2, context [2, 7, 32], pooled [2, 64], sigma = (0.27, 0.81); diffusers is given
timestep = sigma * 1000 computed in f32 (wick computes the same product). Three latents:
  square [2, 16, 8, 8]   -> 4 x 4 patches, the centre of the 6 x 6 table (top 1, left 1)
  wide   [2, 16, 6, 10]  -> 3 x 5 patches (top 1, left 0)
  full   [2, 16, 12, 12] -> 6 x 6 patches, the whole table
output_<name> is diffusers' output [2, 16, H, W]; output_bf16_<name> that of the model and inputs cast to bf16
(diffusers does not round SD3's timestep to bf16: the sinusoid is computed from the f32 timestep).

LoRA / DoRA cases (medium only): PEFT LoraConfig(r=4, lora_alpha=8, lora_dropout=0, use_dora=False/True) on every
Linear inside transformer_blocks (full module names: attn.to_q/k/v/to_out.0, add_q/k/v_proj, to_add_out, attn2.*,
ff.*, ff_context.*, norm1.linear, norm1_context.linear: 47 Linears, 31 SAI modules). The lora_A of the layers SAI fuses (q, k, v of
attn, attn2 and the context) share one random matrix (std 0.3), so PEFT's separate adapters equal one adapter on the
fused SAI layer; every lora_B is random (std 0.3), DoRA magnitudes are PEFT's initial row norms times
(1 + 0.1 N(0, 1)). Loss = mean((output - target)^2) on the square latents, target random [2, 16, 8, 8]. The scale
alpha / r = 2 is NOT baked into any stored tensor. sai.<module>.lora_up and .magnitude are in SAI's row order (the last
block's norm1_context halves swapped into context_block.adaLN_modulation.1's (shift, scale)).

Measured (this script's last run; errors are max|a - b| / max|b|): printed at the end of the run and recorded in
tests/data/sd3/README.md.
"""
import argparse
import copy
import json
import math
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
from diffusers import SD3Transformer2DModel
from diffusers.loaders import SD3LoraLoaderMixin
from diffusers.loaders.single_file_utils import convert_sd3_transformer_checkpoint_to_diffusers
from peft import LoraConfig

from reference_common import data_dir, print_total_size
from reference_torch import (adapted_modules, captured_warnings, deterministic_torch, generator_metadata,
                             lora_key_warnings, peft_layer, reconcile_lora_keys, rel_err, save_peft_lora,
                             save_sharded_diffusers, write_f32)

OUT_DIR = data_dir("sd3")

HIDDEN, HEADS, HEAD_DIM, LATENT_C, PATCH, POS_MAX = 32, 4, 8, 16, 2, 6
CONTEXT_DIM, POOLED_DIM, TXT_LEN, BATCH = 32, 64, 7, 2
RANK, ALPHA = 4, 8.0
SIGMAS = (0.27, 0.81)
LATENTS = {"square": (8, 8), "wide": (6, 10), "full": (12, 12)}
VARIANTS = {  # name: (num_layers, dual_attention_layers, qk_norm, seed)
    "medium": (3, (0, 1), "rms_norm", 1000),
    "large": (2, (), "rms_norm", 2000),
    "sd3": (2, (), None, 3000),
}
SAI_COMMIT = "fbf8f48"


def model_kwargs(num_layers, dual, qk_norm, hidden=HIDDEN, heads=HEADS, head_dim=HEAD_DIM, pos_max=POS_MAX):
    return dict(sample_size=2 * pos_max, patch_size=PATCH, in_channels=LATENT_C, out_channels=LATENT_C,
                num_layers=num_layers, attention_head_dim=head_dim, num_attention_heads=heads,
                joint_attention_dim=CONTEXT_DIM, caption_projection_dim=hidden, pooled_projection_dim=POOLED_DIM,
                pos_embed_max_size=pos_max, dual_attention_layers=tuple(dual), qk_norm=qk_norm)


# ---------------------------------------------------------------------------------------------------------------
# Name tables: SAI module <- diffusers module(s). One table drives the weight converter and the LoRA converter.
# ---------------------------------------------------------------------------------------------------------------

def linear_groups(num_layers, dual):
    """(SAI Linear path, [diffusers Linear paths concatenated by rows], swap halves) for every Linear inside the
    blocks: the modules the LoRA cases adapt."""
    groups = []
    for i in range(num_layers):
        d, b = f"transformer_blocks.{i}", f"joint_blocks.{i}"
        last = i == num_layers - 1
        groups += [
            (f"{b}.x_block.adaLN_modulation.1", [f"{d}.norm1.linear"], False),
            (f"{b}.x_block.attn.qkv", [f"{d}.attn.to_q", f"{d}.attn.to_k", f"{d}.attn.to_v"], False),
            (f"{b}.x_block.attn.proj", [f"{d}.attn.to_out.0"], False),
            (f"{b}.x_block.mlp.fc1", [f"{d}.ff.net.0.proj"], False),
            (f"{b}.x_block.mlp.fc2", [f"{d}.ff.net.2"], False),
            (f"{b}.context_block.adaLN_modulation.1", [f"{d}.norm1_context.linear"], last),
            (f"{b}.context_block.attn.qkv", [f"{d}.attn.add_q_proj", f"{d}.attn.add_k_proj", f"{d}.attn.add_v_proj"],
             False),
        ]
        if i in dual:
            groups += [
                (f"{b}.x_block.attn2.qkv", [f"{d}.attn2.to_q", f"{d}.attn2.to_k", f"{d}.attn2.to_v"], False),
                (f"{b}.x_block.attn2.proj", [f"{d}.attn2.to_out.0"], False),
            ]
        if not last:
            groups += [
                (f"{b}.context_block.attn.proj", [f"{d}.attn.to_add_out"], False),
                (f"{b}.context_block.mlp.fc1", [f"{d}.ff_context.net.0.proj"], False),
                (f"{b}.context_block.mlp.fc2", [f"{d}.ff_context.net.2"], False),
            ]
    return groups


OUTER_LINEARS = [  # (SAI, diffusers) outside the blocks; final_layer.adaLN_modulation.1 is handled apart
    ("t_embedder.mlp.0", "time_text_embed.timestep_embedder.linear_1"),
    ("t_embedder.mlp.2", "time_text_embed.timestep_embedder.linear_2"),
    ("y_embedder.mlp.0", "time_text_embed.text_embedder.linear_1"),
    ("y_embedder.mlp.2", "time_text_embed.text_embedder.linear_2"),
    ("context_embedder", "context_embedder"),
    ("final_layer.linear", "proj_out"),
    ("x_embedder.proj", "pos_embed.proj"),
]


def norm_pairs(num_layers, dual):
    """(SAI RMSNorm weight key, diffusers RMSNorm weight key)."""
    pairs = []
    for i in range(num_layers):
        d, b = f"transformer_blocks.{i}", f"joint_blocks.{i}"
        pairs += [(f"{b}.x_block.attn.ln_q.weight", f"{d}.attn.norm_q.weight"),
                  (f"{b}.x_block.attn.ln_k.weight", f"{d}.attn.norm_k.weight"),
                  (f"{b}.context_block.attn.ln_q.weight", f"{d}.attn.norm_added_q.weight"),
                  (f"{b}.context_block.attn.ln_k.weight", f"{d}.attn.norm_added_k.weight")]
        if i in dual:
            pairs += [(f"{b}.x_block.attn2.ln_q.weight", f"{d}.attn2.norm_q.weight"),
                      (f"{b}.x_block.attn2.ln_k.weight", f"{d}.attn2.norm_k.weight")]
    return pairs


def swap_halves(t):
    """(a | b) -> (b | a) along rows: diffusers (scale, shift) <-> SAI (shift, scale)."""
    first, second = t.chunk(2, dim=0)
    return torch.cat([second, first], dim=0).contiguous()


def diffusers_to_sai(sd, num_layers, dual, qk_norm):
    """Our own diffusers -> SAI converter for SD3 (sizes read from the tensors, so it works on tiny models)."""
    out, used = {}, set()

    def take(key):
        assert key not in used, f"{key} used twice"
        used.add(key)
        return sd[key]

    for sai, parts, swap in linear_groups(num_layers, dual):
        for suffix in ("weight", "bias"):
            t = torch.cat([take(f"{p}.{suffix}") for p in parts], dim=0)
            out[f"{sai}.{suffix}"] = swap_halves(t) if swap else t.contiguous()
    for sai, dif in OUTER_LINEARS:
        for suffix in ("weight", "bias"):
            out[f"{sai}.{suffix}"] = take(f"{dif}.{suffix}").contiguous()
    if qk_norm:
        for sai, dif in norm_pairs(num_layers, dual):
            out[sai] = take(dif).contiguous()
    for suffix in ("weight", "bias"):
        out[f"final_layer.adaLN_modulation.1.{suffix}"] = swap_halves(take(f"norm_out.linear.{suffix}"))
    out["pos_embed"] = take("pos_embed.pos_embed").contiguous()
    unused = sorted(set(sd) - used)
    assert not unused, f"diffusers keys not converted: {unused}"
    return out


# ---------------------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------------------

def base_metadata():
    return generator_metadata(__file__, diffusers, peft)


def build_model(kwargs, seed):
    torch.manual_seed(seed)
    model = SD3Transformer2DModel(**kwargs)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif p.ndim == 1:  # RMSNorm scales
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                fan_in = p[0].numel()
                p.copy_(0.2 * (32.0 / fan_in) ** 0.5 * torch.randn(p.shape, generator=gen))
        table = model.pos_embed.pos_embed
        table.copy_(0.5 * torch.randn(table.shape, generator=gen))
    return model.eval()


def make_inputs(seed):
    gen = torch.Generator().manual_seed(seed)
    inputs = {
        "context": torch.randn((BATCH, TXT_LEN, CONTEXT_DIM), generator=gen),
        "pooled": torch.randn((BATCH, POOLED_DIM), generator=gen),
        "sigma": torch.tensor(SIGMAS, dtype=torch.float32),
    }
    inputs["timestep"] = inputs["sigma"] * 1000  # f32, as wick computes it
    for name, (h, w) in LATENTS.items():
        inputs[f"latents_{name}"] = torch.randn((BATCH, LATENT_C, h, w), generator=gen)
    return inputs


def diffusers_forward(model, inputs, latents, dtype=torch.float32):
    return model(hidden_states=latents.to(dtype), encoder_hidden_states=inputs["context"].to(dtype),
                 pooled_projections=inputs["pooled"].to(dtype), timestep=inputs["timestep"],
                 return_dict=False)[0]


# ---------------------------------------------------------------------------------------------------------------
# 1-3: base models, SAI / diffusers weights, forward cases
# ---------------------------------------------------------------------------------------------------------------

def make_base(name):
    num_layers, dual, qk_norm, seed = VARIANTS[name]
    print(f"{name}:")
    kwargs = model_kwargs(num_layers, dual, qk_norm)
    model = build_model(kwargs, seed)
    inputs = make_inputs(seed + 100)
    case = dict(inputs)
    bf16_model = copy.deepcopy(model).to(torch.bfloat16)
    errors = []
    with torch.no_grad():
        for lat in LATENTS:
            out = diffusers_forward(model, inputs, inputs[f"latents_{lat}"])
            out_bf16 = diffusers_forward(bf16_model, inputs, inputs[f"latents_{lat}"], torch.bfloat16).float()
            case[f"output_{lat}"] = out
            case[f"output_bf16_{lat}"] = out_bf16
            errors.append(f"{lat} max |.| {out.abs().max().item():.3f}, bf16 vs f32 {rel_err(out_bf16, out):.2e}")
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    sai = diffusers_to_sai(sd, num_layers, dual, qk_norm)
    meta = base_metadata()
    meta["model"] = json.dumps({k: list(v) if isinstance(v, tuple) else v for k, v in kwargs.items()}, sort_keys=True)
    write_f32(sai, os.path.join(OUT_DIR, f"{name}_sai.safetensors"), meta)
    write_f32(case, os.path.join(OUT_DIR, f"{name}_case.safetensors"), base_metadata())
    print("  " + "; ".join(errors))
    # diffusers' own SAI -> diffusers converter must give back exactly the diffusers tensors.
    back = convert_sd3_transformer_checkpoint_to_diffusers({k: v.clone() for k, v in sai.items()})
    assert sorted(back) == sorted(sd), (sorted(set(back) ^ set(sd)))
    for k in sd:
        assert torch.equal(back[k], sd[k]), k
    print(f"  diffusers' convert_sd3_transformer_checkpoint_to_diffusers({name}_sai) == the diffusers state dict "
          f"({len(sd)} tensors, bitwise)")
    return model, inputs, case, sai


# ---------------------------------------------------------------------------------------------------------------
# 4-6: LoRA / DoRA cases, PEFT and kohya files
# ---------------------------------------------------------------------------------------------------------------

def target_modules(num_layers, dual):
    return [m for _, parts, _ in linear_groups(num_layers, dual) for m in parts]


def make_lora_case(base_model, inputs, use_dora, seed):
    num_layers, dual, _, _ = VARIANTS["medium"]
    kind = "dora" if use_dora else "lora"
    print(f"medium_{kind}:")
    model = copy.deepcopy(base_model)
    targets = target_modules(num_layers, dual)
    model.add_adapter(LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, use_dora=use_dora,
                                 target_modules=targets, init_lora_weights=True))
    assert adapted_modules(model) == sorted(targets), "PEFT adapted other modules than the targets"
    gen = torch.Generator().manual_seed(seed)
    groups = linear_groups(num_layers, dual)
    with torch.no_grad():
        for _, parts, _ in groups:
            shared_a = 0.3 * torch.randn(peft_layer(model, parts[0]).lora_A["default"].weight.shape, generator=gen)
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
    model.train()  # no dropout anywhere; train mode disables PEFT's DoRA cache
    latents = inputs["latents_square"]
    target = torch.randn(latents.shape, generator=gen)
    out = diffusers_forward(model, inputs, latents)
    loss = F.mse_loss(out, target)
    loss.backward()

    case = {k: v for k, v in inputs.items()}
    case["target"] = target
    case["loss"] = loss.detach().reshape(())
    case["output"] = out.detach()
    case["alpha"] = torch.tensor(ALPHA, dtype=torch.float32)
    case["rank"] = torch.tensor(RANK, dtype=torch.int64)
    kohya = {}
    for sai, parts, swap in groups:
        layers = [peft_layer(model, p) for p in parts]
        a = [l.lora_A["default"].weight for l in layers]
        b = [l.lora_B["default"].weight for l in layers]
        for x in a[1:]:
            assert torch.equal(x, a[0])
        rows = (lambda t: swap_halves(t)) if swap else (lambda t: t)
        case[f"sai.{sai}.lora_down"] = a[0].detach()
        case[f"sai.{sai}.lora_up"] = rows(torch.cat([x.detach() for x in b], 0))
        case[f"grad.sai.{sai}.lora_down"] = torch.stack([x.grad for x in a]).sum(0)
        case[f"grad.sai.{sai}.lora_up"] = rows(torch.cat([x.grad for x in b], 0))
        if use_dora:
            m = [l.lora_magnitude_vector["default"].weight for l in layers]
            case[f"sai.{sai}.magnitude"] = rows(torch.cat([x.detach() for x in m], 0))
            case[f"grad.sai.{sai}.magnitude"] = rows(torch.cat([x.grad for x in m], 0))
        for p, layer in zip(parts, layers):
            case[f"peft.{p}.lora_A"] = layer.lora_A["default"].weight.detach()
            case[f"peft.{p}.lora_B"] = layer.lora_B["default"].weight.detach()
            # PEFT's own gradients (not stored: the fused sai.* gradients above are their sums and rows)
            assert layer.lora_A["default"].weight.grad is not None and layer.lora_B["default"].weight.grad is not None
            if use_dora:
                case[f"peft.{p}.lora_magnitude_vector"] = layer.lora_magnitude_vector["default"].weight.detach()
        stem = "lora_unet_" + sai.replace(".", "_")
        kohya[f"{stem}.lora_down.weight"] = case[f"sai.{sai}.lora_down"]
        kohya[f"{stem}.lora_up.weight"] = case[f"sai.{sai}.lora_up"]
        kohya[f"{stem}.alpha"] = torch.tensor(ALPHA, dtype=torch.float32)
    # The pre-only block's context query is computed and discarded (its attention rows are dropped), so the
    # adapter of add_q_proj in the last block gets exactly zero gradient, in PEFT and in any implementation: the
    # first third of the fused context qkv's lora_up gradient is zero there.
    for k, v in case.items():
        assert v is not None, f"{k}: no gradient"
        if k.startswith("grad."):
            assert float(v.abs().max()) > 0, f"{k}: zero gradient"
    last_qkv = case[f"grad.sai.joint_blocks.{num_layers - 1}.context_block.attn.qkv.lora_up"]
    assert float(last_qkv[:HIDDEN].abs().max()) == 0 and float(last_qkv[HIDDEN:].abs().max()) > 0
    meta = base_metadata()
    meta["lora"] = json.dumps({"r": RANK, "lora_alpha": ALPHA, "use_dora": use_dora, "scale_baked_in": False},
                              sort_keys=True)
    write_f32(case, os.path.join(OUT_DIR, f"medium_{kind}_case.safetensors"), meta)
    with torch.no_grad():
        base_out = diffusers_forward(base_model, inputs, latents)
    print(f"  {len(groups)} SAI modules, {len(targets)} diffusers Linears; loss {loss.item():.6f}, output max |.| "
          f"{out.abs().max().item():.4f}, change vs base {rel_err(out, base_out):.3f}")
    return model, case, kohya


def check_peft_file(base_model, path, inputs, expected, label):
    """diffusers' SD3 LoRA path (lora_state_dict + load_lora_into_transformer, what StableDiffusion3Pipeline's
    load_lora_weights does) on a fresh copy: zero missing / unexpected keys, the PEFT case's output."""
    model = copy.deepcopy(base_model)
    with captured_warnings() as messages:
        state_dict, metadata = SD3LoraLoaderMixin.lora_state_dict(path, return_lora_metadata=True)
        file_keys = dict(state_dict)
        SD3LoraLoaderMixin.load_lora_into_transformer(state_dict, transformer=model, metadata=metadata,
                                                      adapter_name="check")
    _, missing, unexpected = reconcile_lora_keys(file_keys, model, "check")
    warned = lora_key_warnings(messages)
    with torch.no_grad():
        out = diffusers_forward(model.eval(), inputs, inputs["latents_square"])
    err = rel_err(out, expected)
    print(f"  {label}: diffusers load: {len(missing)} missing, {len(unexpected)} unexpected LoRA keys, "
          f"{len(warned)} warnings; output vs PEFT case max rel err {err:.3e}")
    assert not missing and not unexpected and not warned, (missing, unexpected, warned)
    assert err <= 1e-6, err
    return err


# ---------------------------------------------------------------------------------------------------------------
# 7: independent checks against Stability AI's code
# ---------------------------------------------------------------------------------------------------------------

def sai_model(mmditx, num_layers, dual, qk_norm, hidden=HIDDEN, heads=HEADS):
    """SAI's MMDiTX with the fixture's sizes. MMDiTX ties hidden = 64 * depth and heads = depth; its sized modules
    are rebuilt here with SAI's own classes (PatchEmbed, TimestepEmbedder, VectorEmbedder, JointBlock, FinalLayer),
    so the forward, the blocks and the names are SAI's."""
    qk = "rms" if qk_norm else None
    torch.manual_seed(0)
    model = mmditx.MMDiTX(input_size=None, patch_size=PATCH, in_channels=LATENT_C, depth=num_layers,
                          adm_in_channels=POOLED_DIM, pos_embed_max_size=POS_MAX, num_patches=POS_MAX * POS_MAX,
                          context_embedder_config={"target": "torch.nn.Linear",
                                                   "params": {"in_features": CONTEXT_DIM,
                                                              "out_features": 64 * num_layers}},
                          qk_norm=qk, x_block_self_attn_layers=list(dual))
    model.x_embedder = mmditx.PatchEmbed(None, PATCH, LATENT_C, hidden, strict_img_size=False)
    model.t_embedder = mmditx.TimestepEmbedder(hidden)
    model.y_embedder = mmditx.VectorEmbedder(POOLED_DIM, hidden)
    model.context_embedder = torch.nn.Linear(CONTEXT_DIM, hidden)
    model.register_buffer("pos_embed", torch.zeros(1, POS_MAX * POS_MAX, hidden))
    model.joint_blocks = torch.nn.ModuleList([
        mmditx.JointBlock(hidden, heads, mlp_ratio=4.0, qkv_bias=True, pre_only=i == num_layers - 1, rmsnorm=False,
                          scale_mod_only=False, swiglu=False, qk_norm=qk, x_block_self_attn=i in dual)
        for i in range(num_layers)])
    model.final_layer = mmditx.FinalLayer(hidden, PATCH, LATENT_C)
    model.num_heads = heads
    return model.eval()


def sai_check(sai_src, bases, lora_case, kohya):
    if not sai_src or not os.path.isfile(os.path.join(sai_src, "mmditx.py")):
        print(f"NOTICE: SAI source not found (--sai-src {sai_src!r}); skipping the checks against SAI's code")
        return None
    sys.path.insert(0, sai_src)
    import mmditx  # noqa: E402  (Stability AI's reference implementation)
    import sd3_impls  # noqa: E402
    import sd3_infer  # noqa: E402
    from safetensors import safe_open  # noqa: E402

    results = {}
    for name, (model, inputs, case, sai) in bases.items():
        num_layers, dual, qk_norm, _ = VARIANTS[name]
        m = sai_model(mmditx, num_layers, dual, qk_norm)
        m.load_state_dict(load_file(os.path.join(OUT_DIR, f"{name}_sai.safetensors")), strict=True)
        worst = 0.0
        with torch.no_grad():
            for lat in LATENTS:
                out = m(inputs[f"latents_{lat}"], inputs["timestep"], y=inputs["pooled"], context=inputs["context"])
                worst = max(worst, rel_err(out, case[f"output_{lat}"]))
        results[name] = worst
        print(f"  SAI MMDiTX ({SAI_COMMIT}, fixture sizes) strict-loading {name}_sai vs diffusers, 3 latents: "
              f"max rel err {worst:.3e}")
        assert worst <= 1e-5, worst
        if name == "medium":
            merged = load_file(os.path.join(OUT_DIR, "medium_sai.safetensors"))
            n = 0
            for key in kohya:
                if not key.endswith(".lora_down.weight"):
                    continue
                stem = key[: -len(".lora_down.weight")]
                wkey = next(k for k in merged if k.endswith(".weight")
                            and "lora_unet_" + k[: -len(".weight")].replace(".", "_") == stem)
                down, up = kohya[f"{stem}.lora_down.weight"], kohya[f"{stem}.lora_up.weight"]
                merged[wkey] = merged[wkey] + (float(kohya[f"{stem}.alpha"]) / down.shape[0]) * (up @ down)
                n += 1
            m.load_state_dict(merged, strict=True)
            with torch.no_grad():
                out = m(inputs["latents_square"], inputs["timestep"], y=inputs["pooled"], context=inputs["context"])
            err = rel_err(out, lora_case["output"])
            results["kohya_merged"] = err
            print(f"  SAI MMDiTX + merged medium_lora_kohya ({n} modules) vs PEFT LoRA output: max rel err {err:.3e}")
            assert err <= 1e-5, err

    # SAI's own loader (sd3_impls.BaseModel reads every size from the file; sd3_infer.load_into fills it) on a
    # temporary single file with SAI's sizes (hidden 64 * depth, heads = depth) under "model.diffusion_model.",
    # beside a VAE key, as sd3.5_medium.safetensors is laid out.
    kwargs = model_kwargs(2, (0,), "rms_norm", hidden=128, heads=2, head_dim=64, pos_max=8)
    model = build_model(kwargs, 5000)
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    sai = diffusers_to_sai(sd, 2, (0,), "rms_norm")
    tmp = tempfile.mkdtemp()
    try:
        path = os.path.join(tmp, "sd3.5_tiny.safetensors")
        packed = {"model.diffusion_model." + k: v for k, v in sai.items()}
        packed["first_stage_model.decoder.conv_in.weight"] = torch.zeros(1)
        save_file(packed, path)
        with safe_open(path, framework="pt", device="cpu") as f:
            base = sd3_impls.BaseModel(shift=3.0, file=f, prefix="model.diffusion_model.", dtype=torch.float32)
            sd3_infer.load_into(f, base, "model.", "cpu", torch.float32)
        loaded = base.diffusion_model.state_dict()
        assert sorted(loaded) == sorted(sai), sorted(set(loaded) ^ set(sai))
        for k in sai:
            assert torch.equal(loaded[k], sai[k]), k
        inputs = make_inputs(5100)
        latents = torch.randn((BATCH, LATENT_C, 10, 14), generator=torch.Generator().manual_seed(5200))
        with torch.no_grad():
            ref = diffusers_forward(model, inputs, latents)
            out = base.diffusion_model(latents, inputs["timestep"], y=inputs["pooled"], context=inputs["context"])
        err = rel_err(out, ref)
        results["sai_loader"] = err
        print(f"  SAI's BaseModel + load_into on a converted SAI-sized file (2 blocks, 128 wide, attn2 in block 0, "
              f"QK norm; latent 10x14 in a table of 8x8) vs diffusers: max rel err {err:.3e}")
        assert err <= 1e-5, err
    finally:
        shutil.rmtree(tmp)
    return results


# ---------------------------------------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sai-src", default=None, help="Stability AI's sd3.5 repository (git archive fbf8f48)")
    args = parser.parse_args()
    deterministic_torch()
    os.makedirs(OUT_DIR, exist_ok=True)
    print(f"torch {torch.__version__}, diffusers {diffusers.__version__}, peft {peft.__version__}, "
          f"transformers {transformers.__version__}, safetensors {safetensors.__version__}, numpy {np.__version__}")

    bases = {name: make_base(name) for name in VARIANTS}
    medium, medium_inputs, _, _ = bases["medium"]
    print("medium_diffusers:")
    save_sharded_diffusers(medium, os.path.join(OUT_DIR, "medium_diffusers"), "250KB")

    lora_model, lora_case, kohya = make_lora_case(medium, medium_inputs, use_dora=False, seed=6000)
    save_peft_lora(lora_model, os.path.join(OUT_DIR, "medium_lora_peft.safetensors"), SD3LoraLoaderMixin)
    check_peft_file(medium, os.path.join(OUT_DIR, "medium_lora_peft.safetensors"), medium_inputs,
                    lora_case["output"], "medium_lora_peft")
    kohya_meta = {"ss_network_module": "networks.lora_sd3", "ss_network_dim": str(RANK),
                  "ss_network_alpha": str(ALPHA), "ss_base_model_version": "sd3",
                  "generator": "tests/reference/make_sd3_fixtures.py"}
    write_f32(kohya, os.path.join(OUT_DIR, "medium_lora_kohya.safetensors"), kohya_meta)

    dora_model, dora_case, _ = make_lora_case(medium, medium_inputs, use_dora=True, seed=7000)
    tmp = tempfile.mkdtemp()
    try:  # not committed: diffusers reloads a PEFT DoRA export (lora_magnitude_vector keys)
        dora_path = os.path.join(tmp, "dora.safetensors")
        save_peft_lora(dora_model, dora_path, SD3LoraLoaderMixin)
        check_peft_file(medium, dora_path, medium_inputs, dora_case["output"], "medium_dora_peft (temporary)")
    finally:
        shutil.rmtree(tmp)

    print("checks against SAI's code:")
    sai_check(args.sai_src, bases, lora_case, kohya)

    print_total_size(OUT_DIR)


if __name__ == "__main__":
    main()
