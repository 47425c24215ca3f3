#!/usr/bin/env python3
"""Writes tests/data/float8/conversion.safetensors for tests/runtime/float8_test.cpp: PyTorch's
float8_e4m3fn conversions, which runtime/float8.h must reproduce bit for bit, and the weight
quantizer of runtime/ops/float8.h (per-row and per-tensor scales) computed with torch.

Reference: torch's own conversions, `tensor.to(torch.float8_e4m3fn)` and
`codes.view(torch.float8_e4m3fn).to(torch.float32)` on the CPU.

Tensors (f32 values are stored as their I32 bit patterns, so NaN payloads survive):
  decoded       i32 [256]  bits of e4m3 code c (c = 0..255) as f32
  values        i32 [N]    f32 inputs: edges (±0, NaN with several payloads, ±inf, f32 subnormals), every
                           e4m3 value, every midpoint between neighbours and the f32 values next to it,
                           the saturation boundary (448, 464, 480 and their neighbours), random values
                           at scales 2^-14 .. 2^10
  plain         u8  [N]    values.to(float8_e4m3fn)  (torch 2.15 saturates finite values past ±448 and ±inf
                           to ±448 and keeps NaN, although c10's scalar routine would give NaN there)
  saturated     u8  [N]    values.clamp(-448, 448).to(float8_e4m3fn)  (the quantizer's form; equal to plain)
  weight        f32 [37, 53]  rows at different scales, one row of zeros, one with a single nonzero
  weight_bf16   bf16 [37, 53] weight rounded to bf16
  row_codes, row_scale      u8 [37, 53], f32 [37]  per-row quantization of `weight` (the quantizer below)
  tensor_codes, tensor_scale u8 [37, 53], f32 [1]  per-tensor quantization of `weight`
  row_codes_bf16, row_scale_bf16  the same per row from weight_bf16 (converted to f32 first)
  row_dequant_f32  f32 [37, 53]  row_codes.float() * row_scale[:, None]
  row_dequant_bf16 bf16 [37, 53] the same rounded to bf16

The quantizer (what runtime/ops/float8.cpp implements; reference_torch.quantize_e4m3, which the float8 LoRA
fixtures use too):
  w32 = w.float(); amax = w32.abs().amax(dim=1 per row | all per tensor)
  scale = where(amax > 0, amax / 448, 1)            (f32 division)
  codes = (w32 / scale).clamp(-448, 448).to(float8_e4m3fn)   (f32 division, then the saturating conversion)
Run from the repository root with a torch venv:  /tmp/venv/bin/python tests/reference/make_float8_fixtures.py
"""
import os

import torch
from safetensors.torch import save_file

from reference_common import data_dir
from reference_torch import F8, generator_metadata, quantize_e4m3

OUT = os.path.join(data_dir("float8"), "conversion.safetensors")


def bits_of(f32):
    return f32.contiguous().view(torch.int32)


def f32_from_bits(ints):
    return torch.tensor(ints, dtype=torch.int64).to(torch.int32).view(torch.float32)


def quantize(w, per_row):
    codes, scale = quantize_e4m3(w, per_row)
    return codes.view(torch.uint8), scale


def main():
    torch.manual_seed(20)
    codes = torch.arange(256, dtype=torch.uint8)
    decoded = codes.view(F8).to(torch.float32)

    parts = []
    # Edges: zeros, infinities, NaNs with several payloads and signs, f32 subnormals and extremes.
    parts.append(f32_from_bits([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
                                0x7F800001, 0x7FBFFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 0x00000001, 0x80000001,
                                0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF]))
    # Every finite e4m3 value, the midpoints between neighbours, and the f32 values around them.
    finite = decoded[torch.isfinite(decoded)]
    positive = torch.unique(finite[finite >= 0])
    mids = (positive[1:].double() + positive[:-1].double()).div(2).float()
    grid = torch.cat([positive, mids, torch.tensor([464.0, 480.0, 512.0, 1e4, 3.0e38])])
    around = torch.cat([grid, torch.nextafter(grid, torch.full_like(grid, float("inf"))),
                        torch.nextafter(grid, torch.full_like(grid, -float("inf")))])
    parts.append(around)
    parts.append(-around)
    # The subnormal range of e4m3 and the f32 values that round into it or to zero.
    parts.append(torch.linspace(0, 2.0 ** -6, 2001))
    parts.append(-torch.linspace(0, 2.0 ** -5, 1001))
    # Random values at many scales.
    for exponent in range(-14, 11, 2):
        parts.append(torch.randn(1024) * 2.0 ** exponent)
    parts.append((torch.rand(4096) * 2 - 1) * 500)
    values = torch.cat([p.to(torch.float32).reshape(-1) for p in parts])
    plain = values.to(F8).view(torch.uint8)
    saturated = values.clamp(-448.0, 448.0).to(F8).view(torch.uint8)

    rows, cols = 37, 53
    weight = torch.randn(rows, cols) * torch.logspace(-6, 2, rows, base=2.0).reshape(rows, 1)
    weight[5] = 0.0
    weight[9] = 0.0
    weight[9, 7] = -3.25
    weight[11, 3] = 200.0  # one outlier in a small row
    weight_bf16 = weight.to(torch.bfloat16)
    row_codes, row_scale = quantize(weight, True)
    tensor_codes, tensor_scale = quantize(weight, False)
    row_codes_bf16, row_scale_bf16 = quantize(weight_bf16, True)
    row_dequant = row_codes.view(F8).float() * row_scale.reshape(-1, 1)

    tensors = {
        "decoded": bits_of(decoded),
        "values": bits_of(values),
        "plain": plain.contiguous(),
        "saturated": saturated.contiguous(),
        "weight": weight.contiguous(),
        "weight_bf16": weight_bf16.contiguous(),
        "row_codes": row_codes.contiguous(),
        "row_scale": row_scale.contiguous(),
        "tensor_codes": tensor_codes.contiguous(),
        "tensor_scale": tensor_scale.contiguous(),
        "row_codes_bf16": row_codes_bf16.contiguous(),
        "row_scale_bf16": row_scale_bf16.contiguous(),
        "row_dequant_f32": row_dequant.contiguous(),
        "row_dequant_bf16": row_dequant.to(torch.bfloat16).contiguous(),
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    save_file(tensors, OUT, metadata=generator_metadata(__file__))
    print(f"wrote {OUT}: {values.numel()} values")


if __name__ == "__main__":
    main()
