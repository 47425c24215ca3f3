#!/usr/bin/env python3
"""Checks that a PEFT/diffusers-format Z-Image LoRA file loads in diffusers and reproduces an expected output.

    /tmp/refvenv/bin/python tests/reference/check_zimage_lora.py --weights tests/data/zimage/diffusers/transformer \\
        --case CASEFILE --lora LORAFILE [--tolerance 1e-5]

1. Builds ZImageTransformer2DModel from the diffusers folder --weights (float32, CPU, one thread, deterministic).
2. Loads --lora through diffusers' Z-Image LoRA path, the one ZImagePipeline.load_lora_weights takes:
   ZImageLoraLoaderMixin.lora_state_dict(file, return_lora_metadata=True), then
   ZImageLoraLoaderMixin.load_lora_into_transformer(...) (-> ZImageTransformer2DModel.load_lora_adapter). The alpha
   comes from the file's `lora_adapter_metadata` (without it diffusers uses lora_alpha = r, i.e. scale 1). Reports
   LoRA keys that are missing (adapter parameters the file does not fill) or unexpected (file tensors that land on no
   adapter parameter), counted both from diffusers' own warnings and by comparing every file tensor with the adapter
   parameter it should have become. Any -> exit 1.
3. Runs the model on CASEFILE's one sample: `latents` [1, C, H, W], `context` [L, D] (its caption rows) and `timestep`
   [1 or more] (the model's own t, 1 = clean; the first is used), as ZImagePipeline calls it (a list of [C, 1, H, W]
   latents and a list of captions), and compares the output with `expected_output` [1, C, H, W]: max |out - expected|
   / max |expected| <= tolerance -> exit 0, otherwise the error is printed and exit 1.
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
    from diffusers import ZImageTransformer2DModel
    from diffusers.loaders import ZImageLoraLoaderMixin
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from reference_torch import deterministic_torch, load_lora_reported, rel_err
except Exception as e:  # noqa: BLE001
    print(f"check_zimage_lora: skipped, cannot import torch/diffusers/peft/safetensors ({e})")
    sys.exit(77)


def main():
    parser = argparse.ArgumentParser(description="diffusers loads a PEFT-format Z-Image LoRA and reproduces a case")
    parser.add_argument("--weights", required=True, help="diffusers ZImageTransformer2DModel folder")
    parser.add_argument("--case", required=True, help="safetensors with latents/context/timestep and expected_output")
    parser.add_argument("--lora", required=True, help="PEFT/diffusers-format LoRA safetensors")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    args = parser.parse_args()
    for path in (args.weights, args.case, args.lora):
        if not os.path.exists(path):
            print(f"check_zimage_lora: {path} does not exist")
            return 2

    deterministic_torch()
    model = ZImageTransformer2DModel.from_pretrained(args.weights, torch_dtype=torch.float32).eval()

    if not load_lora_reported("check_zimage_lora", ZImageLoraLoaderMixin, model, args.lora):
        return 1

    # Fresh (aligned) copies: torch's kernels may round differently for tensors at another offset of the file.
    case = {name: tensor.clone() for name, tensor in load_file(args.case).items()}
    for name in ("latents", "context", "timestep"):
        if name not in case:
            print(f"check_zimage_lora: {args.case} has no '{name}'")
            return 2
    expected = case.get("expected_output")
    if expected is None:
        print(f"check_zimage_lora: {args.case} has no 'expected_output'")
        return 2
    with torch.no_grad():
        out = model([case["latents"][0].float().unsqueeze(1)], case["timestep"][:1].float(), [case["context"].float()],
                    return_dict=False)[0]
    out = torch.stack([o.squeeze(1) for o in out], 0)
    if out.shape != expected.shape:
        print(f"check_zimage_lora: output shape {tuple(out.shape)} != expected {tuple(expected.shape)}")
        return 1
    err = rel_err(out, expected)
    ok = err <= args.tolerance
    print(f"check_zimage_lora: max relative error {err:.3e} (tolerance {args.tolerance:g}): {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
