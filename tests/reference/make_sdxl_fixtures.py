#!/usr/bin/env python3
"""Generates tests/data/sdxl/: a tiny random SDXL-like UNet (three levels, the first without attention, like SDXL) in
the LDM/sgm layout of sd_xl_base_1.0.safetensors and as a diffusers unet/ folder, its outputs computed by diffusers'
UNet2DConditionModel(addition_embed_type="text_time") (f32 and bf16), LoRA and DoRA forward+backward cases computed
with PEFT (LoRA on every Linear of the spatial transformers plus kohya's LoCon set: the resnets' 3x3 convs, their
time_emb_proj and 1x1 conv_shortcut, the down- and upsampler convs), the LoRA as a kohya file with the keys diffusers
converts it to, and independent checks: Stability AI's own sgm UNetModel strict-loading the LDM file, diffusers' own
LDM -> diffusers converter, and diffusers' load_lora_weights path on the kohya file. See tests/data/sdxl/README.md.

Made with (pip, CPU only): torch 2.15.0, diffusers 0.42.1, peft 0.21.2, safetensors 0.8.0, numpy 2.4.6, einops 0.8.2
(for sgm's code), Python 3; Stability AI's generative-models at commit 0ad7de9. Run from the repository root:
    git --git-dir=/work/.mirror/Stability-AI+generative-models/repo archive 0ad7de9 sgm | tar -x -C /tmp/sgm
    /tmp/venv/bin/python tests/reference/make_sdxl_fixtures.py --sgm-src /tmp/sgm
Without --sgm-src the checks against sgm's code are skipped with a notice; the files written are the same. Everything
runs in float32 on the CPU, one thread, torch.use_deterministic_algorithms(True); every random tensor comes from a
seeded torch.Generator, so a rerun rewrites byte-identical files.

Model. UNet2DConditionModel(sample_size=16, in_channels=4, out_channels=4, layers_per_block=2,
block_out_channels=(8, 16, 16), down_block_types=(DownBlock2D, CrossAttnDownBlock2D, CrossAttnDownBlock2D),
up_block_types=(CrossAttnUpBlock2D, CrossAttnUpBlock2D, UpBlock2D), attention_head_dim=(1, 2, 2) (diffusers' name for
the head COUNT: heads of 8 features), transformer_layers_per_block=(1, 1, 2) (so the middle block has 2, and the up
path's reversal is exercised), use_linear_projection=True, cross_attention_dim=32, addition_embed_type="text_time",
addition_time_embed_dim=8, projection_class_embeddings_input_dim=64 (pooled 16 + 6 x 8), norm_num_groups=4).
In sgm's terms: model_channels 8, channel_mult (1, 2, 2), num_res_blocks 2, attention_resolutions (4, 2),
num_head_channels 8, transformer_depth (1, 1, 2), context_dim 32, adm_in_channels 64, use_linear_in_transformer.
Every parameter is redrawn after construction (weights N(0, (0.7 / sqrt(fan_in))^2), biases N(0, 0.1^2), norm scales
1 + 0.1 N(0, 1), norm shifts N(0, 0.1^2)) and rounded to bf16, so that the diffusers folder, stored in bf16, holds
exactly the LDM file's f32 values. sgm hard-codes 32 GroupNorm groups; the check below builds sgm's UNet with 4 (its
normalization() and attention.Normalize() replaced by 4-group versions, nothing else changed).

Inputs (case): batch 2, context [2, 7, 32], pooled [2, 16], time_ids [[1024, 768, 0, 0, 128, 128],
[640, 896, 32, 16, 64, 96]] (original h, w, crop top, left, target h, w), timesteps (261, 999); latents square
[2, 4, 16, 16] and wide [2, 4, 8, 12]. Outputs: diffusers' f32 output_<latents>, and output_bf16_<latents> of the model
and inputs cast to bf16.

LoRA / DoRA cases (square latents, random target, loss = mean squared error): see make_lora_case. PEFT LoraConfig(r=4,
lora_alpha=8) with rank_pattern / alpha_pattern giving the 3x3 convs r=2, alpha 1 (kohya's conv_dim / conv_alpha);
lora_A N(0, (0.5 / sqrt(fan_in))^2), lora_B N(0, 0.15^2) (the update about half the base weight: larger ones make the
tiny network amplify f32 rounding past 1e-5), DoRA magnitudes PEFT's initial row norms times (1 + 0.1 N(0, 1)). The
scale alpha / r is NOT baked into any stored tensor. Keys ldm.<LDM module>.lora_down / lora_up (/ magnitude) and grad.ldm.<...>.
"""
import argparse
import copy
import json
import os
import re
import shutil
import sys
import tempfile
import types

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

import diffusers
import peft
import safetensors
from diffusers import UNet2DConditionModel
from diffusers.loaders import StableDiffusionXLLoraLoaderMixin
from diffusers.loaders.single_file_utils import convert_ldm_unet_checkpoint
from diffusers.utils.state_dict_utils import convert_unet_state_dict_to_peft
from peft import LoraConfig

from reference_common import REPO, data_dir, print_total_size, sort_metadata
from reference_torch import (adapted_modules, captured_warnings, deterministic_torch, generator_metadata,
                             peft_layer, rel_err, write_f32)

OUT_DIR = data_dir("sdxl")
SGM_COMMIT = "0ad7de9"

CHANNELS, DEPTH, HEAD_DIM, GROUPS, RES = (8, 16, 16), (1, 1, 2), 8, 4, 2
ATTENTION = (False, True, True)  # levels with spatial transformers
CONTEXT_DIM, POOLED_DIM, TIME_DIM, LATENT_C, TXT_LEN, BATCH = 32, 16, 8, 4, 7, 2
TIMESTEPS = (261.0, 999.0)
TIME_IDS = ((1024, 768, 0, 0, 128, 128), (640, 896, 32, 16, 64, 96))
LATENTS = {"square": (16, 16), "wide": (8, 12)}
RANK, ALPHA, CONV_RANK, CONV_ALPHA = 4, 8.0, 2, 1.0
SEED = 1000


def unet_kwargs():
    return dict(sample_size=16, in_channels=LATENT_C, out_channels=LATENT_C, layers_per_block=RES,
                block_out_channels=CHANNELS,
                down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
                up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
                attention_head_dim=tuple(c // HEAD_DIM for c in CHANNELS), transformer_layers_per_block=DEPTH,
                use_linear_projection=True, cross_attention_dim=CONTEXT_DIM, addition_embed_type="text_time",
                addition_time_embed_dim=TIME_DIM, projection_class_embeddings_input_dim=POOLED_DIM + 6 * TIME_DIM,
                norm_num_groups=GROUPS)


# ---------------------------------------------------------------------------------------------------------------
# LDM (sgm) <-> diffusers names: one prefix table from the index arithmetic, used for weights and LoRA modules.
# ---------------------------------------------------------------------------------------------------------------

RESNET_RENAMES = [("in_layers.0", "norm1"), ("in_layers.2", "conv1"), ("emb_layers.1", "time_emb_proj"),
                  ("out_layers.0", "norm2"), ("out_layers.3", "conv2"), ("skip_connection", "conv_shortcut")]


def module_table(levels=len(CHANNELS), res=RES, attention=ATTENTION):
    """[(LDM prefix, diffusers prefix, kind)] for every block; kind: resnet | attention | conv."""
    t = [("input_blocks.0.0", "conv_in", "conv"), ("time_embed.0", "time_embedding.linear_1", "conv"),
         ("time_embed.2", "time_embedding.linear_2", "conv"), ("label_emb.0.0", "add_embedding.linear_1", "conv"),
         ("label_emb.0.2", "add_embedding.linear_2", "conv"), ("out.0", "conv_norm_out", "conv"),
         ("out.2", "conv_out", "conv")]
    for level in range(levels):
        for j in range(res):
            i = 1 + level * (res + 1) + j
            t.append((f"input_blocks.{i}.0", f"down_blocks.{level}.resnets.{j}", "resnet"))
            if attention[level]:
                t.append((f"input_blocks.{i}.1", f"down_blocks.{level}.attentions.{j}", "attention"))
        if level < levels - 1:
            i = 1 + level * (res + 1) + res
            t.append((f"input_blocks.{i}.0.op", f"down_blocks.{level}.downsamplers.0.conv", "conv"))
    t += [("middle_block.0", "mid_block.resnets.0", "resnet"), ("middle_block.1", "mid_block.attentions.0", "attention"),
          ("middle_block.2", "mid_block.resnets.1", "resnet")]
    for up in range(levels):
        level = levels - 1 - up
        for j in range(res + 1):
            o = up * (res + 1) + j
            t.append((f"output_blocks.{o}.0", f"up_blocks.{up}.resnets.{j}", "resnet"))
            if attention[level]:
                t.append((f"output_blocks.{o}.1", f"up_blocks.{up}.attentions.{j}", "attention"))
            if level > 0 and j == res:  # the upsampler's slot follows the attention when the level has one
                t.append((f"output_blocks.{o}.{2 if attention[level] else 1}.conv", f"up_blocks.{up}.upsamplers.0.conv",
                          "conv"))
    return t


def diffusers_to_ldm_name(name, table):
    for ldm, dif, kind in table:
        if name == dif or name.startswith(dif + "."):
            rest = name[len(dif):]
            if kind == "resnet":
                for a, b in RESNET_RENAMES:
                    if rest == "." + b or rest.startswith("." + b + "."):
                        rest = "." + a + rest[len(b) + 1:]
                        break
                else:
                    raise KeyError(name)
            return ldm + rest
    raise KeyError(name)


def diffusers_to_ldm(sd, table):
    out = {}
    for k, v in sd.items():
        out[diffusers_to_ldm_name(k, table)] = v.contiguous()
    assert len(out) == len(sd)
    return out


# ---------------------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------------------

def base_metadata():
    return generator_metadata(__file__, diffusers, peft)


def build_model():
    torch.manual_seed(SEED)
    model = UNet2DConditionModel(**unet_kwargs())
    gen = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            norm = ".norm" in name or "conv_norm_out" in name
            if name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif norm:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                fan_in = p[0].numel()
                p.copy_(0.7 / fan_in ** 0.5 * torch.randn(p.shape, generator=gen))
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    return model.eval()


def make_inputs():
    gen = torch.Generator().manual_seed(SEED + 100)
    inputs = {"context": torch.randn((BATCH, TXT_LEN, CONTEXT_DIM), generator=gen),
              "pooled": torch.randn((BATCH, POOLED_DIM), generator=gen),
              "timesteps": torch.tensor(TIMESTEPS, dtype=torch.float32),
              "time_ids": torch.tensor(TIME_IDS, dtype=torch.float32)}
    for name, (h, w) in LATENTS.items():
        inputs[f"latents_{name}"] = torch.randn((BATCH, LATENT_C, h, w), generator=gen)
    return inputs


def diffusers_forward(model, inputs, latents, dtype=torch.float32):
    return model(latents.to(dtype), inputs["timesteps"], encoder_hidden_states=inputs["context"].to(dtype),
                 added_cond_kwargs={"text_embeds": inputs["pooled"].to(dtype), "time_ids": inputs["time_ids"]},
                 return_dict=False)[0]


# ---------------------------------------------------------------------------------------------------------------
# Base model, LDM file, diffusers folder, forward cases
# ---------------------------------------------------------------------------------------------------------------

def make_base():
    print("base:")
    model = build_model()
    inputs = make_inputs()
    case = dict(inputs)
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    with torch.no_grad():
        for lat in LATENTS:
            out = diffusers_forward(model, inputs, inputs[f"latents_{lat}"])
            out_bf16 = diffusers_forward(bf16, inputs, inputs[f"latents_{lat}"], torch.bfloat16).float()
            case[f"output_{lat}"] = out
            case[f"output_bf16_{lat}"] = out_bf16
            print(f"  {lat}: max |out| {out.abs().max().item():.3f}, diffusers bf16 vs f32 {rel_err(out_bf16, out):.2e}")
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    table = module_table()
    ldm = diffusers_to_ldm(sd, table)
    # The single file as sd_xl_base_1.0.safetensors lays it out: the UNet under model.diffusion_model., the VAE and
    # both text encoders beside it (one small stand-in tensor each; a loader must ignore them).
    packed = {"model.diffusion_model." + k: v for k, v in ldm.items()}
    packed["first_stage_model.decoder.conv_in.weight"] = torch.zeros(2, 2, 3, 3)
    packed["conditioner.embedders.0.transformer.text_model.final_layer_norm.weight"] = torch.ones(4)
    packed["conditioner.embedders.1.model.ln_final.weight"] = torch.ones(4)
    meta = base_metadata()
    meta["model"] = json.dumps({k: list(v) if isinstance(v, tuple) else v for k, v in unet_kwargs().items()},
                               sort_keys=True)
    write_f32(packed, os.path.join(OUT_DIR, "tiny_ldm.safetensors"), meta)
    write_f32(case, os.path.join(OUT_DIR, "case.safetensors"), base_metadata())
    # diffusers' own LDM -> diffusers converter must give back exactly the diffusers tensors.
    back = convert_ldm_unet_checkpoint({k: v.clone() for k, v in packed.items()}, dict(model.config))
    assert sorted(back) == sorted(sd), sorted(set(back) ^ set(sd))
    for k in sd:
        assert torch.equal(back[k], sd[k]), k
    print(f"  diffusers' convert_ldm_unet_checkpoint(tiny_ldm) == the diffusers state dict ({len(sd)} tensors, "
          f"bitwise)")
    folder = os.path.join(OUT_DIR, "tiny_diffusers")
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            sort_metadata(os.path.join(folder, f))
        print(f"  wrote {os.path.relpath(os.path.join(folder, f), REPO)}: "
              f"{os.path.getsize(os.path.join(folder, f))} bytes (bf16: the same values)")
    reloaded = UNet2DConditionModel.from_pretrained(folder, torch_dtype=torch.float32)
    for k, v in reloaded.state_dict().items():
        assert torch.equal(v, sd[k]), k
    return model, inputs, case, ldm, table


# ---------------------------------------------------------------------------------------------------------------
# LoRA / DoRA cases
# ---------------------------------------------------------------------------------------------------------------

def lora_targets(model, table):
    """(diffusers module, LDM module, is a 3x3 conv) of kohya's SDXL targets with conv_dim: every Linear of the
    spatial transformers (proj_in, attn1/attn2 q/k/v/out, ff.net.0.proj, ff.net.2), and in the resnets and the
    samplers every Linear and Conv2d (3x3 convs at the conv rank; time_emb_proj and the 1x1 conv_shortcut at the
    linear rank)."""
    out = []
    for name, m in model.named_modules():
        if not isinstance(m, (torch.nn.Linear, torch.nn.Conv2d)):
            continue
        in_attention = ".attentions." in name
        in_resnet = ".resnets." in name or "samplers." in name
        if not (in_attention or in_resnet):
            continue
        conv3 = isinstance(m, torch.nn.Conv2d) and m.kernel_size != (1, 1)
        out.append((name, diffusers_to_ldm_name(name + ".weight", table)[:-len(".weight")], conv3))
    return out


def make_lora_case(base, inputs, table, use_dora, seed):
    kind = "dora" if use_dora else "lora"
    print(f"{kind}:")
    model = copy.deepcopy(base)
    targets = lora_targets(model, table)
    if use_dora:  # DoRA on the Linears of the transformers only (wick's DoRA wraps Linear layers)
        targets = [t for t in targets if isinstance(model.get_submodule(t[0]), torch.nn.Linear)
                   and ".attentions." in t[0]]
    names = [t[0] for t in targets]
    conv_names = [t[0] for t in targets if t[2]]
    config = LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, use_dora=use_dora, target_modules=names,
                        init_lora_weights=True, rank_pattern={n: CONV_RANK for n in conv_names},
                        alpha_pattern={n: CONV_ALPHA for n in conv_names})
    model.add_adapter(config)
    assert adapted_modules(model) == sorted(names), "PEFT adapted other modules than the targets"
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, _, conv3 in targets:
            layer = peft_layer(model, name)
            a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
            assert a.shape[0] == (CONV_RANK if conv3 else RANK), (name, a.shape)
            a.copy_(0.5 / a[0].numel() ** 0.5 * torch.randn(a.shape, generator=gen))
            b.copy_(0.15 * torch.randn(b.shape, generator=gen))
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

    case = dict(inputs)
    case.update({"target": target, "loss": loss.detach().reshape(()), "output": out.detach(),
                 "alpha": torch.tensor(ALPHA), "rank": torch.tensor(RANK, dtype=torch.int64),
                 "conv_alpha": torch.tensor(CONV_ALPHA), "conv_rank": torch.tensor(CONV_RANK, dtype=torch.int64)})
    kohya = {}
    for name, ldm, conv3 in targets:
        layer = peft_layer(model, name)
        a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
        assert a.grad is not None and b.grad is not None and float(b.grad.abs().max()) > 0, name
        case[f"ldm.{ldm}.lora_down"] = a.detach()
        case[f"ldm.{ldm}.lora_up"] = b.detach()
        case[f"grad.ldm.{ldm}.lora_down"] = a.grad
        case[f"grad.ldm.{ldm}.lora_up"] = b.grad
        if use_dora:
            m = layer.lora_magnitude_vector["default"].weight
            case[f"ldm.{ldm}.magnitude"] = m.detach()
            case[f"grad.ldm.{ldm}.magnitude"] = m.grad
        stem = "lora_unet_" + ldm.replace(".", "_")
        kohya[f"{stem}.lora_down.weight"] = a.detach().clone()
        kohya[f"{stem}.lora_up.weight"] = b.detach().clone()
        kohya[f"{stem}.alpha"] = torch.tensor(CONV_ALPHA if conv3 else ALPHA, dtype=torch.float32)
    meta = base_metadata()
    meta["lora"] = json.dumps({"r": RANK, "lora_alpha": ALPHA, "conv_r": CONV_RANK, "conv_alpha": CONV_ALPHA,
                               "use_dora": use_dora, "scale_baked_in": False}, sort_keys=True)
    write_f32(case, os.path.join(OUT_DIR, f"{kind}_case.safetensors"), meta)
    n_conv = len(conv_names)
    print(f"  {len(targets)} modules ({n_conv} 3x3 convs at rank {CONV_RANK}); loss {loss.item():.6f}")
    return model, case, kohya


def diffusers_kohya_names(path, unet_config):
    """kohya key -> the PEFT parameter diffusers' SDXL LoRA loader puts it in (lora_state_dict:
    _maybe_map_sgm_blocks_to_diffusers, _convert_non_diffusers_lora_to_diffusers; then load_lora_into_unet's
    convert_unet_state_dict_to_peft), e.g. "down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q.lora_A.weight";
    found by tensor identity."""
    raw = load_file(path)
    by_id = {id(v): k for k, v in raw.items()}
    converted, alphas = StableDiffusionXLLoraLoaderMixin.lora_state_dict(dict(raw), unet_config=unet_config)
    unet_keys = {k[len("unet."):]: v for k, v in converted.items() if k.startswith("unet.")}
    assert len(unet_keys) == len(converted), "keys outside unet."
    names = {}
    for k, v in convert_unet_state_dict_to_peft(unet_keys).items():
        names[by_id[id(v)]] = k
    assert len(names) == sum(1 for k in raw if not k.endswith(".alpha")), "a kohya tensor was lost"
    return names, converted, alphas


def check_kohya_file(base, path, inputs, expected):
    """diffusers' SDXL path (lora_state_dict with the UNet's config + load_lora_into_unet, what
    StableDiffusionXLPipeline.load_lora_weights does) on a fresh copy: zero missing / unexpected keys, the PEFT case's
    output."""
    model = copy.deepcopy(base)
    with captured_warnings() as messages:
        names, state_dict, alphas = diffusers_kohya_names(path, model.config)
        StableDiffusionXLLoraLoaderMixin.load_lora_into_unet(state_dict, alphas, model, adapter_name="check")
    n_params = sum(1 for n, _ in model.named_parameters() if ".lora_" in n and ".check." in n)
    warned = [m for m in messages if "missing keys" in m or "unexpected keys" in m or "not" in m]
    with torch.no_grad():
        out = diffusers_forward(model.eval(), inputs, inputs["latents_square"])
    err = rel_err(out, expected)
    n_down = sum(1 for k in names if k.endswith(".lora_down.weight"))
    print(f"  diffusers load of the kohya file: {n_down} modules, {n_params} LoRA parameters, "
          f"{len(warned)} warnings; output vs the PEFT case max rel err {err:.3e}")
    assert n_params == 2 * n_down and not warned, (n_params, n_down, warned)
    assert err <= 1e-5, err
    return names, err


# ---------------------------------------------------------------------------------------------------------------
# Independent check against Stability AI's sgm code
# ---------------------------------------------------------------------------------------------------------------

def import_sgm(sgm_src):
    """sgm's UNet modules without running sgm/__init__.py (which imports the whole training stack)."""
    for name, path in (("sgm", "sgm"), ("sgm.modules", "sgm/modules"),
                       ("sgm.modules.diffusionmodules", "sgm/modules/diffusionmodules")):
        m = types.ModuleType(name)
        m.__path__ = [os.path.join(sgm_src, path)]
        sys.modules[name] = m
    import sgm.modules.attention as attention  # noqa: E402
    import sgm.modules.diffusionmodules.openaimodel as openaimodel  # noqa: E402
    import sgm.modules.diffusionmodules.util as util  # noqa: E402
    # The fixture's 4 GroupNorm groups (sgm hard-codes 32): the resnets' GroupNorm32 (f32) and the transformers'
    # Normalize (eps 1e-6) with 4 groups, nothing else changed.
    openaimodel.normalization = lambda channels: util.GroupNorm32(GROUPS, channels)
    attention.Normalize = lambda channels: torch.nn.GroupNorm(GROUPS, channels, eps=1e-6, affine=True)
    return openaimodel


def sgm_y(openaimodel, inputs):
    """sgm's vector conditioning: the pooled vector, then ConcatTimestepEmbedderND(outdim) of original size, crop and
    target size (its Timestep is openaimodel.Timestep; the rearrange '(b d) d2 -> b (d d2)' is a reshape)."""
    timestep = openaimodel.Timestep(TIME_DIM)
    parts = [inputs["pooled"]]
    for pair in range(3):
        x = inputs["time_ids"][:, 2 * pair:2 * pair + 2]
        parts.append(timestep(x.reshape(-1)).reshape(BATCH, 2 * TIME_DIM))
    return torch.cat(parts, dim=1)


def sgm_check(sgm_src, ldm, inputs, case, lora_case, kohya):
    if not sgm_src or not os.path.isfile(os.path.join(sgm_src, "sgm", "modules", "attention.py")):
        print(f"NOTICE: sgm source not found (--sgm-src {sgm_src!r}); skipping the checks against sgm's code")
        return None
    openaimodel = import_sgm(sgm_src)
    torch.manual_seed(0)
    unet = openaimodel.UNetModel(in_channels=LATENT_C, model_channels=CHANNELS[0], out_channels=LATENT_C,
                                 num_res_blocks=RES, attention_resolutions=[4, 2],
                                 channel_mult=[c // CHANNELS[0] for c in CHANNELS], num_head_channels=HEAD_DIM,
                                 transformer_depth=list(DEPTH), context_dim=CONTEXT_DIM,
                                 use_linear_in_transformer=True, adm_in_channels=POOLED_DIM + 6 * TIME_DIM,
                                 num_classes="sequential", spatial_transformer_attn_type="softmax",
                                 use_checkpoint=False).eval()
    unet.load_state_dict(ldm, strict=True)
    y = sgm_y(openaimodel, inputs)
    results = {}
    worst = 0.0
    with torch.no_grad():
        for lat in LATENTS:
            out = unet(inputs[f"latents_{lat}"], inputs["timesteps"], context=inputs["context"], y=y)
            worst = max(worst, rel_err(out, case[f"output_{lat}"]))
    results["sgm"] = worst
    print(f"  sgm UNetModel ({SGM_COMMIT}, 4 groups) strict-loading tiny_ldm vs diffusers, 2 latents: "
          f"max rel err {worst:.3e}")
    assert worst <= 1e-5, worst
    merged = {k: v.clone() for k, v in ldm.items()}
    n = 0
    for key in kohya:
        if not key.endswith(".lora_down.weight"):
            continue
        stem = key[: -len(".lora_down.weight")]
        wkey = next(k for k in merged if k.endswith(".weight")
                    and "lora_unet_" + k[: -len(".weight")].replace(".", "_") == stem)
        down, up = kohya[f"{stem}.lora_down.weight"], kohya[f"{stem}.lora_up.weight"]
        scale = float(kohya[f"{stem}.alpha"]) / down.shape[0]
        delta = (up.flatten(1) @ down.flatten(1)).reshape(merged[wkey].shape)
        merged[wkey] = merged[wkey] + scale * delta
        n += 1
    unet.load_state_dict(merged, strict=True)
    with torch.no_grad():
        out = unet(inputs["latents_square"], inputs["timesteps"], context=inputs["context"], y=y)
    err = rel_err(out, lora_case["output"])
    results["kohya_merged"] = err
    print(f"  sgm UNetModel + merged lora_kohya ({n} modules, 3x3 convs included) vs PEFT LoRA output: max rel err "
          f"{err:.3e}")
    assert err <= 1e-5, err
    return results


# ---------------------------------------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sgm-src", default=None, help="Stability AI's generative-models (git archive 0ad7de9 sgm)")
    args = parser.parse_args()
    deterministic_torch()
    os.makedirs(OUT_DIR, exist_ok=True)
    print(f"torch {torch.__version__}, diffusers {diffusers.__version__}, peft {peft.__version__}, "
          f"safetensors {safetensors.__version__}, numpy {np.__version__}")

    base, inputs, case, ldm, table = make_base()
    _, lora_case, kohya = make_lora_case(base, inputs, table, use_dora=False, seed=SEED + 2000)
    tmp = tempfile.mkdtemp()
    kohya_path = os.path.join(tmp, "lora_kohya.safetensors")  # not committed: the suite writes its own
    kohya_meta = {"ss_network_module": "networks.lora", "ss_network_dim": str(RANK), "ss_network_alpha": str(ALPHA),
                  "ss_network_args": json.dumps({"conv_dim": str(CONV_RANK), "conv_alpha": str(CONV_ALPHA)}),
                  "ss_base_model_version": "sdxl_base_v1-0", "generator": "tests/reference/make_sdxl_fixtures.py"}
    write_f32(kohya, kohya_path, kohya_meta)
    names, _ = check_kohya_file(base, kohya_path, inputs, lora_case["output"])
    shutil.rmtree(tmp)
    # The reference list: every kohya down / up key of the file -> the PEFT parameter diffusers loads it into (the
    # alphas go to network_alphas, as lora_alpha of the same modules).
    listing = {k: names[k] for k in sorted(names)}
    with open(os.path.join(OUT_DIR, "lora_kohya_diffusers_keys.json"), "w") as f:
        json.dump(listing, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"  wrote tests/data/sdxl/lora_kohya_diffusers_keys.json: {len(listing)} kohya keys -> diffusers keys")
    make_lora_case(base, inputs, table, use_dora=True, seed=SEED + 3000)

    print("checks against sgm's code:")
    sgm_check(args.sgm_src, ldm, inputs, case, lora_case, kohya)

    print_total_size(OUT_DIR)


if __name__ == "__main__":
    main()
