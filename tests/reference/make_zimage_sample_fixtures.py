#!/usr/bin/env python3
"""Generates tests/data/zimage_sample/: what diffusers' ZImagePipeline makes from two prompts and given starting
noise with a tiny random Z-Image transformer, a tiny random Qwen3 text encoder with the real vocabulary and tokenizer,
and the committed tiny Flux VAE, so that wick's Z-Image sampler (Qwen3 hidden_states[-2] of the chat template ->
Euler over the shift-3 schedule, without CFG (Turbo) or with `pos + s (pos - neg)` (Base) -> the VAE decoder) can be
checked against it end to end. See tests/data/zimage_sample/README.md for every file and tensor.

Made with (pip, CPU only): torch 2.15.0, transformers 5.24.0, diffusers 0.42.1, peft 0.21.2 (imported by
make_zimage_fixtures.py, not used), safetensors, jinja2, Python 3. Run from the repository root:
    /tmp/refvenv/bin/python tests/reference/make_zimage_sample_fixtures.py
Everything runs on the CPU in float32, one thread, torch.use_deterministic_algorithms(True); weights and noise come
from seeded generators, so a rerun rewrites byte-identical files.

Components:
  transformer: ZImageTransformer2DModel(all_patch_size=(2,), all_f_patch_size=(1,), in_channels=16, dim=64,
               n_layers=2, n_refiner_layers=1, n_heads=2, n_kv_heads=2, norm_eps=1e-5, qk_norm=True, cap_feat_dim=16,
               rope_theta=256.0, t_scale=1000.0, axes_dims=[8, 12, 12], axes_lens=[256, 64, 64]), drawn by
               make_zimage_fixtures.build_model (every parameter random, the pad tokens included, rounded to
               bfloat16) and stored as a diffusers folder with one bfloat16 file; 16 = the Qwen3's width.
  text:        Qwen3ForCausalLM(Qwen3Config(vocab_size=151936, hidden_size=16, intermediate_size=32,
               num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1, head_dim=8, rms_norm_eps=1e-6,
               rope_theta=1e6, tie_word_embeddings=True)) drawn by make_llm_prompt_fixtures.redraw (only the embedding
               rows of the ids the pipeline's tokenization of every prompt here produces, the pad id included, are
               random; the others are 0); the pipeline gets its Qwen3Model (`.model`), as the real pipeline does.
               Stored by make_llm_prompt_fixtures.save_encoder (the used embedding rows only). Tokenizer:
               AutoTokenizer of tests/data/bpe/qwen3.
  vae:         tests/data/vae/flux_tiny/vae (AutoencoderKL, 16 latent channels, x2, scaling 0.3611, shift 0.1159).
  scheduler:   FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, use_dynamic_shifting=False, shift=3.0), the
               Z-Image-Turbo scheduler config, for every call.
Calls: ZImagePipeline(...)(PROMPTS, height=24, width=40, latents=<noise [2, 16, 12, 20]>, output_type="pt"), and the
  same with output_type="latent" for the final latents:
  turbo          num_inference_steps=8, guidance_scale=0.0 (no CFG), max_sequence_length=512;
  base           num_inference_steps=5, guidance_scale=4.0, negative_prompt=None (the pipeline encodes "" per
                 prompt), cfg_normalization=False, cfg_truncation=1.0;
  base_negative  as base with guidance_scale=3.0 and negative_prompt=["blurry, low quality"] * 2: the pipeline
                 asserts len(prompt) == len(negative_prompt), so one string for two prompts is refused.
The pipeline writes the chat-templated text back into the prompt lists it is given, so every call gets fresh lists.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_common import (print_file_sizes, print_total_size, require_repo_root,  # noqa: E402
                              single_threaded_tokenizers)

single_threaded_tokenizers()
import torch  # noqa: E402
import diffusers  # noqa: E402
import transformers  # noqa: E402
from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, ZImagePipeline  # noqa: E402
from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM  # noqa: E402

from make_llm_prompt_fixtures import QWEN_VOCAB, redraw, save_encoder  # noqa: E402
from make_zimage_fixtures import KWARGS as ZIMAGE_KWARGS, build_model  # noqa: E402
from reference_torch import deterministic_torch, rel_err, save_sorted, write_fp16_diffusers  # noqa: E402

OUT = os.path.join("tests", "data", "zimage_sample")
PROMPTS = ["a photo of a cat", "red stripes on a blue wall"]
NEGATIVE = "blurry, low quality"
NEGATIVES = ["", NEGATIVE]  # negative.<i>: "" is what negative_prompt=None encodes
HEIGHT, WIDTH = 24, 40  # pixels: latents 12 x 20 through the x2 VAE, 6 x 10 = 60 image tokens (64 with padding)
MAX_SEQUENCE_LENGTH = 512
TRANSFORMER = dict(ZIMAGE_KWARGS, cap_feat_dim=16)
TEXT = dict(vocab_size=QWEN_VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=4, num_attention_heads=2,
            num_key_value_heads=1, head_dim=8, rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=True)
SCHEDULER = dict(num_train_timesteps=1000, use_dynamic_shifting=False, shift=3.0)
CALLS = {
    "turbo": dict(num_inference_steps=8, guidance_scale=0.0),
    "base": dict(num_inference_steps=5, guidance_scale=4.0, negative_prompt=None, cfg_normalization=False,
                 cfg_truncation=1.0),
    "base_negative": dict(num_inference_steps=5, guidance_scale=3.0, negative_prompt=[NEGATIVE] * len(PROMPTS),
                          cfg_normalization=False, cfg_truncation=1.0),
}
TRANSFORMER_SEED, TEXT_SEED, NOISE_SEED = 2024, 5, 1


def chat_text(tokenizer, prompt):
    """The string ZImagePipeline._encode_prompt tokenizes."""
    return tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                         add_generation_prompt=True, enable_thinking=True)


def used_token_ids(tokenizer, texts):
    """Every id the pipeline's tokenization of `texts` produces (padded to max_sequence_length: the pad id too)."""
    used = set()
    for text in texts:
        used.update(tokenizer(chat_text(tokenizer, text), padding="max_length", max_length=MAX_SEQUENCE_LENGTH,
                              truncation=True)["input_ids"])
    return sorted(used)


class RecordingPipeline(ZImagePipeline):
    """ZImagePipeline that keeps what _encode_prompt returned on its last call (positive first, then negative)."""

    def _encode_prompt(self, prompt, *args, **kwargs):
        embeds = super()._encode_prompt(prompt, *args, **kwargs)
        self.encoded.append([e.detach().clone() for e in embeds])
        return embeds


def settings(name):
    call = dict(CALLS[name])
    return json.dumps(dict(call, max_sequence_length=MAX_SEQUENCE_LENGTH), sort_keys=True)


def run(pipe, name, prompts, noise, output_type):
    """One pipeline call with fresh prompt lists (the pipeline overwrites them with the templated text)."""
    call = dict(CALLS[name])
    if isinstance(call.get("negative_prompt"), list):
        call["negative_prompt"] = list(call["negative_prompt"][:len(prompts)])
    pipe.encoded = []
    with torch.no_grad():
        out = pipe(list(prompts), height=HEIGHT, width=WIDTH, latents=noise.clone(), output_type=output_type,
                   max_sequence_length=MAX_SEQUENCE_LENGTH, **call).images
    return out.float(), pipe.encoded


def main():
    require_repo_root()
    deterministic_torch()
    os.makedirs(OUT, exist_ok=True)

    tokenizer = AutoTokenizer.from_pretrained(os.path.join("tests", "data", "bpe", "qwen3"))
    used = used_token_ids(tokenizer, PROMPTS + NEGATIVES)
    qwen3 = Qwen3ForCausalLM(Qwen3Config(**TEXT)).eval()
    redraw(qwen3, used, TEXT_SEED)
    save_encoder(qwen3.model.state_dict(), used, QWEN_VOCAB, os.path.join(OUT, "qwen3.safetensors"),
                 {"head_dim": "8"})

    transformer = build_model(TRANSFORMER_SEED, TRANSFORMER)
    write_fp16_diffusers(transformer, os.path.join(OUT, "transformer"), torch.bfloat16)
    vae = AutoencoderKL.from_pretrained("tests/data/vae/flux_tiny/vae", torch_dtype=torch.float32).eval()

    pipe = RecordingPipeline(scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER), vae=vae,
                             text_encoder=qwen3.model, tokenizer=tokenizer, transformer=transformer)
    assert pipe.vae_scale_factor == 2

    h, w = HEIGHT // 2, WIDTH // 2
    noise = torch.randn(len(PROMPTS), 16, h, w, generator=torch.Generator().manual_seed(NOISE_SEED))
    cases = {"noise": noise}
    measured = {"tokens": {text: len(tokenizer(chat_text(tokenizer, text))["input_ids"])
                           for text in PROMPTS + NEGATIVES},
                "used_token_ids": len(used)}
    images_by_call, negatives = {}, {}
    for name in CALLS:
        images, encoded = run(pipe, name, PROMPTS, noise, "pt")
        sigmas = pipe.scheduler.sigmas.float().clone()
        timesteps = pipe.scheduler.timesteps.float().clone()
        latents, encoded_again = run(pipe, name, PROMPTS, noise, "latent")
        assert torch.equal(sigmas, pipe.scheduler.sigmas.float())
        assert images.shape == (len(PROMPTS), 3, HEIGHT, WIDTH) and torch.isfinite(images).all(), name
        assert latents.shape == noise.shape and torch.isfinite(latents).all(), name
        assert len(encoded) == len(encoded_again) == (1 if CALLS[name]["guidance_scale"] == 0 else 2), name
        for a, b in zip(sum(encoded, []), sum(encoded_again, [])):
            assert torch.equal(a, b)
        for i, e in enumerate(encoded[0]):
            if f"prompt.{i}" in cases:  # every call encodes the prompts the same way, bit for bit
                assert torch.equal(cases[f"prompt.{i}"], e), (name, i)
            cases[f"prompt.{i}"] = e.float().contiguous()
        if len(encoded) == 2:
            negative = NEGATIVE if CALLS[name]["negative_prompt"] else ""
            assert all(torch.equal(e, encoded[1][0]) for e in encoded[1]), name  # the same text for each prompt
            negatives[negative] = encoded[1][0].float().contiguous()

        # What the transformer is given as its timestep: (1000 - T) / 1000 in float32, T = 1000 sigma.
        t_model = (1000 - timesteps) / 1000
        singles = [run(pipe, name, PROMPTS[i:i + 1], noise[i:i + 1], "pt")[0] for i in range(len(PROMPTS))]
        measured[name] = {
            "batched_vs_single": rel_err(torch.cat(singles), images),
            "saturated_fraction": float(((images == 0) | (images == 1)).float().mean()),
            "image_std": float(images.std()),
            "latents_minus_noise_max": float((latents - noise).abs().max()),
            "t_model_minus_one_minus_sigma_max": float((t_model - (1 - sigmas[:-1])).abs().max()),
        }
        cases[f"{name}.images"] = images
        cases[f"{name}.latents"] = latents
        if name != "base_negative":
            cases[f"{name}.sigmas"] = sigmas
        else:
            assert torch.equal(sigmas, cases["base.sigmas"])
        images_by_call[name] = images
    for i, text in enumerate(NEGATIVES):
        cases[f"negative.{i}"] = negatives[text]

    # The encoder is causal and padded on the right: each text alone, unpadded, gives the pipeline's rows.
    unpadded = 0.0
    with torch.no_grad():
        for key, text in [(f"prompt.{i}", p) for i, p in enumerate(PROMPTS)] + [
                (f"negative.{i}", p) for i, p in enumerate(NEGATIVES)]:
            ids = tokenizer(chat_text(tokenizer, text), return_tensors="pt")["input_ids"]
            alone = qwen3.model(input_ids=ids, output_hidden_states=True).hidden_states[-2][0]
            unpadded = max(unpadded, rel_err(alone, cases[key]))
    measured["encoder_unpadded_vs_pipeline"] = unpadded

    # The three image sets differ from each other.
    names = list(CALLS)
    for a in range(len(names)):
        for b in range(a + 1, len(names)):
            d = float((images_by_call[names[a]] - images_by_call[names[b]]).abs().max())
            measured[f"{names[a]}_vs_{names[b]}_max"] = d
            assert d > 1e-2, (names[a], names[b], d)

    # Turbo's sigmas are MODELS2's shift-3 formula: sigma = 3 s / (1 + 2 s), s = linspace(1, 1/N, N), then 0.
    n = CALLS["turbo"]["num_inference_steps"]
    s = torch.linspace(1.0, 1.0 / n, n, dtype=torch.float64)
    expected = torch.cat([3 * s / (1 + 2 * s), torch.zeros(1, dtype=torch.float64)])
    turbo_sigma_err = float((cases["turbo.sigmas"].double() - expected).abs().max())
    assert turbo_sigma_err < 1e-6, turbo_sigma_err
    measured["turbo_sigmas_vs_formula_max"] = turbo_sigma_err

    metadata = {"prompts": json.dumps(PROMPTS), "negative_prompts": json.dumps(NEGATIVES),
                "size": json.dumps({"height": HEIGHT, "width": WIDTH}), "scheduler": json.dumps(SCHEDULER),
                "measured": json.dumps(measured, sort_keys=True),
                "versions": json.dumps({"torch": torch.__version__.split("+")[0], "diffusers": diffusers.__version__,
                                        "transformers": transformers.__version__})}
    metadata.update({name: settings(name) for name in CALLS})
    save_sorted(cases, os.path.join(OUT, "case.safetensors"), metadata)
    print_file_sizes(OUT)
    print_total_size(OUT)
    print(json.dumps(measured, indent=1, sort_keys=True))
    for k in sorted(cases):
        print(f"  {k}: {tuple(cases[k].shape)}")
    for k in ("turbo.sigmas", "base.sigmas"):
        print(f"  {k} = {[round(float(x), 6) for x in cases[k]]}")


if __name__ == "__main__":
    main()
