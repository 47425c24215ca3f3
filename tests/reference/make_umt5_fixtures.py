#!/usr/bin/env python3
"""Generates tests/data/umt5/: a tiny random umT5 encoder (transformers' UMT5EncoderModel, the architecture of Wan
2.x's text encoder umt5-xxl) and its outputs on padded token batches. See tests/data/umt5/README.md.

Made with (pip, CPU only): torch 2.15.0, transformers 5.24.0, safetensors 0.8.0, Python 3. Run from the repository
root:
    /tmp/venv/bin/pip install torch transformers safetensors
    /tmp/venv/bin/python tests/reference/make_umt5_fixtures.py
Deterministic: one thread, torch.use_deterministic_algorithms(True), seeded generators; a rerun rewrites
byte-identical files (safetensors metadata keys sorted).

Encoder: UMT5Config(vocab_size=384, d_model=64, d_kv=16, d_ff=96, num_layers=2, num_heads=4,
relative_attention_num_buckets=32, relative_attention_max_distance=128, is_gated_act=True, dense_act_fn="gelu_new",
feed_forward_proj="gated-gelu", layer_norm_epsilon=1e-6, dropout_rate=0) in UMT5EncoderModel (94,784 parameters):
every block has its own relative_attention_bias [32, 4]. torch.manual_seed(0), then every weight redrawn from a
seeded generator: Linear weights N(0, 1/fan_in), the embedding N(0, 1), the relative attention biases N(0, 1), the
layer norms 1 + 0.2 N(0, 1). Saved with save_pretrained (one model.safetensors, f32, transformers' names: shared.weight,
encoder.block.N.layer.0.SelfAttention.{q,k,v,o,relative_attention_bias}.weight, ..., encoder.final_layer_norm.weight;
the layout of ComfyUI's umt5_xxl_fp16.safetensors).

Case `pad`: ids [2, 48] (random ids 1..383, the second prompt 30 tokens long then id 0 padding), mask [2, 48]; relative
distances reach 47 (> 8 exact buckets: the logarithmic buckets are used). Outputs last_hidden_state with the mask
(`pad.masked`) and without (`pad.unmasked`) from the f32 model; `bf16_rel_err` [2] = transformers' own bf16 model
(model.to(torch.bfloat16)) against them, max|bf16 - f32| / max|f32|.

Measured (this script's last run): transformers' bf16 vs f32: masked 2.35e-2, unmasked 2.16e-2.
"""
import os

import torch
import transformers
from transformers import UMT5Config, UMT5EncoderModel

from reference_common import print_file_sizes, require_repo_root
from reference_torch import deterministic_torch, generator_metadata, rel_err, save_sorted

OUT = os.path.join("tests", "data", "umt5")


def redraw(model, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if "layer_norm" in name:
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=gen))
            elif name == "shared.weight" or "relative_attention_bias" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5)


def main():
    require_repo_root()
    deterministic_torch()
    os.makedirs(OUT, exist_ok=True)
    for name in ("model.safetensors", "config.json", "generation_config.json", "cases.safetensors"):
        if os.path.exists(os.path.join(OUT, name)):
            os.remove(os.path.join(OUT, name))
    config = UMT5Config(vocab_size=384, d_model=64, d_kv=16, d_ff=96, num_layers=2, num_heads=4,
                        relative_attention_num_buckets=32, relative_attention_max_distance=128, is_gated_act=True,
                        dense_act_fn="gelu_new", feed_forward_proj="gated-gelu", layer_norm_epsilon=1e-6,
                        dropout_rate=0.0)
    torch.manual_seed(0)
    model = UMT5EncoderModel(config)
    redraw(model, 5)
    model.eval()
    print(f"  parameters: {sum(p.numel() for p in model.parameters()):,}")
    model.save_pretrained(OUT)

    gen = torch.Generator().manual_seed(11)
    ids = torch.randint(1, 384, (2, 48), generator=gen)
    mask = torch.ones(2, 48, dtype=torch.int64)
    ids[1, 30:] = 0
    mask[1, 30:] = 0
    model16 = UMT5EncoderModel(config)
    model16.load_state_dict(model.state_dict())
    model16 = model16.to(torch.bfloat16).eval()
    out = {"pad.ids": ids, "pad.mask": mask}
    errs = []
    with torch.no_grad():
        for name, m in (("masked", mask), ("unmasked", None)):
            ref = model(input_ids=ids, attention_mask=m).last_hidden_state
            out[f"pad.{name}"] = ref.float().contiguous()
            half = model16(input_ids=ids, attention_mask=m).last_hidden_state
            errs.append(rel_err(half, ref))
    out["bf16_rel_err"] = torch.tensor(errs, dtype=torch.float32)
    print("  transformers bf16 vs f32: masked %.2e, unmasked %.2e" % tuple(errs))
    save_sorted(out, os.path.join(OUT, "cases.safetensors"), generator_metadata(__file__, transformers))
    print_file_sizes(OUT)


if __name__ == "__main__":
    main()
