#!/usr/bin/env python3
"""Checks that a PEFT/diffusers-format SD3 / SD3.5 LoRA file loads in diffusers and reproduces an expected output.

    /tmp/venv/bin/python tests/reference/check_sd3_lora.py --weights tests/data/sd3/medium_diffusers \\
        --case CASEFILE --lora LORAFILE [--tolerance 1e-5]

1. Builds SD3Transformer2DModel from the diffusers folder --weights (float32, CPU, one thread, deterministic).
2. Loads --lora through diffusers' SD3 LoRA path, the one StableDiffusion3Pipeline.load_lora_weights takes:
   SD3LoraLoaderMixin.lora_state_dict(file, return_lora_metadata=True), then
   SD3LoraLoaderMixin.load_lora_into_transformer(...) (-> SD3Transformer2DModel.load_lora_adapter). The alpha comes from
   the file's `lora_adapter_metadata` (without it diffusers uses lora_alpha = r, i.e. scale 1). Reports LoRA keys that
   are missing (adapter parameters the file does not fill) or unexpected (file tensors that land on no adapter
   parameter), counted both from diffusers' own warnings and by comparing every file tensor with the adapter parameter
   it should have become. Any -> exit 1.
3. Runs the model on CASEFILE's `latents` [B, C, H, W] (or `latents_square`), `context` [B, L, D], `pooled` [B, P] and
   `sigma` [B] (in [0, 1]; diffusers' model is given sigma * 1000, computed in f32 as wick does) and compares the
   output with `expected_output` [B, C, H, W] (falls back to `output`, so the fixtures' own medium_lora_case works):
   max |out - expected| / max |expected| <= tolerance -> exit 0, otherwise the error is printed and exit 1.
Exit 77 when torch / diffusers / peft / safetensors cannot be imported (the calling test then skips); exit 2 on a
usage error (missing file or tensor).

Self-test with the committed fixtures:
    /tmp/venv/bin/python tests/reference/check_sd3_lora.py --weights tests/data/sd3/medium_diffusers \\
        --case tests/data/sd3/medium_lora_case.safetensors --lora tests/data/sd3/medium_lora_peft.safetensors
"""
import argparse
import os
import sys

try:
    import torch
    from safetensors.torch import load_file
    import peft  # noqa: F401  (diffusers' LoRA loading needs it)
    from diffusers import SD3Transformer2DModel
    from diffusers.loaders import SD3LoraLoaderMixin
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from reference_torch import deterministic_torch, load_lora_reported, rel_err
except Exception as e:  # noqa: BLE001
    print(f"check_sd3_lora: skipped, cannot import torch/diffusers/peft/safetensors ({e})")
    sys.exit(77)


def main():
    parser = argparse.ArgumentParser(description="diffusers loads a PEFT-format SD3 LoRA and reproduces a case")
    parser.add_argument("--weights", required=True, help="diffusers SD3Transformer2DModel folder")
    parser.add_argument("--case", required=True, help="safetensors with latents/context/pooled/sigma and "
                                                      "expected_output")
    parser.add_argument("--lora", required=True, help="PEFT/diffusers-format LoRA safetensors")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    args = parser.parse_args()
    for path in (args.weights, args.case, args.lora):
        if not os.path.exists(path):
            print(f"check_sd3_lora: {path} does not exist")
            return 2

    deterministic_torch()
    model = SD3Transformer2DModel.from_pretrained(args.weights, torch_dtype=torch.float32).eval()

    if not load_lora_reported("check_sd3_lora", SD3LoraLoaderMixin, model, args.lora):
        return 1

    # Fresh (aligned) copies: torch's kernels may round differently for tensors at another offset of the file.
    case = {name: tensor.clone() for name, tensor in load_file(args.case).items()}
    latents = case.get("latents", case.get("latents_square"))
    for name, value in (("latents", latents), ("context", case.get("context")), ("pooled", case.get("pooled")),
                        ("sigma", case.get("sigma"))):
        if value is None:
            print(f"check_sd3_lora: {args.case} has no '{name}'")
            return 2
    expected = case.get("expected_output", case.get("output"))
    if expected is None:
        print(f"check_sd3_lora: {args.case} has no 'expected_output'")
        return 2
    with torch.no_grad():
        out = model(hidden_states=latents.float(), encoder_hidden_states=case["context"].float(),
                    pooled_projections=case["pooled"].float(), timestep=case["sigma"].float() * 1000,
                    return_dict=False)[0]
    if out.shape != expected.shape:
        print(f"check_sd3_lora: output shape {tuple(out.shape)} != expected {tuple(expected.shape)}")
        return 1
    err = rel_err(out, expected)
    ok = err <= args.tolerance
    print(f"check_sd3_lora: max relative error {err:.3e} (tolerance {args.tolerance:g}): {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
