#!/usr/bin/env python3
"""Generates tests/data/vae/: two tiny random diffusers AutoencoderKL models (an SDXL-like one with 4 latent
channels and quant convs, a Flux/SD3-like one with 16 latent channels and none), each in diffusers' layout (a
pipeline's vae/ folder) and in LDM / BFL names made by this script's own converter, and what diffusers computes for
them: encode (mean, clamped logvar), decode of the mean, in float32 and bfloat16, and its own tiled encode / decode
error on a larger image. See tests/data/vae/README.md for every file and tensor.

Made with (pip, CPU only): torch 2.15.0, diffusers 0.42.1, safetensors 0.8.0, numpy 2.4.6, einops 0.8.2 (for BFL's
code), Python 3.11; Black Forest Labs' flux repository at commit 802fb47. Run from the repository root:
    /tmp/venv/bin/pip install torch diffusers safetensors numpy einops
    git --git-dir=<mirror of black-forest-labs/flux> archive 802fb47 src | tar -x -C /tmp/bfl_flux
    /tmp/venv/bin/python tests/reference/make_vae_fixtures.py --bfl-src /tmp/bfl_flux/src
Without --bfl-src (or when it does not exist) the check against BFL's code is skipped with a notice; the files
written are the same. Everything runs on the CPU, one thread, torch.use_deterministic_algorithms(True); every
random tensor comes from a seeded torch.Generator, so a rerun rewrites byte-identical files.

Models (diffusers AutoencoderKL, DownEncoderBlock2D / UpDecoderBlock2D, act silu, GroupNorm eps 1e-6):
  sdxl_tiny: block_out_channels (8, 16, 16) (3 levels, x4 downscale), layers_per_block 2 (2 ResBlocks per level in
             the encoder, 3 in the decoder, as the real VAE), latent_channels 4, norm_num_groups 4,
             use_quant_conv / use_post_quant_conv True, scaling_factor 0.13025 (SDXL's), no shift.
  flux_tiny: block_out_channels (8, 16) (2 levels, x2), layers_per_block 2, latent_channels 16, norm_num_groups 8
             (one channel per group on the first level), no quant convs, scaling 0.3611 / shift 0.1159 (Flux's).
The channel counts are below 32 to keep the committed files small (0.65 MB of weights for both models in both
namings); so the group counts are 4 and 8, not the real 32 (wick reads it from config.json; LDM files need it given).
After construction every parameter is redrawn: conv / linear weights N(0, 1/fan_in), biases N(0, 0.1^2), GroupNorm
weights 1 + 0.1 N(0, 1) and biases 0.1 N(0, 1); two logvar biases of the last conv before the split (quant_conv,
else the encoder's conv_out) are then set to +25 and -35 so that the logvar clamp to [-30, 20] is exercised (the mean
is unaffected). Every parameter is rounded to float16 and the files are float16; the references are float32 computed
from those values.

Files: {sdxl_tiny,flux_tiny}/vae/{config.json, diffusion_pytorch_model.safetensors} (save_config without
_diffusers_version, keys sorted; AutoencoderKL.from_pretrained loads them with nothing missing or unexpected),
sdxl_tiny_ldm.safetensors (LDM names under "first_stage_model." plus one UNet tensor beside them, as in SDXL and SD3.5
single files), flux_tiny_ae.safetensors (LDM / BFL names, no prefix, as Flux's ae.safetensors), cases.safetensors.

LDM / BFL names (this script's own converter, ldm_from_diffusers): encoder.down.i.block.j.{norm1, conv1, norm2,
conv2, nin_shortcut (diffusers conv_shortcut)}, encoder.down.i.downsample.conv (downsamplers.0.conv),
{encoder,decoder}.mid.block_1 / block_2 (mid_block.resnets.0 / 1), mid.attn_1.{norm, q, k, v, proj_out}
(mid_block.attentions.0.{group_norm, to_q, to_k, to_v, to_out.0}; the Linear weights [C, C] become 1x1 conv weights
[C, C, 1, 1]), decoder.up.(n-1-i).block.j / upsample.conv (decoder.up_blocks.i.resnets.j / upsamplers.0.conv: the
index is reversed), {encoder,decoder}.norm_out (conv_norm_out), conv_in, conv_out, quant_conv, post_quant_conv.
Independent checks, both run here: (1) diffusers' own convert_ldm_vae_checkpoint (the from_single_file path) turns
each LDM file back into a state dict that a fresh AutoencoderKL loads strict, and its outputs equal the originals
bit for bit; (2) BFL's AutoEncoder (src/flux/modules/autoencoder.py, the code behind ae.safetensors; GroupNorm(32) is
hard-coded there, so it needs 32-wide levels) loads, strict, the converter's output for a third, uncommitted model
(block_out_channels (32, 64), 2 layers, 16 latent channels, 32 groups, no quant convs), and its encoder moments and
decoder output match diffusers' (errors printed).

Inputs: image [2, 3, 24, 40] in [-1, 1] (a smooth pattern plus noise; float16, the models run it in float32).
Outputs per model m, float32: m.mean, m.logvar (after quant_conv, logvar clamped), m.decoded (decode of m.mean:
post_quant_conv and the decoder, no scaling). bf16: the model cast to bfloat16 on the image cast to bfloat16:
m.bf16.mean, m.bf16.logvar, m.bf16.decoded (stored as bfloat16).
Tiling (float16 images [1, 3, 64, 96]): tiling.image (smooth pattern plus noise, like image) and
tiling.periodic_image (repeating every 16 pixels on both axes, so that a tile of whole periods has the statistics of
the whole image: GroupNorm sees the same mean and variance, attention the same keys, and what remains of the tiling
error comes from the tile borders). diffusers' enable_tiling() with tile_sample_min_size T, tile_latent_min_size
T / downscale and tile_overlap_factor O / T: the smooth image with T 32, O 8 (diffusers' default factor 0.25), the
periodic one with T 48, O 16. m.tiling.{smooth,periodic}.encode_error = max|tiled mean - mean| / max|mean|,
m.tiling.{smooth,periodic}.decode_error (the same for decoding the untiled mean), [1] float32 each: the yardstick
wick's own tiling (other tile placement and blend) is compared with.

Measured (this script's last run; errors are max|a - b| / max|b|):
  diffusers convert_ldm_vae_checkpoint of either LDM file vs the diffusers model: 0.0 (mean, logvar, decoded).
  BFL AutoEncoder (32 groups, (32, 64), z 16; strict load of the converter's output) vs diffusers: encoder moments
    1.1e-06 (mean half) / 2.1e-07 (logvar half), decoder(mean) 1.8e-06, encode() vs 0.3611 (mean - 0.1159) 1.0e-06.
  diffusers bf16 vs f32: sdxl_tiny mean 3.0e-02, logvar 1.9e-03, decoded 7.2e-02; flux_tiny 2.9e-02, 3.9e-03, 5.7e-02.
  diffusers tiled vs untiled: smooth (T 32, O 8) sdxl_tiny encode 0.869 / decode 0.802, flux_tiny 0.730 / 0.717;
    periodic (T 48, O 16) sdxl_tiny 0.417 / 0.559, flux_tiny 0.243 / 0.198. The smooth image's errors are of the
    order of the outputs themselves: with 8-pixel latent tiles, GroupNorm's per-tile statistics of these random models
    differ from the whole image's; the periodic image takes that away and leaves the seams.
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch
from safetensors.torch import load_file, save_file

import diffusers
from diffusers import AutoencoderKL
from diffusers.loaders.single_file_utils import convert_ldm_vae_checkpoint

from reference_common import data_dir
from reference_torch import deterministic_torch, rel_err_f32

OUT_DIR = data_dir("vae")
SINGLE_FILE_PREFIX = "first_stage_model."

MODELS = {
    "sdxl_tiny": dict(block_out_channels=(8, 16, 16), layers_per_block=2, latent_channels=4, norm_num_groups=4,
                      use_quant_conv=True, use_post_quant_conv=True, scaling_factor=0.13025, shift_factor=None),
    "flux_tiny": dict(block_out_channels=(8, 16), layers_per_block=2, latent_channels=16, norm_num_groups=8,
                      use_quant_conv=False, use_post_quant_conv=False, scaling_factor=0.3611, shift_factor=0.1159),
}
# Not committed: checked against BFL's AutoEncoder, which hard-codes GroupNorm(32).
BFL_CHECK = dict(block_out_channels=(32, 64), layers_per_block=2, latent_channels=16, norm_num_groups=32,
                 use_quant_conv=False, use_post_quant_conv=False, scaling_factor=0.3611, shift_factor=0.1159)
IMAGE_SHAPE = (2, 3, 24, 40)
TILING_SHAPE = (1, 3, 64, 96)
TILE = 32
# diffusers' tiled runs: (image, tile pixels, overlap pixels).
TILINGS = {"smooth": ("tiling.image", 32, 8), "periodic": ("tiling.periodic_image", 48, 16)}
PERIOD = 16


def make_model(cfg):
    n = len(cfg["block_out_channels"])
    return AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * n,
                         up_block_types=("UpDecoderBlock2D",) * n, act_fn="silu", sample_size=TILE, **cfg).eval()


def redraw(model, seed, latent_channels):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if "norm" in name:
                noise = torch.randn(p.shape, generator=gen) * 0.1
                v = 1 + noise if name.endswith("weight") else noise
            elif name.endswith("bias"):
                v = torch.randn(p.shape, generator=gen) * 0.1
            else:
                fan_in = p[0].numel()
                v = torch.randn(p.shape, generator=gen) / fan_in ** 0.5
            p.copy_(v)
        # logvar channels are the second half of the last conv before the split (quant_conv when present, else
        # the encoder's conv_out): push two past the clamp.
        last = model.quant_conv if model.quant_conv is not None else model.encoder.conv_out
        bias = last.bias
        bias[latent_channels] = 25.0
        bias[latent_channels + 1] = -35.0
        for p in model.parameters():
            p.copy_(p.half().float())


def ldm_from_diffusers(state, n_levels):
    """This script's own converter: diffusers AutoencoderKL names -> LDM / BFL names (MODELS.md 1.5)."""
    def resnet(name):
        return name.replace("conv_shortcut", "nin_shortcut")

    def mid(name):
        name = name.replace("mid_block.resnets.0.", "mid.block_1.").replace("mid_block.resnets.1.", "mid.block_2.")
        for a, b in (("group_norm", "norm"), ("to_q", "q"), ("to_k", "k"), ("to_v", "v"), ("to_out.0", "proj_out")):
            name = name.replace(f"mid_block.attentions.0.{a}.", f"mid.attn_1.{b}.")
        return name

    out = {}
    for name, t in state.items():
        new = name.replace("conv_norm_out", "norm_out")
        parts = new.split(".")
        if parts[1] == "down_blocks":
            i = parts[2]
            if parts[3] == "resnets":
                new = resnet(f"encoder.down.{i}.block.{'.'.join(parts[4:])}")
            else:  # downsamplers.0.conv.*
                new = f"encoder.down.{i}.downsample.{'.'.join(parts[5:])}"
        elif parts[1] == "up_blocks":
            i = n_levels - 1 - int(parts[2])
            if parts[3] == "resnets":
                new = resnet(f"decoder.up.{i}.block.{'.'.join(parts[4:])}")
            else:  # upsamplers.0.conv.*
                new = f"decoder.up.{i}.upsample.{'.'.join(parts[5:])}"
        elif parts[1] == "mid_block":
            new = resnet(mid(new))
            if ".attn_1." in new and new.endswith("weight") and ".norm." not in new:
                t = t.reshape(*t.shape, 1, 1)
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


def make_periodic_image(shape, period):
    """Repeats every `period` pixels along both axes: a tile of whole periods has the image's statistics."""
    b, c, h, w = shape
    yy = torch.arange(h, dtype=torch.float64).view(1, 1, h, 1) / period
    xx = torch.arange(w, dtype=torch.float64).view(1, 1, 1, w) / period
    ch = torch.arange(c, dtype=torch.float64).view(1, c, 1, 1)
    image = 0.8 * torch.sin(2 * np.pi * (xx + 2 * yy) + ch) * torch.cos(2 * np.pi * yy + ch)
    return image.expand(b, c, h, w).float().half().float()


def run(model, image):
    with torch.no_grad():
        dist = model.encode(image).latent_dist
        decoded = model.decode(dist.mean).sample
    return dist.mean, dist.logvar, decoded


def write_diffusers(key, model, state):
    folder = os.path.join(OUT_DIR, key, "vae")
    shutil.rmtree(os.path.join(OUT_DIR, key), ignore_errors=True)
    os.makedirs(folder)
    save_file(dict(sorted(state.items())), os.path.join(folder, "diffusion_pytorch_model.safetensors"),
              metadata={"format": "pt"})
    model.save_config(folder)
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    config.pop("_diffusers_version", None)  # keep the file independent of the exact version
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    return folder


def check_ldm_with_diffusers(key, cfg, ldm_file, reference, image):
    """diffusers' own single-file converter reads our LDM file back: strict load, identical outputs."""
    checkpoint = load_file(ldm_file)
    n = len(cfg["block_out_channels"])
    config = dict(down_block_types=["DownEncoderBlock2D"] * n, up_block_types=["UpDecoderBlock2D"] * n)
    converted = convert_ldm_vae_checkpoint(checkpoint, config)
    fresh = make_model(cfg)
    result = fresh.load_state_dict({k: v.float() for k, v in converted.items()}, strict=True)
    assert not result.missing_keys and not result.unexpected_keys, result
    got = run(fresh, image)
    errors = [rel_err_f32(g, r) for g, r in zip(got, reference)]
    print(f"  {key}: diffusers convert_ldm_vae_checkpoint of the LDM file, strict; mean/logvar/decoded errors "
          f"{errors}")
    assert max(errors) == 0.0, errors


def check_bfl(bfl_src, image):
    """BFL's AutoEncoder loads the converter's output for a 32-group model, strict, and computes what diffusers
    computes."""
    if not bfl_src or not os.path.isdir(bfl_src):
        print("  BFL check skipped: no --bfl-src (see the docstring)")
        return
    sys.path.insert(0, bfl_src)
    from flux.modules.autoencoder import AutoEncoder, AutoEncoderParams

    torch.manual_seed(0)
    model = make_model(BFL_CHECK)
    redraw(model, 300, BFL_CHECK["latent_channels"])
    boc = BFL_CHECK["block_out_channels"]
    ldm = ldm_from_diffusers(model.state_dict(), len(boc))
    params = AutoEncoderParams(resolution=TILE, in_channels=3, ch=boc[0], out_ch=3,
                               ch_mult=[c // boc[0] for c in boc], num_res_blocks=BFL_CHECK["layers_per_block"],
                               z_channels=BFL_CHECK["latent_channels"], scale_factor=0.3611, shift_factor=0.1159)
    bfl = AutoEncoder(params).eval()
    result = bfl.load_state_dict(ldm, strict=True)
    assert not result.missing_keys and not result.unexpected_keys, result
    with torch.no_grad():
        moments = bfl.encoder(image)
        mean, logvar, decoded = run(model, image)
        errors = {"encoder moments (mean half)": rel_err_f32(moments.chunk(2, dim=1)[0], mean),
                  "encoder moments (logvar half, unclamped)": rel_err_f32(moments.chunk(2, dim=1)[1],
                                                                          model.encoder(image).chunk(2, dim=1)[1]),
                  "decoder(mean)": rel_err_f32(bfl.decoder(mean), decoded),
                  "encode() = 0.3611 (mean - 0.1159)": rel_err_f32(bfl.encode(image), 0.3611 * (mean - 0.1159))}
    for name, e in errors.items():
        print(f"  BFL AutoEncoder (32 groups, (32, 64), z 16) {name} vs diffusers: {e:.2e}")
        assert e < 1e-5, name


def tiling_errors(model, downscale, image, tile, overlap):
    """diffusers' own tiled encode / decode (tiles of `tile` pixels sharing `overlap`) against its untiled result."""
    with torch.no_grad():
        mean = model.encode(image).latent_dist.mean
        decoded = model.decode(mean).sample
        model.enable_tiling()
        model.tile_sample_min_size = tile
        model.tile_latent_min_size = tile // downscale
        model.tile_overlap_factor = overlap / tile
        tiled_mean = model.encode(image).latent_dist.mean
        tiled_decoded = model.decode(mean).sample
        model.disable_tiling()
        model.tile_overlap_factor = 0.25
    return rel_err_f32(tiled_mean, mean), rel_err_f32(tiled_decoded, decoded)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bfl-src", default="")
    args = parser.parse_args()
    deterministic_torch()
    print(f"torch {torch.__version__}, diffusers {diffusers.__version__}")
    os.makedirs(OUT_DIR, exist_ok=True)
    image = make_image(IMAGE_SHAPE, 11)
    cases = {"image": image, "tiling.image": make_image(TILING_SHAPE, 12),
             "tiling.periodic_image": make_periodic_image(TILING_SHAPE, PERIOD)}
    for seed, (key, cfg) in enumerate(MODELS.items()):
        torch.manual_seed(seed)
        model = make_model(cfg)
        redraw(model, 100 + seed, cfg["latent_channels"])
        state = {k: v.half().contiguous() for k, v in model.state_dict().items()}
        folder = write_diffusers(key, model, state)
        loaded, info = AutoencoderKL.from_pretrained(folder, torch_dtype=torch.float32, output_loading_info=True)
        assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
        loaded.eval()
        n_levels = len(cfg["block_out_channels"])
        print(f"{key}: {sum(t.numel() for t in state.values())} parameters, {len(state)} tensors")

        mean, logvar, decoded = run(loaded, image)
        cases[f"{key}.mean"], cases[f"{key}.logvar"], cases[f"{key}.decoded"] = mean, logvar, decoded
        assert float(logvar[:, 0].max()) == 20.0 and float(logvar[:, 1].min()) == -30.0, "clamp not exercised"
        print(f"  mean max {float(mean.abs().max()):.3f}, decoded max {float(decoded.abs().max()):.3f}, "
              f"logvar range [{float(logvar.min()):.1f}, {float(logvar.max()):.1f}]")

        ldm = ldm_from_diffusers(state, n_levels)
        if key == "sdxl_tiny":  # as inside an SDXL / SD3 single file: a prefix, and other components beside it
            ldm = {SINGLE_FILE_PREFIX + k: v for k, v in ldm.items()}
            ldm["model.diffusion_model.input_blocks.0.0.weight"] = torch.zeros(4, 4, dtype=torch.float16)
            ldm_file = os.path.join(OUT_DIR, "sdxl_tiny_ldm.safetensors")
        else:  # as Flux's ae.safetensors: BFL's names, no prefix
            ldm_file = os.path.join(OUT_DIR, "flux_tiny_ae.safetensors")
        save_file(dict(sorted(ldm.items())), ldm_file, metadata={"format": "pt"})
        check_ldm_with_diffusers(key, cfg, ldm_file, (mean, logvar, decoded), image)

        bf16 = AutoencoderKL.from_pretrained(folder, torch_dtype=torch.bfloat16).eval()
        b_mean, b_logvar, b_decoded = run(bf16, image.bfloat16())
        cases[f"{key}.bf16.mean"], cases[f"{key}.bf16.logvar"] = b_mean, b_logvar
        cases[f"{key}.bf16.decoded"] = b_decoded
        for name, b, f in (("mean", b_mean, mean), ("logvar", b_logvar, logvar), ("decoded", b_decoded, decoded)):
            print(f"  bf16 {name} vs f32: {rel_err_f32(b, f):.2e}")

        for kind, (name, tile, overlap) in TILINGS.items():
            encode_error, decode_error = tiling_errors(loaded, 2 ** (n_levels - 1), cases[name], tile, overlap)
            cases[f"{key}.tiling.{kind}.encode_error"] = torch.tensor([encode_error])
            cases[f"{key}.tiling.{kind}.decode_error"] = torch.tensor([decode_error])
            print(f"  diffusers tiled (tile {tile} px, overlap {overlap}) vs untiled on the {kind} image: encode "
                  f"{encode_error:.3f}, decode {decode_error:.3f}")

    check_bfl(args.bfl_src, image)
    # The images are float16 values: stored as float16; bf16 outputs as bfloat16; the rest float32.
    for name in ("image", "tiling.image", "tiling.periodic_image"):
        cases[name] = cases[name].half()
    cases = {k: (v if v.dtype in (torch.bfloat16, torch.float16) else v.float()).contiguous()
             for k, v in sorted(cases.items())}
    save_file(cases, os.path.join(OUT_DIR, "cases.safetensors"), metadata={"format": "pt"})
    total = 0
    for root, _, files in sorted(os.walk(OUT_DIR)):
        for name in sorted(files):
            path = os.path.join(root, name)
            total += os.path.getsize(path)
            print(f"  {os.path.relpath(path, OUT_DIR)}: {os.path.getsize(path)} bytes")
    print(f"  total {total} bytes")


if __name__ == "__main__":
    sys.exit(main())
