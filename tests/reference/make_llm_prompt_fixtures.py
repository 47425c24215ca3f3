#!/usr/bin/env python3
"""Generates tests/data/llm_prompts/: the prompt embeddings diffusers' pipelines hand their transformers, computed by
the pipelines' own encode_prompt code on tiny random text encoders (Qwen3, Mistral, Qwen2.5-VL) with the truncated
real tokenizers of tests/data/bpe. See tests/data/llm_prompts/README.md for every tensor.

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
test writes the full file. Linear weights N(0, 1/fan_in), biases N(0, 0.1^2), RMSNorm weights
1 + 0.2 N(0, 1).

Mistral (FLUX.2 dev): MistralModel(MistralConfig(vocab_size=5000 (the truncated tekken.json's), hidden_size=16,
intermediate_size=32, num_hidden_layers=31, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
rms_norm_eps=1e-5, rope_theta=1e9)): hidden_states[10], [20], [30] at their real indices.
Qwen2.5-VL (Qwen-Image): Qwen2_5_VLForConditionalGeneration, text vocab 151936, hidden 16, intermediate 32,
4 layers, 2 / 1 heads of 8, q/k/v biases, eps 1e-6, theta 1e6, mrope_section [2, 1, 1]; a depth-1 vision tower
(not stored). Every encoder stores its text model with model.* names and the used embedding rows as above.

The references are the pipelines' functions called on a stand-in `self` holding the tokenizer and the encoder:
  zimage.<i>       ZImagePipeline._encode_prompt(prompts, max_sequence_length=512)[i]: [L_i, 16], Qwen3
                   hidden_states[-2] of the chat template (enable_thinking=True), padding rows dropped.
  klein.embeds     Flux2KleinPipeline.encode_prompt(prompts)[0]: [B, 512, 48], hidden_states 9 | 18 | 27 per token,
                   right-padded to 512 with <|endoftext|> (pad rows included).
  klein.mask       [B, 512] I64: the attention mask the pipeline gives the encoder.
  dev.embeds       Flux2Pipeline._get_mistral_3_small_prompt_embeds(mistral, TekkenChat, prompts,
                   max_sequence_length=128): [B, 128, 48], hidden_states 10 | 20 | 30, left-padded with <pad> (11).
                   TekkenChat stands in for the pipeline's processor (below); 128 instead of 512 keeps the file small.
  dev.mask         [B, 128] I64: its attention mask.
  qwenimage.embeds QwenImagePipeline.encode_prompt(prompts, max_sequence_length=512)[0]: [B, 512, 16], the last
                   hidden state (final norm) with padding removed, 34 rows dropped, zero-padded to the longest.
  qwenimage.mask   [B, 512] I64: the pipeline's prompt_embeds_mask.
"""
import json
import os
import types

from reference_common import print_file_sizes, require_repo_root, single_threaded_tokenizers

single_threaded_tokenizers()

import torch  # noqa: E402
from diffusers import Flux2KleinPipeline, Flux2Pipeline, QwenImagePipeline, ZImagePipeline  # noqa: E402
from diffusers.pipelines.flux2.system_messages import SYSTEM_MESSAGE  # noqa: E402
from transformers import (AutoTokenizer, MistralConfig, MistralModel, Qwen2_5_VLConfig,  # noqa: E402
                          Qwen2_5_VLForConditionalGeneration, Qwen3Config, Qwen3ForCausalLM)
from transformers.integrations.mistral.tokenizer import convert_tekken_tokenizer  # noqa: E402

from reference_torch import deterministic_torch, save_sorted  # noqa: E402

OUT = os.path.join("tests", "data", "llm_prompts")
QWEN_VOCAB = 151936

LONG = ("A sprawling harbour town at dusk, fishing boats with red sails moored along a stone quay, gulls circling "
        "above crates of silver fish, lanterns flickering on in crooked windows, a lighthouse on the far cliff. ")
DEV_LENGTH = 128  # FLUX.2 dev's max_sequence_length here (512 in the pipeline): keeps the reference small
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
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5)


class TekkenChat:
    """Stands in for FLUX.2 dev's processor: apply_chat_template renders Mistral Small 3's template for the
    system + user messages of diffusers' format_input ("<s>[SYSTEM_PROMPT]...[/SYSTEM_PROMPT][INST]...[/INST]",
    as tests/reference/make_bpe_fixtures.py checks it against mistral_common) and tokenizes it with the converted
    Tekken tokenizer, left-padded as the real processor is."""

    def __init__(self, path):
        self.tok = convert_tekken_tokenizer(path, chat_template="")

    def render(self, messages):
        system, user = messages
        assert system["role"] == "system" and user["role"] == "user"
        return ("<s>[SYSTEM_PROMPT]" + system["content"][0]["text"] + "[/SYSTEM_PROMPT][INST]"
                + user["content"][0]["text"] + "[/INST]")

    def apply_chat_template(self, batch, add_generation_prompt, tokenize, return_dict, return_tensors, padding,
                            truncation, max_length):
        assert not add_generation_prompt and tokenize and return_dict
        return self.tok([self.render(m) for m in batch], padding=padding, truncation=truncation,
                        max_length=max_length, padding_side="left", add_special_tokens=False,
                        return_tensors=return_tensors)


def save_encoder(model_state, used, vocab, path, meta):
    weights = {}
    for name, p in model_state.items():
        if "embed" in name:
            embed = p
            continue
        weights["model." + name] = p.float()
    weights["embed_rows.ids"] = torch.tensor(used, dtype=torch.int64)
    weights["embed_rows.weight"] = embed[used].float()
    save_sorted(weights, path, dict(meta, vocab_size=str(vocab)))


def flux2_dev(out):
    chat = TekkenChat(os.path.join("tests", "data", "bpe", "tekken.json"))
    texts = [chat.render(m) for m in __import__("diffusers").pipelines.flux2.pipeline_flux2.format_input(PROMPTS)]
    used = sorted(set(sum((chat.tok(t, add_special_tokens=False)["input_ids"] for t in texts), [])) | {11})
    vocab = len(chat.tok)
    config = MistralConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=31,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=8, rms_norm_eps=1e-5,
                           rope_theta=1e9)
    model = MistralModel(config).eval()
    redraw(model, used, 2)
    with torch.no_grad():
        embeds = Flux2Pipeline._get_mistral_3_small_prompt_embeds(
            model, chat, list(PROMPTS), device=torch.device("cpu"), max_sequence_length=DEV_LENGTH,
            system_message=SYSTEM_MESSAGE)
    out["dev.embeds"] = embeds.float().contiguous()
    mask = chat.apply_chat_template([m for m in __import__("diffusers").pipelines.flux2.pipeline_flux2.format_input(
        PROMPTS)], False, True, True, "pt", "max_length", True, DEV_LENGTH)["attention_mask"]
    out["dev.mask"] = mask.to(torch.int64)
    print(f"  dev: {tuple(embeds.shape)}, real tokens {mask.sum(1).tolist()}, vocab {vocab}")
    save_encoder(model.state_dict(), used, vocab, os.path.join(OUT, "mistral.safetensors"), {"head_dim": "8"})


# QwenImagePipeline.__init__'s prompt_template_encode (set there, so the stand-in gets a copy).
QWEN_IMAGE_TEMPLATE = ("<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, "
                       "text, spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n{}"
                       "<|im_end|>\n<|im_start|>assistant\n")


def qwen_image_tokenizer():
    import shutil
    import tempfile
    tmp = tempfile.mkdtemp()
    for f in os.listdir(os.path.join("tests", "data", "bpe", "qwen_image")):
        shutil.copy(os.path.join("tests", "data", "bpe", "qwen_image", f), tmp)
    for f in ("vocab.json", "merges.txt"):
        shutil.copy(os.path.join("tests", "data", "bpe", "qwen3", f), tmp)
    return AutoTokenizer.from_pretrained(tmp)


def qwen_image(out):
    tokenizer = qwen_image_tokenizer()
    stand_in = types.SimpleNamespace(tokenizer=tokenizer, tokenizer_max_length=1024,
                                     prompt_template_encode_start_idx=34, _execution_device=torch.device("cpu"))
    stand_in.prompt_template_encode = QWEN_IMAGE_TEMPLATE
    used = set()
    for prompt in PROMPTS:
        used.update(tokenizer(QWEN_IMAGE_TEMPLATE.format(prompt), max_length=1058, truncation=True)["input_ids"])
    used = sorted(used | {tokenizer.pad_token_id})
    text = dict(vocab_size=QWEN_VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=4,
                num_attention_heads=2, num_key_value_heads=1, rms_norm_eps=1e-6,
                rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 1, 1]})
    vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=16, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2, fullatt_block_indexes=[0], window_size=112)
    config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False,
                              attn_implementation="sdpa")
    model = Qwen2_5_VLForConditionalGeneration(config).eval()
    redraw(model.model.language_model, used, 3)
    stand_in.text_encoder = model
    stand_in._extract_masked_hidden = QwenImagePipeline._extract_masked_hidden.__get__(stand_in)
    stand_in._get_qwen_prompt_embeds = QwenImagePipeline._get_qwen_prompt_embeds.__get__(stand_in)
    with torch.no_grad():
        embeds, mask = QwenImagePipeline.encode_prompt(stand_in, list(PROMPTS), device=torch.device("cpu"),
                                                       max_sequence_length=512)
    out["qwenimage.embeds"] = embeds.float().contiguous()
    out["qwenimage.mask"] = mask.to(torch.int64).contiguous()
    print(f"  qwenimage: {tuple(embeds.shape)}, kept rows {mask.sum(1).tolist()}")
    save_encoder(model.model.language_model.state_dict(), used, QWEN_VOCAB,
                 os.path.join(OUT, "qwen2vl.safetensors"), {"head_dim": "8"})


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

    flux2_dev(out)
    qwen_image(out)
    meta = {"prompts": json.dumps(PROMPTS, ensure_ascii=False)}
    save_sorted(out, os.path.join(OUT, "cases.safetensors"), meta)

    save_encoder(model.model.state_dict(), used, QWEN_VOCAB, os.path.join(OUT, "qwen3.safetensors"), {"head_dim": "8"})
    print_file_sizes(OUT)


if __name__ == "__main__":
    main()
