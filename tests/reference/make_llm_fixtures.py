#!/usr/bin/env python3
"""Generates tests/data/llm/: tiny random decoder-only language models of the three families wick runs as text
encoders (models/llm/), in the layouts their files use, with transformers' hidden states on padded batches.
See tests/data/llm/README.md for every file and tensor.

Made with (pip, CPU only): torch 2.15.0, transformers 5.24.0, safetensors 0.8.0, Python 3. Run from the repository
root:
    /tmp/venv/bin/pip install torch transformers safetensors
    /tmp/venv/bin/python tests/reference/make_llm_fixtures.py
Deterministic: one thread, torch.use_deterministic_algorithms(True), seeded generators; a rerun rewrites
byte-identical files (safetensors metadata keys sorted).

Models (attn_implementation "sdpa", the default; vocabularies of 256 rows keep the files small: the sizes come
from the weights):
  qwen3:   Qwen3ForCausalLM(Qwen3Config(vocab_size=256, hidden_size=32, intermediate_size=48, num_hidden_layers=6,
           num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6, rope_theta=1e6,
           tie_word_embeddings=True)): head_dim 16 != 32 / 4, q_norm / k_norm, tied embeddings (no lm_head saved).
  qwen2vl: Qwen2_5_VLForConditionalGeneration, text hidden 32, intermediate 48, 4 layers, 4 heads / 2 kv heads of 8,
           rms eps 1e-6, rope_theta 1e6, mrope_section [2, 1, 1] (sums to head_dim / 2); vision tower of depth 1
           (hidden 16, 2 heads, out_hidden 32), untied lm_head: names model.language_model.*, model.visual.*,
           lm_head.weight.
  mistral: Mistral3ForConditionalGeneration, text MistralConfig(vocab_size=256, hidden_size=16, intermediate_size=32,
           num_hidden_layers=31, num_attention_heads=4, num_key_value_heads=2, head_dim=8, rms_norm_eps=1e-5,
           rope_theta=1e9): 31 layers so that FLUX.2's hidden_states[10], [20], [30] exist at their real indices
           (and layer 30, the 31st, and the final norm are never needed); PixtralVisionConfig(hidden_size=32,
           intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, head_dim=16, image_size=56,
           patch_size=14): names model.language_model.*, model.vision_tower.*, model.multi_modal_projector.*,
           lm_head.weight.
After construction every weight is redrawn (seeded generator) so each one matters and activations stay O(1):
Linear weights N(0, 1/fan_in), biases N(0, 0.1^2), embeddings N(0, 1), every RMSNorm weight 1 + 0.2 N(0, 1).

Files:
  <family>/: save_pretrained(max_shard_size="40KB") in f32: sharded safetensors + model.safetensors.index.json,
             the names above (the layout of the Hugging Face repositories).
  qwen3_comfy_bf16.safetensors: ComfyUI's single-file layout of qwen_3_4b.safetensors (model.embed_tokens,
             model.layers.N..., model.norm; no lm_head), bf16.
  qwen3_fp8_scaled.safetensors: ComfyUI's scaled fp8 layout: every decoder Linear weight F8_E4M3 (per-tensor
             scale, wick's quantizer in reference_torch.quantize_e4m3) with `<linear>.weight_scale` f32 [] beside
             it and a `scaled_fp8` marker; embeddings and norms f32 (ComfyUI stores them bf16; f32 here keeps the
             reference exact).
  cases.safetensors: inputs and outputs (below).

Inputs: ids [3, 12] with lengths 12, 7, 3 (random ids < 256), as `right` (real tokens first) and `left` (real tokens
last) padded batches with their masks [3, 12] (1 = real); `single` = row 0 unpadded [1, 12].
Outputs for each family f and case c (f32 model unless named bf16):
  f.c.hs.K        hidden_states[K] (K = 0 embeddings .. n_layers - 1; the last entry, K = n_layers, is stored as
                  f.c.normed: transformers' last entry is the final-normed state); mistral stores K = 0, 10, 20, 30.
  f.c.normed      last_hidden_state (the final norm applied).
  f.c.bf16_rel_err  [n kept + 1] f32: transformers' own bf16 error, max|bf16 - f32| / max|f32|, of each stored
                  hidden state (in the order of K, then normed), the model cast with model.to(torch.bfloat16).
  qwen3fp8.c.*    the qwen3 model with its decoder Linear weights replaced by the dequantized float8 values (f32).
  qwen2vl.c.arange_rel_err  [5]: the Qwen2.5-VL model given explicit 1-D positions arange(L) against its default
                  (M-RoPE positions from get_rope_index) on the same stored tensors: 0 when text-only M-RoPE is 1-D RoPE.

Measured (this script's last run): transformers' own bf16 vs f32 error, largest over each case's stored states
(right / left / single): qwen3 1.97e-2 / 2.39e-2 / 1.73e-2, qwen2vl 1.59e-2 / 1.59e-2 / 1.59e-2, mistral 5.51e-2 /
5.97e-2 / 5.51e-2; Qwen2.5-VL with explicit arange positions vs its default M-RoPE positions: 0.0 on every stored
tensor.
"""
import os
import shutil

import torch
import transformers
from safetensors.torch import save_file
from transformers import (Mistral3Config, Mistral3ForConditionalGeneration, MistralConfig, PixtralVisionConfig,
                          Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen3Config, Qwen3ForCausalLM)

from reference_common import print_file_sizes, require_repo_root
from reference_torch import deterministic_torch, generator_metadata, quantize_e4m3, rel_err, save_sorted

OUT = os.path.join("tests", "data", "llm")
LENGTHS = [12, 7, 3]
L = 12
VOCAB = 256


def redraw(model, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight") or "layernorm" in name or name.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif "embed" in name and p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=gen))
            elif p.dim() >= 2:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=gen) / fan_in ** 0.5)
            else:
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=gen))


def inputs():
    gen = torch.Generator().manual_seed(7)
    tokens = [torch.randint(0, VOCAB, (n,), generator=gen) for n in LENGTHS]
    right = torch.zeros(3, L, dtype=torch.int64)
    left = torch.zeros(3, L, dtype=torch.int64)
    right_mask = torch.zeros(3, L, dtype=torch.int64)
    left_mask = torch.zeros(3, L, dtype=torch.int64)
    for i, t in enumerate(tokens):
        n = len(t)
        right[i, :n] = t
        right_mask[i, :n] = 1
        left[i, L - n:] = t
        left_mask[i, L - n:] = 1
    return {"right": (right, right_mask), "left": (left, left_mask),
            "single": (tokens[0][None, :].clone(), torch.ones(1, L, dtype=torch.int64))}


def hidden_states(model, ids, mask, position_ids=None):
    with torch.no_grad():
        kwargs = {"input_ids": ids, "attention_mask": mask, "output_hidden_states": True}
        if position_ids is not None:
            kwargs["position_ids"] = position_ids
        out = model(**kwargs)
    return out.hidden_states


def record(out, family, case, hs, keep, suffix=""):
    for k in keep:
        out[f"{family}.{case}{suffix}.hs.{k}"] = hs[k].float().contiguous()
    out[f"{family}.{case}{suffix}.normed"] = hs[-1].float().contiguous()


def run_family(out, family, model, keep, cases):
    model.eval()
    model_bf16 = type(model)(model.config)
    model_bf16.load_state_dict(model.state_dict())
    model_bf16 = model_bf16.to(torch.bfloat16).eval()
    for case, (ids, mask) in cases.items():
        hs = hidden_states(model, ids, mask)
        record(out, family, case, hs, keep)
        hs16 = hidden_states(model_bf16, ids, mask)
        errs = [rel_err(hs16[k], hs[k]) for k in keep] + [rel_err(hs16[-1], hs[-1])]
        out[f"{family}.{case}.bf16_rel_err"] = torch.tensor(errs, dtype=torch.float32)
        print(f"  {family} {case}: bf16 vs f32 rel err (kept layers, normed): "
              + ", ".join(f"{e:.2e}" for e in errs))


def qwen3(out, cases):
    config = Qwen3Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=6,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
                         rope_theta=1e6, tie_word_embeddings=True, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config)
    redraw(model, 1)
    model.tie_weights()
    model.eval()
    folder = os.path.join(OUT, "qwen3")
    model.save_pretrained(folder, max_shard_size="40KB")
    run_family(out, "qwen3", model, range(0, 6), cases)

    state = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_sorted({k: v.to(torch.bfloat16) for k, v in state.items()},
                os.path.join(OUT, "qwen3_comfy_bf16.safetensors"), {"format": "pt"})
    # The bf16 file as wick loads it into an f32 model: transformers with the bf16-rounded weights in f32.
    rounded = Qwen3ForCausalLM(config)
    rounded.load_state_dict({k: v.to(torch.bfloat16).float() for k, v in model.state_dict().items()})
    rounded.tie_weights()
    rounded.eval()
    for case, (ids, mask) in cases.items():
        record(out, "qwen3comfy", case, hidden_states(rounded, ids, mask), range(0, 6))

    # ComfyUI scaled fp8: decoder Linears as F8_E4M3 codes + a per-tensor weight_scale.
    fp8 = {}
    dequantized = dict(model.state_dict())
    for name, value in state.items():
        if ".layers." in name and name.endswith("proj.weight"):
            codes, scale = quantize_e4m3(value, per_row=False)
            fp8[name] = codes
            fp8[name[: -len("weight")] + "weight_scale"] = scale.reshape(())
            dequantized[name] = codes.float() * scale
        else:
            fp8[name] = value.float()
    fp8["scaled_fp8"] = torch.empty(0, dtype=torch.float8_e4m3fn)
    save_sorted(fp8, os.path.join(OUT, "qwen3_fp8_scaled.safetensors"), {"format": "pt"})
    quant = Qwen3ForCausalLM(config)
    quant.load_state_dict(dequantized)
    quant.tie_weights()
    quant.eval()
    for case, (ids, mask) in cases.items():
        record(out, "qwen3fp8", case, hidden_states(quant, ids, mask), range(0, 6))


def qwen2vl(out, cases):
    text = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, rms_norm_eps=1e-6,
                rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 1, 1]})
    vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2, fullatt_block_indexes=[0], window_size=112)
    config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False,
                              attn_implementation="sdpa")
    torch.manual_seed(0)
    model = Qwen2_5_VLForConditionalGeneration(config)
    redraw(model, 2)
    model.eval()
    model.save_pretrained(os.path.join(OUT, "qwen2vl"), max_shard_size="40KB")
    run_family(out, "qwen2vl", model, range(0, 4), cases)
    for case, (ids, mask) in cases.items():
        positions = torch.arange(L)[None, :].expand(ids.shape[0], L)
        hs = hidden_states(model, ids, mask, position_ids=positions)
        errs = [rel_err(hs[k], out[f"qwen2vl.{case}.hs.{k}"]) for k in range(0, 4)]
        errs.append(rel_err(hs[-1], out[f"qwen2vl.{case}.normed"]))
        out[f"qwen2vl.{case}.arange_rel_err"] = torch.tensor(errs, dtype=torch.float32)
        print(f"  qwen2vl {case}: default (M-RoPE) positions vs explicit arange: max rel err {max(errs):.2e}")


def mistral(out, cases):
    text = MistralConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=31,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, rms_norm_eps=1e-5,
                         rope_theta=1e9)
    vision = PixtralVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                 head_dim=16, image_size=56, patch_size=14)
    config = Mistral3Config(text_config=text, vision_config=vision, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = Mistral3ForConditionalGeneration(config)
    redraw(model, 3)
    model.eval()
    model.save_pretrained(os.path.join(OUT, "mistral"), max_shard_size="40KB")
    run_family(out, "mistral", model, [0, 10, 20, 30], cases)


def main():
    require_repo_root()
    deterministic_torch()
    for name in ("qwen3", "qwen2vl", "mistral"):
        shutil.rmtree(os.path.join(OUT, name), ignore_errors=True)
    os.makedirs(OUT, exist_ok=True)
    cases = inputs()
    out = {}
    for case, (ids, mask) in cases.items():
        out[f"{case}.ids"] = ids
        out[f"{case}.mask"] = mask
    qwen3(out, cases)
    qwen2vl(out, cases)
    mistral(out, cases)
    save_sorted(out, os.path.join(OUT, "cases.safetensors"), generator_metadata(__file__, transformers))
    print_file_sizes(OUT)


if __name__ == "__main__":
    main()
