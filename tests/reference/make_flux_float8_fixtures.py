#!/usr/bin/env python3
"""Writes tests/data/flux/dev_float8_lora_case.safetensors and dev_bfl_float8.safetensors: the LoRA case of
dev_lora_case.safetensors (same inputs, target, lora_A / lora_B) run on a base whose block Linears are float8,
dequantized the way wick does (model.quantize: float8, per-row scales), and the float8 checkpoint of that base.

Quantization (runtime/ops/float8.h; reference_torch.quantize_e4m3, as make_float8_fixtures.py): per output row,
amax = max |w| in f32, scale = amax / 448 (1 for a zero row), codes = e4m3(clamp(w / scale, -448, 448))
(torch.float8_e4m3fn); the base then computes with codes.float() * scale (f32). Quantized: every nn.Linear inside
transformer_blocks and single_transformer_blocks (the BFL double_blocks.* / single_blocks.* Linears). Per-row scales
are row-local, so quantizing diffusers' separate to_q / to_k / to_v / proj_mlp equals quantizing BFL's fused qkv /
linear1.

dev_float8_lora_case: output [2, 4, 6, 10], loss [], grad.bfl.<BFL Linear>.lora_down / lora_up (fused as in
dev_lora_case), and the f32 LoRA inputs are those of dev_lora_case (not repeated).
dev_bfl_float8: dev_bfl.safetensors with each block Linear's .weight stored as F8_E4M3 codes plus
.weight_scale f32 [out] (the quantizer above applied to the BFL weight); everything else as in dev_bfl.

Made with torch 2.15.0, diffusers 0.42.1, peft 0.21.2, on the CPU, one thread, float32. Run from the repository
root: /tmp/venv/bin/python tests/reference/make_flux_float8_fixtures.py
"""
import copy
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_flux_fixtures as flux  # noqa: E402  (the tiny model's tables and forward)
from reference_common import sort_metadata  # noqa: E402
from reference_torch import (F8, deterministic_torch, peft_layer, quantize_e4m3, quantize_linears,  # noqa: E402
                             rel_err, unpack_flux_latents, write_f32)

BLOCK_PREFIXES = ("transformer_blocks.", "single_transformer_blocks.")


def metadata():
    meta = flux.base_metadata()
    meta["generator"] = "tests/reference/make_flux_float8_fixtures.py"
    return meta


def main():
    deterministic_torch()
    case = load_file(os.path.join(flux.OUT_DIR, "dev_lora_case.safetensors"))
    base = flux.FluxTransformer2DModel.from_pretrained(os.path.join(flux.OUT_DIR, "dev_diffusers"))
    base = base.float().eval()
    n = quantize_linears(base, BLOCK_PREFIXES)
    assert n == 2 * 14 + 2 * 6, n  # diffusers' Linears per double / single block
    model = copy.deepcopy(base)
    model.add_adapter(flux.lora_config(False))
    with torch.no_grad():
        for _, parts in flux.linear_groups():
            for p in parts:
                layer = peft_layer(model, p)
                layer.lora_A["default"].weight.copy_(case[f"peft.{p}.lora_A"])
                layer.lora_B["default"].weight.copy_(case[f"peft.{p}.lora_B"])
    for name, p in model.named_parameters():
        p.requires_grad_(".lora_" in name)
    model.train()
    inputs = {k: case[k] for k in ("latents", "context", "pooled", "timestep", "img_ids", "txt_ids", "guidance",
                                   "packed")}
    out_packed = flux.diffusers_forward(model, inputs)
    loss = F.mse_loss(out_packed, case["target"])
    loss.backward()
    out = {"output": unpack_flux_latents(out_packed.detach(), flux.H, flux.W), "loss": loss.detach().reshape(())}
    for bfl, parts in flux.linear_groups():
        layers = [peft_layer(model, p) for p in parts]
        out[f"grad.bfl.{bfl}.lora_down"] = torch.stack([l.lora_A["default"].weight.grad for l in layers]).sum(0)
        out[f"grad.bfl.{bfl}.lora_up"] = torch.cat([l.lora_B["default"].weight.grad for l in layers], 0)
    meta = metadata()
    meta["float8"] = "e4m3fn per-row scales on every block Linear; base computes in f32 with codes * scale"
    write_f32(out, os.path.join(flux.OUT_DIR, "dev_float8_lora_case.safetensors"), meta)
    print(f"dev_float8_lora_case: loss {loss.item():.6f} (unquantized base: {case['loss'].item():.6f}), output "
          f"change vs the bf16/f32 LoRA case {rel_err(out['output'], case['output']):.3g}")

    bfl = load_file(os.path.join(flux.OUT_DIR, "dev_bfl.safetensors"))
    stored = {}
    for name, t in bfl.items():
        is_block_linear = (name.startswith(("double_blocks.", "single_blocks.")) and name.endswith(".weight")
                           and t.dim() == 2)
        if is_block_linear:
            codes, scale = quantize_e4m3(t)
            stored[name] = codes
            stored[name[: -len(".weight")] + ".weight_scale"] = scale
        else:
            stored[name] = t
    path = os.path.join(flux.OUT_DIR, "dev_bfl_float8.safetensors")
    save_file({k: v.contiguous() for k, v in stored.items()}, path, metadata=metadata())  # F8_E4M3 kept
    sort_metadata(path)
    n_f8 = sum(1 for t in stored.values() if t.dtype == F8)
    print(f"dev_bfl_float8: {n_f8} F8_E4M3 weights with per-row weight_scale")


if __name__ == "__main__":
    main()
