#!/usr/bin/env python3
"""Generates tests/data/flux2_vae/: a tiny random FLUX.2 VAE (diffusers' AutoencoderKLFlux2: FLUX.1's AutoencoderKL
topology with quant_conv / post_quant_conv and a BatchNorm2d(4 z, eps 1e-4, affine=False) whose running statistics
normalize the 2x2-patchified posterior mean) in both weight layouts, and what diffusers' Flux2Pipeline computes with
it: the normalized latents of images (_encode_vae_image) and the images of given normalized latents (the decode at the
end of __call__). See tests/data/flux2_vae/README.md for every file and tensor.

Made with (pip, CPU only): torch 2.15.0, diffusers 0.42.1, safetensors, numpy, einops 0.8.2 (for BFL's code),
Python 3.11; Black Forest Labs' flux2 repository at commit ab7cca6 (src/flux2/autoencoder.py). Run from the
repository root:
    git --git-dir=<mirror of black-forest-labs/flux2> archive ab7cca6 src | tar -x -C /tmp/bfl_flux2
    /tmp/refvenv/bin/python tests/reference/make_flux2_vae_fixtures.py --bfl-src /tmp/bfl_flux2/src
(or FLUX2_BFL_SRC=/tmp/bfl_flux2/src). Without it the checks against BFL's code are skipped with a notice; the files
written are the same. Everything runs on the CPU, one thread, torch.use_deterministic_algorithms(True); every random
tensor comes from a seeded torch.Generator, so a rerun rewrites byte-identical files.

Committed model: AutoencoderKLFlux2(block_out_channels=(8, 8, 16, 16), layers_per_block=1, latent_channels=4,
norm_num_groups=4, sample_size=64): the real structure (4 levels, x8 then the 2x2 patch: x16, 1 ResBlock per encoder
level and 2 per decoder level, mid attention, both quant convs, BatchNorm over 16 = 4 z channels) at a quarter of the
width of MODELS2.md D3's tiny config, so that both layouts stay small (D3's 1,028,935 parameters would be 2 MB per
layout in bfloat16). Its group count is 4 (config.json says so; BFL's single file does not: wick's loader is given it).
After construction every parameter is redrawn: conv / linear weights N(0, 1/fan_in), biases N(0, 0.1^2), GroupNorm
weights 1 + 0.1 N(0, 1) and biases 0.1 N(0, 1); the BatchNorm's running_mean 0.5 N(0, 1), running_var exp(N(0, 1))
(so the per-channel deviations range over about 0.2 to 4), num_batches_tracked 1000. Every floating tensor is rounded
to bfloat16 and both files are bfloat16 (num_batches_tracked int64); the references are float32 computed from those
values.

Files:
  vae/config.json, vae/diffusion_pytorch_model.safetensors   diffusers' layout (save_pretrained; _diffusers_version
                                                             dropped, keys sorted; from_pretrained loads it with
                                                             nothing missing or unexpected)
  flux2-vae.safetensors                                      BFL's layout (FLUX.2-dev's ae.safetensors; ComfyUI's
                                                             flux2-vae.safetensors has the same names, no prefix),
                                                             made by this script's own converter (bfl_from_diffusers)
  cases.safetensors                                          the inputs and outputs below
Converter (diffusers -> BFL, MODELS2.md B5): quant_conv -> encoder.quant_conv, post_quant_conv ->
decoder.post_quant_conv, {encoder,decoder}.conv_norm_out -> norm_out, encoder.down_blocks.i.resnets.j ->
encoder.down.i.block.j, downsamplers.0.conv -> downsample.conv, decoder.up_blocks.i -> decoder.up.(n-1-i) (reversed),
upsamplers.0.conv -> upsample.conv, mid_block.resnets.0 / 1 -> mid.block_1 / block_2, mid_block.attentions.0.
{group_norm, to_q, to_k, to_v, to_out.0} -> mid.attn_1.{norm, q, k, v, proj_out} (Linear [C, C] -> 1x1 conv
[C, C, 1, 1]), conv_shortcut -> nin_shortcut, bn.{running_mean, running_var, num_batches_tracked} kept.

Independent checks, both run here with --bfl-src: (1) BFL's AutoEncoder loads the committed flux2-vae.safetensors
strict (its GroupNorm(32) is hard-coded: torch.nn.GroupNorm is replaced by one with the committed model's 4 groups
while BFL's model is built), and its encode() / decode() equal the pipeline's normalized latents / decoded images;
(2) the same for an uncommitted model of exactly D3's tiny config (BFL AutoEncoderParams(resolution=64, ch=32,
ch_mult=[1, 1, 2, 2], num_res_blocks=1, z_channels=4) <-> AutoencoderKLFlux2(block_out_channels=(32, 32, 64, 64),
layers_per_block=1, latent_channels=4, norm_num_groups=32, sample_size=64), 1,028,935 parameters), BFL's code
unchanged. The errors (max |a - b| / max |b|) are printed.

Cases (cases.safetensors, float32): image [2, 3, 32, 48] in [-1, 1] (non-square; a smooth pattern plus noise,
float16 values); mean, logvar [2, 4, 4, 6] (vae.encode(image).latent_dist: the posterior mean, i.e. mode(), and the
logvar clamped to [-30, 20]); patchified_mean, patchified_logvar [2, 16, 2, 3] (Flux2Pipeline._patchify_latents:
channel c * 4 + pi * 2 + pj, pi the row offset); bn_mean, bn_std [16] (bn.running_mean and sqrt(bn.running_var +
batch_norm_eps), in float32 as the pipeline computes them); latents [2, 16, 2, 3] = (patchified_mean - bn_mean) /
bn_std, what _encode_vae_image returns; decode_latents [2, 16, 2, 3] N(0, 1), normalized latents to decode; decoded
[2, 3, 32, 48] = vae.decode(_unpatchify_latents(decode_latents * bn_std + bn_mean)) (unclamped, before the image
processor's (x + 1) / 2 and clamp).
"""
import argparse
import importlib.util
import json
import os
import shutil
import sys

import numpy as np
import torch
from safetensors.torch import load_file

import diffusers
from diffusers import AutoencoderKLFlux2, Flux2Pipeline

from reference_common import data_dir, print_total_size, sort_metadata
from reference_torch import deterministic_torch, rel_err, save_sorted

OUT_DIR = data_dir("flux2_vae")
N_LEVELS = 4
COMMITTED = dict(block_out_channels=(8, 8, 16, 16), layers_per_block=1, latent_channels=4, norm_num_groups=4,
                 sample_size=64)
# MODELS2.md D3, not committed: checked against BFL's code as it is (GroupNorm(32)).
D3 = dict(block_out_channels=(32, 32, 64, 64), layers_per_block=1, latent_channels=4, norm_num_groups=32,
          sample_size=64)
IMAGE_SHAPE = (2, 3, 32, 48)


def make_model(cfg):
    return AutoencoderKLFlux2(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * N_LEVELS,
                              up_block_types=("UpDecoderBlock2D",) * N_LEVELS, **cfg).eval()


def redraw(model, seed):
    """Random weights and BatchNorm statistics, every floating value rounded to bfloat16."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if "norm" in name:
                noise = torch.randn(p.shape, generator=gen) * 0.1
                v = 1 + noise if name.endswith("weight") else noise
            elif name.endswith("bias"):
                v = torch.randn(p.shape, generator=gen) * 0.1
            else:
                v = torch.randn(p.shape, generator=gen) / p[0].numel() ** 0.5
            p.copy_(v.bfloat16().float())
        n = model.bn.running_mean.numel()
        model.bn.running_mean.copy_((0.5 * torch.randn(n, generator=gen)).bfloat16().float())
        model.bn.running_var.copy_(torch.randn(n, generator=gen).exp().bfloat16().float())
        model.bn.num_batches_tracked.fill_(1000)


def bfl_from_diffusers(state, n_levels):
    """This script's own converter: diffusers AutoencoderKLFlux2 names -> BFL's (src/flux2/autoencoder.py)."""
    def resnet(name):
        return name.replace("conv_shortcut", "nin_shortcut")

    def mid(name):
        name = name.replace("mid_block.resnets.0.", "mid.block_1.").replace("mid_block.resnets.1.", "mid.block_2.")
        for a, b in (("group_norm", "norm"), ("to_q", "q"), ("to_k", "k"), ("to_v", "v"), ("to_out.0", "proj_out")):
            name = name.replace(f"mid_block.attentions.0.{a}.", f"mid.attn_1.{b}.")
        return name

    out = {}
    for name, t in state.items():
        parts = name.split(".")
        if parts[0] == "quant_conv":
            new = "encoder." + name
        elif parts[0] == "post_quant_conv":
            new = "decoder." + name
        elif parts[0] == "bn":
            new = name
        elif parts[1] == "down_blocks":
            if parts[3] == "resnets":
                new = resnet(f"encoder.down.{parts[2]}.block.{'.'.join(parts[4:])}")
            else:  # downsamplers.0.conv.*
                new = f"encoder.down.{parts[2]}.downsample.{'.'.join(parts[5:])}"
        elif parts[1] == "up_blocks":
            i = n_levels - 1 - int(parts[2])
            if parts[3] == "resnets":
                new = resnet(f"decoder.up.{i}.block.{'.'.join(parts[4:])}")
            else:  # upsamplers.0.conv.*
                new = f"decoder.up.{i}.upsample.{'.'.join(parts[5:])}"
        elif parts[1] == "mid_block":
            new = resnet(mid(name))
            if ".attn_1." in new and new.endswith("weight") and ".norm." not in new:
                t = t.reshape(*t.shape, 1, 1)
        else:  # conv_in, conv_out, conv_norm_out
            new = name.replace("conv_norm_out", "norm_out")
        assert new not in out, new
        out[new] = t.contiguous()
    assert len(out) == len(state)
    return out


def make_image(shape, seed):
    gen = torch.Generator().manual_seed(seed)
    b, c, h, w = shape
    yy = torch.arange(h, dtype=torch.float64).view(1, 1, h, 1) / h
    xx = torch.arange(w, dtype=torch.float64).view(1, 1, 1, w) / w
    ch = torch.arange(c, dtype=torch.float64).view(1, c, 1, 1)
    bb = torch.arange(b, dtype=torch.float64).view(b, 1, 1, 1)
    smooth = 0.8 * torch.sin(2 * np.pi * (xx * (1 + ch) + 0.7 * yy) + ch + 0.5 * bb) * torch.cos(3 * yy + bb)
    noise = 0.05 * torch.randn(shape, generator=gen, dtype=torch.float64)
    return (smooth + noise).clamp(-1, 1).float().half().float()


def bn_stats(vae):
    """The pipeline's normalization constants ([1, 4 z, 1, 1] each), float32."""
    mean = vae.bn.running_mean.view(1, -1, 1, 1)
    std = torch.sqrt(vae.bn.running_var.view(1, -1, 1, 1) + vae.config.batch_norm_eps)
    return mean, std


def run_pipeline_steps(vae, image, decode_latents):
    """What Flux2Pipeline computes: _encode_vae_image (argmax = the mean, patchify, BatchNorm) and the decode of
    normalized latents at the end of __call__."""
    bn_mean, bn_std = bn_stats(vae)
    with torch.no_grad():
        dist = vae.encode(image).latent_dist
        mean = dist.mode()
        patchified_mean = Flux2Pipeline._patchify_latents(mean)
        latents = (patchified_mean - bn_mean) / bn_std
        z = Flux2Pipeline._unpatchify_latents(decode_latents * bn_std + bn_mean)
        decoded = vae.decode(z, return_dict=False)[0]
    return {"mean": mean, "logvar": dist.logvar, "patchified_mean": patchified_mean,
            "patchified_logvar": Flux2Pipeline._patchify_latents(dist.logvar), "latents": latents,
            "decoded": decoded, "bn_mean": bn_mean.flatten(), "bn_std": bn_std.flatten()}


def write_diffusers(model):
    folder = os.path.join(OUT_DIR, "vae")
    shutil.rmtree(folder, ignore_errors=True)  # README.md stays; every other file is rewritten
    model.to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)
    model.float()
    sort_metadata(os.path.join(folder, "diffusion_pytorch_model.safetensors"))
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        config = json.load(f)
    config.pop("_diffusers_version", None)  # keep the file independent of the exact version
    with open(path, "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    return folder


def load_bfl_module(bfl_src):
    """BFL's src/flux2/autoencoder.py imported by path (the package's __init__ would pull in the text encoders)."""
    path = os.path.join(bfl_src, "flux2", "autoencoder.py")
    spec = importlib.util.spec_from_file_location("bfl_flux2_autoencoder", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bfl_model(bfl, cfg, groups):
    """BFL's AutoEncoder for a diffusers config; GroupNorms built with `groups` groups where BFL hard-codes 32."""
    boc = cfg["block_out_channels"]
    params = bfl.AutoEncoderParams(resolution=cfg["sample_size"], in_channels=3, ch=boc[0], out_ch=3,
                                   ch_mult=[c // boc[0] for c in boc], num_res_blocks=cfg["layers_per_block"],
                                   z_channels=cfg["latent_channels"])
    group_norm = torch.nn.GroupNorm
    if groups != 32:
        torch.nn.GroupNorm = lambda num_groups, num_channels, eps, affine: group_norm(groups, num_channels, eps, affine)
    try:
        return bfl.AutoEncoder(params).eval()
    finally:
        torch.nn.GroupNorm = group_norm


def check_bfl(bfl, name, cfg, bfl_state, reference, image, decode_latents):
    """BFL's AutoEncoder loads `bfl_state` strict; encode() / decode() against the pipeline's results."""
    model = bfl_model(bfl, cfg, cfg["norm_num_groups"])
    result = model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in bfl_state.items()},
                                   strict=True)
    assert not result.missing_keys and not result.unexpected_keys, result
    with torch.no_grad():
        errors = {"encode() vs the pipeline's latents": rel_err(model.encode(image), reference["latents"]),
                  "decode() vs the pipeline's decoded": rel_err(model.decode(decode_latents), reference["decoded"]),
                  "encoder moments (mean half) vs diffusers' mean": rel_err(model.encoder(image).chunk(2, dim=1)[0],
                                                                            reference["mean"])}
    for what, e in errors.items():
        print(f"  BFL AutoEncoder, {name}: {what}: {e:.2e}")
        assert e < 1e-5, what


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bfl-src", default=os.environ.get("FLUX2_BFL_SRC", ""))
    args = parser.parse_args()
    deterministic_torch()
    print(f"torch {torch.__version__}, diffusers {diffusers.__version__}")
    os.makedirs(OUT_DIR, exist_ok=True)

    torch.manual_seed(0)
    model = make_model(COMMITTED)
    redraw(model, 2025)
    folder = write_diffusers(model)
    state = load_file(os.path.join(folder, "diffusion_pytorch_model.safetensors"))
    n_params = sum(t.numel() for k, t in state.items() if not k.endswith("num_batches_tracked"))
    print(f"committed model: {n_params} values in {len(state)} tensors (num_batches_tracked included)")
    loaded, info = AutoencoderKLFlux2.from_pretrained(folder, torch_dtype=torch.float32, output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    loaded.eval()

    bfl_state = bfl_from_diffusers(state, N_LEVELS)
    bfl_path = os.path.join(OUT_DIR, "flux2-vae.safetensors")
    save_sorted(bfl_state, bfl_path, {"format": "pt"})

    image = make_image(IMAGE_SHAPE, 11)
    decode_latents = torch.randn((2, 16, 2, 3), generator=torch.Generator().manual_seed(12))
    cases = run_pipeline_steps(loaded, image, decode_latents)
    again = run_pipeline_steps(model, image, decode_latents)  # the in-memory model: the same bits
    assert all(torch.equal(cases[k], again[k]) for k in cases)
    decoded = cases["decoded"]
    print(f"  latents max {float(cases['latents'].abs().max()):.3f}, bn_std range [{float(cases['bn_std'].min()):.3f}, "
          f"{float(cases['bn_std'].max()):.3f}], decoded range [{float(decoded.min()):.2f}, "
          f"{float(decoded.max()):.2f}], {float((decoded.abs() < 1).float().mean()):.1%} inside (-1, 1)")

    if args.bfl_src and os.path.isdir(args.bfl_src):
        bfl = load_bfl_module(args.bfl_src)
        check_bfl(bfl, "committed model (4 groups)", COMMITTED, load_file(bfl_path), cases, image, decode_latents)
        torch.manual_seed(1)
        d3 = make_model(D3)
        redraw(d3, 2026)
        d3_state = {k: v.bfloat16() if v.is_floating_point() else v for k, v in d3.state_dict().items()}
        n_d3 = sum(t.numel() for k, t in d3_state.items() if not k.endswith("num_batches_tracked"))
        print(f"D3 model (not committed): {n_d3} values")
        check_bfl(bfl, "D3 tiny config (32 groups, BFL's code as it is)", D3, bfl_from_diffusers(d3_state, N_LEVELS),
                  run_pipeline_steps(d3, image, decode_latents), image, decode_latents)
    else:
        print("  BFL checks skipped: no --bfl-src / FLUX2_BFL_SRC (see the docstring)")

    cases.update(image=image, decode_latents=decode_latents)
    save_sorted({k: v.float() for k, v in cases.items()}, os.path.join(OUT_DIR, "cases.safetensors"),
                {"format": "pt"})
    print_total_size(OUT_DIR)


if __name__ == "__main__":
    sys.exit(main())
