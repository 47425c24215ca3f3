#!/usr/bin/env python3
"""Writes tests/data/sdxl/float8_lora_case.safetensors and float8_dora_case.safetensors: the LoRA + LoCon case of
lora_case.safetensors (same inputs, target, lora_A / lora_B, the 3x3 convs at rank 2 / alpha 1, the rest at rank 4 /
alpha 8) and the DoRA case of dora_case.safetensors (the transformers' Linears, PEFT's magnitudes) run on the tiny
UNet whose block Linears are float8, dequantized the way wick does (model.quantize: float8, per-row scales).

Quantization (runtime/ops/float8.h; reference_torch.quantize_e4m3, as make_float8_fixtures.py): per output row,
amax = max |w| in f32, scale = amax / 448 (1 for a zero row), codes = e4m3(clamp(w / scale, -448, 448))
(torch.float8_e4m3fn); the base then computes with codes.float() * scale (f32). Quantized: every nn.Linear inside
diffusers' down_blocks, mid_block and up_blocks (sgm's input_blocks.*, middle_block, output_blocks.*: the resnets'
time_emb_proj = emb_layers.1, the transformers' proj_in / proj_out and their attention and feed-forward Linears).
Convolutions stay f32 (wick quantizes Linear layers only), as do time_embedding, add_embedding and the output head.

Tensors: output [2, 4, 16, 16] (square latents), loss [], grad.ldm.<LDM module>.lora_down / lora_up (and .magnitude
for DoRA); the f32 inputs, factors and magnitudes are those of lora_case / dora_case (not repeated).

Made with torch 2.15.0, diffusers 0.42.1, peft 0.21.2, on the CPU, one thread, float32. Run from the repository
root: /tmp/venv/bin/python tests/reference/make_sdxl_float8_fixtures.py
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
import make_sdxl_fixtures as sdxl  # noqa: E402  (the tiny UNet's tables and forward)
from reference_torch import deterministic_torch, peft_layer, quantize_linears, rel_err, write_f32  # noqa: E402

BLOCK_PREFIXES = ("down_blocks.", "mid_block.", "up_blocks.")


def case_targets(base, use_dora):
    """make_sdxl_fixtures.make_lora_case's modules: kohya's LoCon set, or for DoRA the transformers' Linears."""
    targets = sdxl.lora_targets(base, sdxl.module_table())
    if use_dora:
        targets = [t for t in targets if isinstance(base.get_submodule(t[0]), torch.nn.Linear) and ".attentions." in t[0]]
    return targets


def lora_run(base, case, targets, use_dora):
    """PEFT LoRA (+ LoCon) or DoRA with the case's factors on a copy of `base`: the model after backward, output, loss."""
    model = copy.deepcopy(base)
    names = [t[0] for t in targets]
    convs = [t[0] for t in targets if t[2]]
    model.add_adapter(LoraConfig(r=sdxl.RANK, lora_alpha=sdxl.ALPHA, lora_dropout=0.0, use_dora=use_dora,
                                 target_modules=names, init_lora_weights=True,
                                 rank_pattern={n: sdxl.CONV_RANK for n in convs},
                                 alpha_pattern={n: sdxl.CONV_ALPHA for n in convs}))
    with torch.no_grad():
        for name, ldm, _ in targets:
            layer = peft_layer(model, name)
            layer.lora_A["default"].weight.copy_(case[f"ldm.{ldm}.lora_down"])
            layer.lora_B["default"].weight.copy_(case[f"ldm.{ldm}.lora_up"])
            if use_dora:
                layer.lora_magnitude_vector["default"].weight.copy_(case[f"ldm.{ldm}.magnitude"])
    for name, p in model.named_parameters():
        p.requires_grad_(".lora_" in name)
    model.train()  # train mode disables PEFT's DoRA cache
    out = sdxl.diffusers_forward(model, case, case["latents_square"])
    loss = F.mse_loss(out, case["target"])
    loss.backward()
    return model, out, loss


def main():
    deterministic_torch()
    cases = {kind: load_file(os.path.join(sdxl.OUT_DIR, f"{kind}_case.safetensors")) for kind in ("lora", "dora")}
    base = sdxl.UNet2DConditionModel.from_pretrained(os.path.join(sdxl.OUT_DIR, "tiny_diffusers"),
                                                     torch_dtype=torch.float32).eval()
    targets = {kind: case_targets(base, kind == "dora") for kind in cases}
    # Unquantized, the same adapters give back the committed cases: the factors are put where they belong.
    for kind, case in cases.items():
        _, out, _ = lora_run(base, case, targets[kind], kind == "dora")
        assert rel_err(out, case["output"]) <= 1e-6, (kind, rel_err(out, case["output"]))
    n = quantize_linears(base, BLOCK_PREFIXES)
    # 17 transformer blocks x 10 Linears (attn1 and attn2 q, k, v, out; ff in and out) + 11 transformers x 2
    # projections + 17 resnets' time_emb_proj:
    n_linear = sum(1 for name, m in base.named_modules()
                   if isinstance(m, torch.nn.Linear) and name.startswith(BLOCK_PREFIXES))
    assert n == n_linear and n == 17 * 10 + 11 * 2 + 17, (n, n_linear)
    for kind, case in cases.items():
        use_dora = kind == "dora"
        model, out, loss = lora_run(base, case, targets[kind], use_dora)
        result = {"output": out.detach(), "loss": loss.detach().reshape(())}
        for name, ldm, _ in targets[kind]:
            layer = peft_layer(model, name)
            result[f"grad.ldm.{ldm}.lora_down"] = layer.lora_A["default"].weight.grad
            result[f"grad.ldm.{ldm}.lora_up"] = layer.lora_B["default"].weight.grad
            if use_dora:
                result[f"grad.ldm.{ldm}.magnitude"] = layer.lora_magnitude_vector["default"].weight.grad
        meta = sdxl.base_metadata()
        meta["generator"] = "tests/reference/make_sdxl_float8_fixtures.py"
        meta["float8"] = ("e4m3fn per-row scales on every Linear of input_blocks, middle_block and output_blocks; "
                          "convolutions f32; base computes in f32 with codes * scale")
        meta["lora"] = json.dumps({"r": sdxl.RANK, "lora_alpha": sdxl.ALPHA, "conv_r": sdxl.CONV_RANK,
                                   "conv_alpha": sdxl.CONV_ALPHA, "use_dora": use_dora, "scale_baked_in": False},
                                  sort_keys=True)
        write_f32(result, os.path.join(sdxl.OUT_DIR, f"float8_{kind}_case.safetensors"), meta)
        print(f"float8_{kind}_case: {len(targets[kind])} modules, {n} block Linears quantized; loss {loss.item():.6f} "
              f"(unquantized base: {case['loss'].item():.6f}), output change vs the f32 case "
              f"{rel_err(out, case['output']):.3g}")


if __name__ == "__main__":
    main()
