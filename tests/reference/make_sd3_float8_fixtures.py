#!/usr/bin/env python3
"""Writes tests/data/sd3/medium_float8_lora_case.safetensors and medium_float8_dora_case.safetensors: the LoRA case of
medium_lora_case.safetensors and the DoRA case of medium_dora_case.safetensors (same inputs, target, lora_A / lora_B,
DoRA magnitudes) run on the medium base whose joint-block Linears are float8, dequantized the way wick does
(model.quantize: float8, per-row scales). DoRA's weight norm is that of the dequantized weight plus the update.

Quantization (runtime/ops/float8.h; reference_torch.quantize_e4m3, as make_float8_fixtures.py): per output row,
amax = max |w| in f32, scale = amax / 448 (1 for a zero row), codes = e4m3(clamp(w / scale, -448, 448))
(torch.float8_e4m3fn); the base then computes with codes.float() * scale (f32). Quantized: every nn.Linear inside
diffusers' transformer_blocks (SAI's joint_blocks.*: 47 diffusers Linears, 31 SAI modules); x_embedder, the
embedders, context_embedder and the final layer stay f32. Per-row scales are row-local, so quantizing diffusers'
separate to_q / to_k / to_v equals quantizing SAI's fused qkv, and the last block's (shift, scale) half swap commutes
with it.

Tensors: output [2, 16, 8, 8] (square latents), loss [], grad.sai.<SAI Linear>.lora_down / lora_up (and .magnitude
for DoRA; fused as in medium_lora_case, SAI's row order); the f32 inputs, factors and magnitudes are those of
medium_lora_case / medium_dora_case (not repeated).

Made with torch 2.15.0, diffusers 0.42.1, peft 0.21.2, on the CPU, one thread, float32. Run from the repository
root: /tmp/venv/bin/python tests/reference/make_sd3_float8_fixtures.py
"""
import copy
import json
import os
import sys

import torch
import torch.nn.functional as F
from peft import LoraConfig
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_sd3_fixtures as sd3  # noqa: E402  (the tiny models' tables and forward)
from reference_torch import deterministic_torch, peft_layer, quantize_linears, rel_err, write_f32  # noqa: E402

BLOCK_PREFIX = "transformer_blocks."


def lora_run(base, case, targets, use_dora):
    """PEFT LoRA / DoRA with the case's factors (and magnitudes) on a copy of `base`: the model after backward, the
    output and the loss."""
    model = copy.deepcopy(base)
    model.add_adapter(LoraConfig(r=sd3.RANK, lora_alpha=sd3.ALPHA, lora_dropout=0.0, use_dora=use_dora,
                                 target_modules=targets, init_lora_weights=True))
    with torch.no_grad():
        for p in targets:
            layer = peft_layer(model, p)
            layer.lora_A["default"].weight.copy_(case[f"peft.{p}.lora_A"])
            layer.lora_B["default"].weight.copy_(case[f"peft.{p}.lora_B"])
            if use_dora:
                layer.lora_magnitude_vector["default"].weight.copy_(case[f"peft.{p}.lora_magnitude_vector"])
    for name, p in model.named_parameters():
        p.requires_grad_(".lora_" in name)
    model.train()  # train mode disables PEFT's DoRA cache
    out = sd3.diffusers_forward(model, case, case["latents_square"])
    loss = F.mse_loss(out, case["target"])
    loss.backward()
    return model, out, loss


def main():
    deterministic_torch()
    num_layers, dual, _, _ = sd3.VARIANTS["medium"]
    cases = {kind: load_file(os.path.join(sd3.OUT_DIR, f"medium_{kind}_case.safetensors")) for kind in ("lora", "dora")}
    base = sd3.SD3Transformer2DModel.from_pretrained(os.path.join(sd3.OUT_DIR, "medium_diffusers"))
    base = base.float().eval()
    targets = sd3.target_modules(num_layers, dual)
    # Unquantized, the same adapters give back the committed cases: the factors are put where they belong.
    for kind, case in cases.items():
        _, out, _ = lora_run(base, case, targets, kind == "dora")
        assert rel_err(out, case["output"]) <= 1e-6, (kind, rel_err(out, case["output"]))
    n = quantize_linears(base, BLOCK_PREFIX)
    assert n == len(targets) == 47, (n, len(targets))
    for kind, case in cases.items():
        use_dora = kind == "dora"
        model, out, loss = lora_run(base, case, targets, use_dora)
        result = {"output": out.detach(), "loss": loss.detach().reshape(())}
        for sai, parts, swap in sd3.linear_groups(num_layers, dual):
            layers = [peft_layer(model, p) for p in parts]
            rows = sd3.swap_halves if swap else (lambda t: t)
            result[f"grad.sai.{sai}.lora_down"] = torch.stack([l.lora_A["default"].weight.grad for l in layers]).sum(0)
            result[f"grad.sai.{sai}.lora_up"] = rows(torch.cat([l.lora_B["default"].weight.grad for l in layers], 0))
            if use_dora:
                result[f"grad.sai.{sai}.magnitude"] = rows(
                    torch.cat([l.lora_magnitude_vector["default"].weight.grad for l in layers], 0))
        meta = sd3.base_metadata()
        meta["generator"] = "tests/reference/make_sd3_float8_fixtures.py"
        meta["float8"] = "e4m3fn per-row scales on every joint-block Linear; base computes in f32 with codes * scale"
        meta["lora"] = json.dumps({"r": sd3.RANK, "lora_alpha": sd3.ALPHA, "use_dora": use_dora,
                                   "scale_baked_in": False}, sort_keys=True)
        write_f32(result, os.path.join(sd3.OUT_DIR, f"medium_float8_{kind}_case.safetensors"), meta)
        print(f"medium_float8_{kind}_case: loss {loss.item():.6f} (unquantized base: {case['loss'].item():.6f}), "
              f"output change vs the f32 case {rel_err(result['output'], case['output']):.3g}")


if __name__ == "__main__":
    main()
