#!/usr/bin/env python3
"""Generates tests/data/llm_prompts/: the prompt embeddings diffusers' pipelines hand their transformers, computed by
the pipelines' own encode_prompt code on a tiny random Qwen3 text encoder with the truncated real Qwen3 tokenizer of
tests/data/bpe/qwen3. See tests/data/llm_prompts/README.md for every tensor.

Made with (pip, CPU only): torch 2.15.0, transformers 5.24.0, tokenizers 0.23.3, diffusers 0.42.1, safetensors,
Python 3. Run from the repository root:
    /tmp/refvenv/bin/pip install torch transformers diffusers safetensors jinja2
    /tmp/refvenv/bin/python tests/reference/make_llm_prompt_fixtures.py
Deterministic: one thread, torch.use_deterministic_algorithms(True), seeded generator; a rerun rewrites
byte-identical files.

Encoder: Qwen3ForCausalLM(Qwen3Config(vocab_size=151936, hidden_size=16, intermediate_size=32, num_hidden_layers=28,
num_attention_heads=2, num_key_value_heads=1, head_dim=8, rms_norm_eps=1e-6, rope_theta=1e6,
tie_word_embeddings=True)), sdpa attention. 28 layers so that FLUX.2 klein's hidden_states[9], [18], [27] are raw
layer outputs at their real indices, and Z-Image's hidden_states[-2] is layer 27's output (layer 28 and the final
norm never needed). Real token ids reach 151668, so the embedding has the real vocabulary; only the rows of the ids
the prompts use are drawn (N(0, 1)), every other row is 0, and only the used rows are stored (embed_rows.*): the
test writes the full file. Linear weights N(0, 1/fan_in), RMSNorm weights 1 + 0.2 N(0, 1).

The references are the pipelines' functions called on a stand-in `self` holding the tokenizer and the encoder:
  zimage.<i>       ZImagePipeline._encode_prompt(prompts, max_sequence_length=512)[i]: [L_i, 16], Qwen3
                   hidden_states[-2] of the chat template (enable_thinking=True), padding rows dropped.
  klein.embeds     Flux2KleinPipeline.encode_prompt(prompts)[0]: [B, 512, 48], hidden_states 9 | 18 | 27 per token,
                   right-padded to 512 with <|endoftext|> (pad rows included).
  klein.mask       [B, 512] I64: the attention mask the pipeline gives the encoder.
"""
import json
import os
import types

from reference_common import print_file_sizes, require_repo_root, single_threaded_tokenizers

single_threaded_tokenizers()

import torch  # noqa: E402
from diffusers import Flux2KleinPipeline, ZImagePipeline  # noqa: E402
from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM  # noqa: E402

from reference_torch import deterministic_torch, save_sorted  # noqa: E402

OUT = os.path.join("tests", "data", "llm_prompts")
QWEN_VOCAB = 151936

LONG = ("A sprawling harbour town at dusk, fishing boats with red sails moored along a stone quay, gulls circling "
        "above crates of silver fish, lanterns flickering on in crooked windows, a lighthouse on the far cliff. ")
PROMPTS = ["A cat", "", "Ein Fuchs 🦊 springt über den 'faulen' Hund, 3 Mal!", LONG * 12]


def redraw(model, used_ids, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if "embed" in name:
                p.zero_()
                p[used_ids] = torch.randn((len(used_ids), p.shape[1]), generator=gen)
            elif "norm" in name:
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5)


def main():
    require_repo_root()
    deterministic_torch()
    os.makedirs(OUT, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(os.path.join("tests", "data", "bpe", "qwen3"))

    used = set()
    for prompt in PROMPTS:
        for thinking in (True, False):
            text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                                 add_generation_prompt=True, enable_thinking=thinking)
            used.update(tokenizer(text)["input_ids"])
    used.add(tokenizer.pad_token_id)
    used = sorted(used)

    config = Qwen3Config(vocab_size=QWEN_VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=28,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=8, rms_norm_eps=1e-6,
                         rope_theta=1e6, tie_word_embeddings=True)
    model = Qwen3ForCausalLM(config).eval()
    redraw(model, used, 1)

    out = {}
    with torch.no_grad():
        z_self = types.SimpleNamespace(tokenizer=tokenizer, text_encoder=model.model)
        z = ZImagePipeline._encode_prompt(z_self, list(PROMPTS), device=torch.device("cpu"), max_sequence_length=512)
        for i, e in enumerate(z):
            out[f"zimage.{i}"] = e.float().contiguous()
            print(f"  zimage {i}: {tuple(e.shape)}")
        k_self = types.SimpleNamespace(tokenizer=tokenizer, text_encoder=model,
                                       _get_qwen3_prompt_embeds=Flux2KleinPipeline._get_qwen3_prompt_embeds,
                                       _prepare_text_ids=Flux2KleinPipeline._prepare_text_ids)
        embeds, _ = Flux2KleinPipeline.encode_prompt(k_self, list(PROMPTS), device=torch.device("cpu"))
        out["klein.embeds"] = embeds.float().contiguous()
        masks = []
        for prompt in PROMPTS:
            text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                                 add_generation_prompt=True, enable_thinking=False)
            masks.append(tokenizer(text, padding="max_length", truncation=True, max_length=512,
                                   return_tensors="pt")["attention_mask"])
        out["klein.mask"] = torch.cat(masks).to(torch.int64)
        print(f"  klein: {tuple(embeds.shape)}, real tokens {out['klein.mask'].sum(1).tolist()}")

    meta = {"prompts": json.dumps(PROMPTS, ensure_ascii=False)}
    save_sorted(out, os.path.join(OUT, "cases.safetensors"), meta)

    weights = {}
    for name, p in model.model.state_dict().items():
        if "embed" in name:
            continue
        weights["model." + name] = p.float()
    weights["embed_rows.ids"] = torch.tensor(used, dtype=torch.int64)
    weights["embed_rows.weight"] = model.model.embed_tokens.weight[used].float()
    save_sorted(weights, os.path.join(OUT, "qwen3.safetensors"),
                {"vocab_size": str(QWEN_VOCAB), "head_dim": "8"})
    print_file_sizes(OUT)


if __name__ == "__main__":
    main()
