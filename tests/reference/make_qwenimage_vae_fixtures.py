#!/usr/bin/env python3
"""Generates tests/data/qwenimage_vae/: a tiny random diffusers AutoencoderKLQwenImage (the Qwen-Image VAE, derived
from Wan 2.1's causal 3-D VAE) in both weight layouts, and what diffusers computes for single images (T = 1).

Made with (pip, CPU only): torch 2.15.0, diffusers 0.42.1, safetensors, numpy, Python 3.11. Run from the repository root:
    /tmp/refvenv/bin/python tests/reference/make_qwenimage_vae_fixtures.py
Everything runs on the CPU, one thread, torch.use_deterministic_algorithms(True); every random tensor comes from a
seeded torch.Generator, so a rerun rewrites byte-identical files.

Model: AutoencoderKLQwenImage(base_dim=3, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2, attn_scales=[],
temperal_downsample=[False, True, True]): the real structure (4 levels, 2 residual blocks per encoder level, 3 per
decoder level, time_conv in the encoder's last two and the decoder's first two resamples, the decoder's channel
halving in the upsampler convs and its shortcut in up_blocks.1.resnets.0), 3 / 6 / 12 / 12 channels (the real one:
96 / 192 / 384 / 384) so that both files stay small, and the real 16 latent channels with Qwen-Image's latents_mean /
latents_std. 141,901 parameters.
After construction every parameter is redrawn: conv weights N(0, 1 / (in · kh · kw)) (per temporal tap: for one frame
only the last tap of a causal conv is used), biases N(0, 0.1^2), RMS_norm gammas 1 + 0.2 N(0, 1) (away from 1, so a
wrong norm shows). Every parameter is rounded to float16 and both weight files are float16; the references are
float32 computed from those values.

Files:
  vae/config.json, vae/diffusion_pytorch_model.safetensors   diffusers' layout (a pipeline's vae/ folder; from_pretrained
                                                             loads it with nothing missing or unexpected)
  qwen_image_vae.safetensors                                 the original Wan 2.1 layout, as ComfyUI ships it
                                                             (encoder.conv1, encoder.downsamples.N.residual.M,
                                                             decoder.upsamples.N, middle.{0,1,2}, head.{0,2}, conv1 /
                                                             conv2 for quant_conv / post_quant_conv), made by this
                                                             script's own converter (wan_from_diffusers)
  cases.safetensors                                          inputs and outputs below
Independent check, run here: diffusers' own convert_wan_vae_to_diffusers (the from_single_file path) maps the Wan file
back to exactly the diffusers state dict (same names, same values), which a fresh model loads strict.

Cases (float32): image [2, 3, 40, 56] in [-1, 1] (non-square; a smooth pattern plus noise, float16 values); mean,
logvar [2, 16, 5, 7] (encode(image[:, :, None]).latent_dist, T squeezed; logvar clamped to [-30, 20]); normalized
[2, 16, 5, 7] = (mean - latents_mean) / latents_std; latents [2, 16, 5, 7] N(0, 1) (normalized latents to decode);
decoded [2, 3, 40, 56] = decode(latents · latents_std + latents_mean) (post_quant_conv, decoder, clamped to [-1, 1]);
latents_mean, latents_std [16]. f64.{mean, logvar, normalized, decoded} (float64): the same outputs from the model cast to
float64 (image and latents as float64; the upsampling in float64 too, where diffusers rounds through
float32): diffusers' own float32 results differ from these by up to 3e-6 (mean, logvar)
and 3e-5 (decoded) with these random weights, so float32 parity is bounded by that and exactness is checked in float64.
"""
import json
import os
import shutil
import sys

import numpy as np
import torch
from safetensors.torch import load_file, save_file

import diffusers
from diffusers import AutoencoderKLQwenImage
from diffusers.loaders.single_file_utils import convert_wan_vae_to_diffusers
from diffusers.models.autoencoders import autoencoder_kl_qwenimage as qwenimage_module

from reference_common import data_dir, print_total_size, sort_metadata
from reference_torch import deterministic_torch

OUT_DIR = data_dir("qwenimage_vae")
CONFIG = dict(base_dim=3, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2, attn_scales=[],
              temperal_downsample=[False, True, True])
IMAGE_SHAPE = (2, 3, 40, 56)
# The original layout's names of a residual block's layers (nn.Sequential indices) <- diffusers'.
RESIDUAL = {"norm1.gamma": "residual.0.gamma", "conv1.": "residual.2.", "norm2.gamma": "residual.3.gamma",
            "conv2.": "residual.6.", "conv_shortcut.": "shortcut."}


def redraw(model, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("gamma"):
                v = 1 + 0.2 * torch.randn(p.shape, generator=gen)
            elif name.endswith("bias"):
                v = 0.1 * torch.randn(p.shape, generator=gen)
            else:  # conv weights [out, in, (kt,) kh, kw]
                fan_in = p.shape[1] * p.shape[-1] * p.shape[-2]
                v = torch.randn(p.shape, generator=gen) / fan_in ** 0.5
            p.copy_(v.half().float())


def residual_names(rest):
    for a, b in RESIDUAL.items():
        if rest.startswith(a):
            return b + rest[len(a):]
    raise ValueError(rest)


def wan_from_diffusers(state, n_decoder_resnets):
    """This script's own converter: diffusers AutoencoderKLQwenImage names -> the original Wan 2.1 names."""
    out = {}
    stride = n_decoder_resnets + 1  # decoder.upsamples is flat: the level's residual blocks, then its resample
    for name, t in state.items():
        parts = name.split(".")
        if name.startswith("quant_conv."):
            new = "conv1." + parts[-1]
        elif name.startswith("post_quant_conv."):
            new = "conv2." + parts[-1]
        elif parts[1] == "conv_in":
            new = f"{parts[0]}.conv1.{parts[-1]}"
        elif parts[1] == "norm_out":
            new = f"{parts[0]}.head.0.gamma"
        elif parts[1] == "conv_out":
            new = f"{parts[0]}.head.2.{parts[-1]}"
        elif parts[1] == "mid_block":
            kind, i, rest = parts[2], int(parts[3]), ".".join(parts[4:])
            if kind == "attentions":
                new = f"{parts[0]}.middle.1.{rest}"
            else:
                new = f"{parts[0]}.middle.{2 * i}.{residual_names(rest)}"
        elif parts[1] == "down_blocks":
            rest = ".".join(parts[3:])
            if parts[3] not in ("resample", "time_conv"):
                rest = residual_names(rest)
            new = f"encoder.downsamples.{parts[2]}.{rest}"
        elif parts[1] == "up_blocks":
            level = int(parts[2])
            if parts[3] == "resnets":
                new = f"decoder.upsamples.{level * stride + int(parts[4])}.{residual_names('.'.join(parts[5:]))}"
            else:  # upsamplers.0.{resample.1, time_conv}
                new = f"decoder.upsamples.{level * stride + n_decoder_resnets}.{'.'.join(parts[5:])}"
        else:
            raise ValueError(name)
        assert new not in out, new
        out[new] = t
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


def run(model, image, latents):
    mean_c = torch.tensor(model.config.latents_mean).view(1, -1, 1, 1)
    std_c = torch.tensor(model.config.latents_std).view(1, -1, 1, 1)
    with torch.no_grad():
        dist = model.encode(image[:, :, None]).latent_dist
        mean, logvar = dist.mean[:, :, 0], dist.logvar[:, :, 0]
        decoded = model.decode((latents * std_c + mean_c)[:, :, None]).sample[:, :, 0]
    return {"mean": mean, "logvar": logvar, "normalized": (mean - mean_c) / std_c, "decoded": decoded}


def save(tensors, path):
    save_file({k: v.contiguous() for k, v in sorted(tensors.items())}, path, metadata={"format": "pt"})
    sort_metadata(path)


def main():
    deterministic_torch()
    print(f"torch {torch.__version__}, diffusers {diffusers.__version__}")
    folder = os.path.join(OUT_DIR, "vae")
    shutil.rmtree(folder, ignore_errors=True)  # README.md stays; every other file is rewritten
    os.makedirs(folder)

    torch.manual_seed(0)
    model = AutoencoderKLQwenImage(**CONFIG).eval()
    redraw(model, 2024)
    state = {k: v.half() for k, v in model.state_dict().items()}
    print(f"{sum(t.numel() for t in state.values())} parameters, {len(state)} tensors")
    save(state, os.path.join(folder, "diffusion_pytorch_model.safetensors"))
    model.save_config(folder)
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    config.pop("_diffusers_version", None)  # keep the file independent of the exact version
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")

    loaded, info = AutoencoderKLQwenImage.from_pretrained(folder, torch_dtype=torch.float32, output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    loaded.eval()

    wan = wan_from_diffusers(state, CONFIG["num_res_blocks"] + 1)
    wan_path = os.path.join(OUT_DIR, "qwen_image_vae.safetensors")
    save(wan, wan_path)
    back = convert_wan_vae_to_diffusers(load_file(wan_path))
    assert sorted(back) == sorted(state), (set(back) ^ set(state))
    assert all(torch.equal(back[k], state[k]) for k in state)
    fresh = AutoencoderKLQwenImage(**CONFIG).eval()
    result = fresh.load_state_dict({k: v.float() for k, v in back.items()}, strict=True)
    assert not result.missing_keys and not result.unexpected_keys, result
    print("  diffusers convert_wan_vae_to_diffusers of the Wan file: the diffusers state dict exactly, strict load")

    image = make_image(IMAGE_SHAPE, 11)
    latents = torch.randn((2, 16, 5, 7), generator=torch.Generator().manual_seed(12))
    cases = run(loaded, image, latents)
    again = run(fresh, image, latents)
    assert all(torch.equal(cases[k], again[k]) for k in cases)
    # The same model in float64: the exact answer to within 1e-12, against which float32 rounding is measured.
    # diffusers' QwenImageUpsample rounds its input through float32 (a no-op for 32- and 16-bit models); for the
    # float64 reference it upsamples in float64.
    upsample = qwenimage_module.QwenImageUpsample.forward
    qwenimage_module.QwenImageUpsample.forward = torch.nn.Upsample.forward
    f64 = run(AutoencoderKLQwenImage.from_pretrained(folder, torch_dtype=torch.float64).eval(), image.double(),
              latents.double())
    qwenimage_module.QwenImageUpsample.forward = upsample
    for k in f64:
        print(f"  diffusers float32 vs float64 {k}: max abs {float((cases[k].double() - f64[k]).abs().max()):.2e}")
    decoded = cases["decoded"]
    print(f"  mean max {float(cases['mean'].abs().max()):.3f}, logvar range [{float(cases['logvar'].min()):.2f}, "
          f"{float(cases['logvar'].max()):.2f}], decoded: {float((decoded.abs() == 1).float().mean()):.1%} clamped")
    assert float((decoded.abs() == 1).float().mean()) > 0.01, "decode clamp not exercised"
    cases.update(image=image, latents=latents, latents_mean=torch.tensor(loaded.config.latents_mean),
                 latents_std=torch.tensor(loaded.config.latents_std))
    cases = {k: v.float() for k, v in cases.items()}
    cases.update({f"f64.{k}": v for k, v in f64.items()})
    save(cases, os.path.join(OUT_DIR, "cases.safetensors"))
    print_total_size(OUT_DIR)


if __name__ == "__main__":
    sys.exit(main())
