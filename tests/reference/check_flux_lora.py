#!/usr/bin/env python3
"""Checks that a PEFT/diffusers-format Flux LoRA file loads in diffusers and reproduces an expected output.

    /tmp/venv/bin/python tests/reference/check_flux_lora.py --weights tests/data/flux/dev_diffusers \\
        --case CASEFILE --lora LORAFILE [--tolerance 1e-5]

1. Builds FluxTransformer2DModel from the diffusers folder --weights (float32, CPU, one thread, deterministic).
2. Loads --lora through diffusers' Flux LoRA path, the one FluxPipeline.load_lora_weights takes:
   FluxLoraLoaderMixin.lora_state_dict(file, return_alphas=True, return_lora_metadata=True), then
   FluxLoraLoaderMixin.load_lora_into_transformer(...) (-> FluxTransformer2DModel.load_lora_adapter). The alpha
   comes from the file's `lora_adapter_metadata` (without it diffusers uses lora_alpha = r, i.e. scale 1).
   Reports LoRA keys that are missing (adapter parameters the file does not fill) or unexpected (file tensors that
   land on no adapter parameter), counted both from diffusers' own warnings and by comparing every file tensor with
   the adapter parameter it should have become. Any -> exit 1.
3. Runs the model on CASEFILE's `latents` [B, C, H, W] (packed 2x2 as diffusers does), `context` [B, L, D],
   `pooled` [B, P], `timestep` [B] (sigma in [0, 1]; the model multiplies by 1000) and `guidance` [B] (required
   when the model has guidance_embeds), with img_ids (0, row, col) and zero txt_ids, unpacks the output and compares
   it with `expected_output` [B, C, H, W] (falls back to `output`, so the fixtures' own dev_lora_case works):
   max |out - expected| / max |expected| <= tolerance -> exit 0, otherwise the error is printed and exit 1.
Exit 77 when torch / diffusers / peft / safetensors cannot be imported (the calling test then skips); exit 2 on a
usage error (missing file or tensor).

Self-test with the committed fixtures:
    /tmp/venv/bin/python tests/reference/check_flux_lora.py --weights tests/data/flux/dev_diffusers \\
        --case tests/data/flux/dev_lora_case.safetensors --lora tests/data/flux/dev_lora_peft.safetensors
"""
import argparse
import os
import sys

try:
    import torch
    from safetensors.torch import load_file
    import peft  # noqa: F401  (diffusers' LoRA loading needs it)
    from diffusers import FluxTransformer2DModel
    from diffusers.loaders import FluxLoraLoaderMixin
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from reference_torch import (captured_warnings, deterministic_torch, flux_img_ids, lora_key_warnings,
                                 pack_flux_latents, reconcile_lora_keys, rel_err, unpack_flux_latents)
except Exception as e:  # noqa: BLE001
    print(f"check_flux_lora: skipped, cannot import torch/diffusers/peft/safetensors ({e})")
    sys.exit(77)


def main():
    parser = argparse.ArgumentParser(description="diffusers loads a PEFT-format Flux LoRA and reproduces a case")
    parser.add_argument("--weights", required=True, help="diffusers FluxTransformer2DModel folder")
    parser.add_argument("--case", required=True, help="safetensors with latents/context/pooled/timestep[/guidance]"
                                                      " and expected_output")
    parser.add_argument("--lora", required=True, help="PEFT/diffusers-format LoRA safetensors")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    args = parser.parse_args()
    for path in (args.weights, args.case, args.lora):
        if not os.path.exists(path):
            print(f"check_flux_lora: {path} does not exist")
            return 2

    deterministic_torch()
    model = FluxTransformer2DModel.from_pretrained(args.weights, torch_dtype=torch.float32).eval()

    adapter = "wick_check"
    with captured_warnings() as messages:
        try:
            state_dict, alphas, metadata = FluxLoraLoaderMixin.lora_state_dict(args.lora, return_alphas=True,
                                                                               return_lora_metadata=True)
            file_tensors = dict(state_dict)
            FluxLoraLoaderMixin.load_lora_into_transformer(state_dict, network_alphas=alphas or None,
                                                          transformer=model, metadata=metadata, adapter_name=adapter)
        except Exception as e:  # noqa: BLE001
            print(f"check_flux_lora: diffusers failed to load {args.lora}: {type(e).__name__}: {e}")
            return 1

    params, missing, unexpected = reconcile_lora_keys(file_tensors, model, adapter)
    warned = lora_key_warnings(messages)
    scale = None
    if metadata:
        r, a = metadata.get("transformer.r"), metadata.get("transformer.lora_alpha")
        scale = f"lora_alpha {a} / r {r}" if r is not None else None
    print(f"check_flux_lora: {len(file_tensors)} LoRA tensors -> {len(params)} adapter parameters; "
          f"{len(missing)} missing, {len(unexpected)} unexpected; scale from metadata: {scale or 'none (alpha = r)'}")
    for k in missing:
        print(f"  missing: {k}")
    for k in unexpected:
        print(f"  unexpected: {k}")
    for m in warned:
        print(f"  diffusers warning: {m}")
    if missing or unexpected or warned or not params:
        return 1

    # Fresh (aligned) copies: torch's kernels may round differently for tensors at another offset of the file.
    case = {name: tensor.clone() for name, tensor in load_file(args.case).items()}
    for name in ("latents", "context", "pooled", "timestep"):
        if name not in case:
            print(f"check_flux_lora: {args.case} has no '{name}'")
            return 2
    expected = case.get("expected_output", case.get("output"))
    if expected is None:
        print(f"check_flux_lora: {args.case} has no 'expected_output'")
        return 2
    if model.config.guidance_embeds and "guidance" not in case:
        print(f"check_flux_lora: the model has guidance_embeds but {args.case} has no 'guidance'")
        return 2
    latents = case["latents"].float()
    _, _, h, w = latents.shape
    with torch.no_grad():
        out = model(hidden_states=pack_flux_latents(latents), encoder_hidden_states=case["context"].float(),
                    pooled_projections=case["pooled"].float(), timestep=case["timestep"].float(),
                    img_ids=flux_img_ids(h, w), txt_ids=torch.zeros(case["context"].shape[1], 3),
                    guidance=case["guidance"].float() if model.config.guidance_embeds else None,
                    return_dict=False)[0]
    out = unpack_flux_latents(out, h, w)
    if out.shape != expected.shape:
        print(f"check_flux_lora: output shape {tuple(out.shape)} != expected {tuple(expected.shape)}")
        return 1
    err = rel_err(out, expected)
    ok = err <= args.tolerance
    print(f"check_flux_lora: max relative error {err:.3e} (tolerance {args.tolerance:g}): {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
