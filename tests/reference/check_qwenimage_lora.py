#!/usr/bin/env python3
"""Checks that a Qwen-Image LoRA file (PEFT names, or musubi-tuner's kohya lora_unet_ names) loads in diffusers and
reproduces an expected output.

    /tmp/refvenv/bin/python tests/reference/check_qwenimage_lora.py --weights tests/data/qwenimage/transformer \\
        --case CASEFILE --lora LORAFILE [--tolerance 1e-5]

1. Builds QwenImageTransformer2DModel from the diffusers folder --weights (float32, CPU, one thread, deterministic).
2. Loads --lora through diffusers' Qwen-Image LoRA path, the one QwenImagePipeline.load_lora_weights takes:
   QwenImageLoraLoaderMixin.lora_state_dict(file, return_lora_metadata=True) (which converts lora_unet_ names and
   bakes kohya's alpha into the factors), then QwenImageLoraLoaderMixin.load_lora_into_transformer(...)
   (-> QwenImageTransformer2DModel.load_lora_adapter). The alpha of a PEFT file comes from its
   `lora_adapter_metadata`. Reports LoRA keys that are missing (adapter parameters the state dict does not fill) or
   unexpected (state-dict tensors that land on no adapter parameter), counted both from diffusers' own warnings and
   by comparing every tensor with the adapter parameter it should have become. Any -> exit 1.
3. Runs the model on CASEFILE's batch as QwenImagePipeline calls it: `latents` [B, 16, H, W] packed into 2x2 patch
   tokens, `context` [B, L, D] with `context_mask` [B, L] (1 = text token), `sigma` [B] (the model's timestep,
   scheduler timestep / 1000), img_shapes [(1, H/2, W/2)] per sample; the output unpacked and compared with
   `expected_output` [B, 16, H, W]: max |out - expected| / max |expected| <= tolerance -> exit 0, otherwise the error
   is printed and exit 1. The timestep sinusoid's frequency table is the correctly rounded one
   (reference_torch.correctly_rounded_sinusoid): torch's f32 exp of it differs at a few entries that vary between
   CPUs, which alone moves the tiny model's output by about 1e-5; wick rounds the table correctly.
Exit 77 when torch / diffusers / peft / safetensors cannot be imported (the calling test then skips); exit 2 on a
usage error (missing file or tensor).
"""
import argparse
import os
import sys

try:
    import torch
    from safetensors.torch import load_file
    import peft  # noqa: F401  (diffusers' LoRA loading needs it)
    from diffusers import QwenImageTransformer2DModel
    from diffusers.loaders import QwenImageLoraLoaderMixin
    from diffusers.pipelines.qwenimage.pipeline_qwenimage import QwenImagePipeline
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from reference_torch import correctly_rounded_sinusoid, deterministic_torch, load_lora_reported, rel_err
except Exception as e:  # noqa: BLE001
    print(f"check_qwenimage_lora: skipped, cannot import torch/diffusers/peft/safetensors ({e})")
    sys.exit(77)


def run(model, latents, context, mask, sigma):
    """The pipeline's call: packed latents in, the target's tokens unpacked to [B, C, H, W]."""
    b, c, h, w = latents.shape
    tokens = QwenImagePipeline._pack_latents(latents, b, c, h, w)
    out = model(hidden_states=tokens, encoder_hidden_states=context, encoder_hidden_states_mask=mask, timestep=sigma,
                img_shapes=[[(1, h // 2, w // 2)]] * b, return_dict=False)[0]
    return out.view(b, h // 2, w // 2, c, 2, 2).permute(0, 3, 1, 4, 2, 5).reshape(b, c, h, w)


def main():
    parser = argparse.ArgumentParser(description="diffusers loads a Qwen-Image LoRA and reproduces a case")
    parser.add_argument("--weights", required=True, help="diffusers QwenImageTransformer2DModel folder")
    parser.add_argument("--case", required=True,
                        help="safetensors with latents/context/context_mask/sigma and expected_output")
    parser.add_argument("--lora", required=True, help="PEFT or kohya (lora_unet_) Qwen-Image LoRA safetensors")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    args = parser.parse_args()
    for path in (args.weights, args.case, args.lora):
        if not os.path.exists(path):
            print(f"check_qwenimage_lora: {path} does not exist")
            return 2

    deterministic_torch()
    model = QwenImageTransformer2DModel.from_pretrained(args.weights, torch_dtype=torch.float32).eval()

    if not load_lora_reported("check_qwenimage_lora", QwenImageLoraLoaderMixin, model, args.lora):
        return 1

    # Fresh (aligned) copies: torch's kernels may round differently for tensors at another offset of the file.
    case = {name: tensor.clone() for name, tensor in load_file(args.case).items()}
    for name in ("latents", "context", "context_mask", "sigma", "expected_output"):
        if name not in case:
            print(f"check_qwenimage_lora: {args.case} has no '{name}'")
            return 2
    expected = case["expected_output"]
    with torch.no_grad(), correctly_rounded_sinusoid():
        out = run(model, case["latents"].float(), case["context"].float(), case["context_mask"], case["sigma"].float())
    if out.shape != expected.shape:
        print(f"check_qwenimage_lora: output shape {tuple(out.shape)} != expected {tuple(expected.shape)}")
        return 1
    err = rel_err(out, expected)
    ok = err <= args.tolerance
    print(f"check_qwenimage_lora: max relative error {err:.3e} (tolerance {args.tolerance:g}): {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
