#!/usr/bin/env python3
"""Generates tests/data/qwenimage_sample/: what diffusers' QwenImagePipeline makes from given text rows and given
starting noise with the committed tiny Qwen-Image transformer (tests/data/qwenimage/transformer) and the committed tiny
Qwen-Image VAE (tests/data/qwenimage_vae/vae), with the real Qwen-Image scheduler config, so that wick's Qwen-Image
denoising loop (models/qwenimage/qwenimage_sampler.h: the dynamic exponential shift stretched to 0.02, Euler, true CFG
with the per-token norm rescale, the VAE's per-channel denormalization) can be checked against it. See
tests/data/qwenimage_sample/README.md for every tensor.

Made with (pip, CPU only): torch 2.15.0, diffusers 0.42.1, numpy 2.3.5, safetensors, Python 3. Run from the
repository root:
    /tmp/refvenv/bin/python tests/reference/make_qwenimage_sample_fixtures.py
Everything runs on the CPU in float32, one thread, torch.use_deterministic_algorithms(True); the text rows and the
noise come from seeded generators, so a rerun rewrites byte-identical files.

Components (no text encoder: the pipeline is given prompt_embeds / prompt_embeds_mask and the negative ones):
  transformer: QwenImageTransformer2DModel.from_pretrained("tests/data/qwenimage/transformer") in float32 (the tiny
               model of make_qwenimage_fixtures.py: 2 blocks, dim 64, text width 32; its bfloat16 file holds the f32
               values exactly).
  vae:         AutoencoderKLQwenImage.from_pretrained("tests/data/qwenimage_vae/vae") in float32 (base_dim 3, z_dim 16,
               x8, the real latents_mean / latents_std).
  scheduler:   FlowMatchEulerDiscreteScheduler(**SCHEDULER), Qwen/Qwen-Image's scheduler_config.json (MODELS2 section
               2.1).
Calls: QwenImagePipeline(...)(prompt_embeds=<2 rows of 7 and 11 tokens, the first zero-padded to 11, with its mask>,
  height=48, width=80 (latents 6 x 10, a 3 x 5 token grid: odd and non-square), latents=<noise [2, 16, 6, 10] packed>),
  once with output_type="latent" (the packed final latents, unpacked here) and once with output_type="pt" (images):
  plain   num_inference_steps=4, true_cfg_scale=1.0, no negative rows (one forward per step);
  cfg     num_inference_steps=5, true_cfg_scale=4.0, negative_prompt_embeds=<one 4-token row for both prompts>,
          its mask all ones (the pipeline then passes mask=None).
The same two calls in float64 (transformer, VAE and inputs) measure diffusers' own float32 rounding (in "measured").
Schedules alone (scheduler.set_timesteps as the pipeline calls it, no model) at the real sizes: schedule.<steps>.<tokens>.

End to end (tests/data/qwenimage_sample/from_prompts/): the same pipeline from PROMPTS with a tiny Qwen2.5-VL and the
truncated Qwen tokenizer (transformers 5.24.0; see from_prompts/README.md):
  text:      Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(text_config=E2E_TEXT, vision_config=E2E_VISION)),
             sdpa; its language model drawn by make_llm_prompt_fixtures.redraw (only the embedding rows of the ids the
             pipeline's tokenization of E2E_TEXTS produces, the pad id included, are random; the others are 0), stored
             by its save_encoder (the used rows only) with the model's config.json beside it; 32 wide = the tiny
             transformer's joint_attention_dim. Tokenizer: make_llm_prompt_fixtures.qwen_image_tokenizer().
  calls:     QwenImagePipeline(...)(PROMPTS, height=32, width=48, latents=<noise [2, 16, 4, 6] packed>,
             max_sequence_length=512), output_type "pt" and "latent":
             plain         num_inference_steps=4, true_cfg_scale=1.0, negative_prompt=None (no CFG);
             cfg           num_inference_steps=5, true_cfg_scale=4.0, negative_prompt=[""] * 2 (wick's default
                           negative prompt; the model card's " " is one more token, and wick trims prompts, so
                           cfg_space measures how far the card's " " is from it);
             cfg_negative  num_inference_steps=4, true_cfg_scale=4.0, negative_prompt=["blurry, low quality"] * 2.
             (A single negative string gives one negative row for two prompts, which the transformer call does not
             broadcast, so the string is passed once per prompt.)
"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_common import print_file_sizes, print_total_size, require_repo_root  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import diffusers  # noqa: E402
from diffusers import AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler, QwenImagePipeline  # noqa: E402
from diffusers import QwenImageTransformer2DModel  # noqa: E402
from diffusers.pipelines.qwenimage.pipeline_qwenimage import calculate_shift  # noqa: E402

from reference_torch import deterministic_torch, rel_err, save_sorted  # noqa: E402
from make_llm_prompt_fixtures import (QWEN_IMAGE_TEMPLATE, QWEN_VOCAB, qwen_image_tokenizer, redraw,  # noqa: E402
                                      save_encoder)
import transformers  # noqa: E402
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration  # noqa: E402

OUT = os.path.join("tests", "data", "qwenimage_sample")
TRANSFORMER = os.path.join("tests", "data", "qwenimage", "transformer")
VAE = os.path.join("tests", "data", "qwenimage_vae", "vae")
SCHEDULER = dict(base_image_seq_len=256, base_shift=0.5, invert_sigmas=False, max_image_seq_len=8192, max_shift=0.9,
                 num_train_timesteps=1000, shift=1.0, shift_terminal=0.02, stochastic_sampling=False,
                 time_shift_type="exponential", use_beta_sigmas=False, use_dynamic_shifting=True,
                 use_exponential_sigmas=False, use_karras_sigmas=False)
HEIGHT, WIDTH = 48, 80          # pixels: latents 6 x 10 through the x8 VAE, 3 x 5 = 15 image tokens
TEXT_LENGTHS = (7, 11)          # prompt 0 is zero-padded to 11 and masked
NEGATIVE_LENGTH = 4
TEXT_WIDTH = 32                 # the tiny transformer's joint_attention_dim
CALLS = {
    "plain": dict(num_inference_steps=4, true_cfg_scale=1.0),
    "cfg": dict(num_inference_steps=5, true_cfg_scale=4.0),
}
# (steps, image tokens): 1024 x 1024 (4096 tokens), 1328 x 1328 (6889), 512 x 512 (1024), the tiny case (15).
SCHEDULES = [(50, 4096), (50, 6889), (28, 1024), (8, 15), (2, 4096)]
TEXT_SEED, NEGATIVE_SEED, NOISE_SEED = 11, 12, 13


def pack(latents):
    b, c, h, w = latents.shape
    return QwenImagePipeline._pack_latents(latents, b, c, h, w)


def unpack(tokens, h, w):
    b, n, f = tokens.shape
    return tokens.view(b, h // 2, w // 2, f // 4, 2, 2).permute(0, 3, 1, 4, 2, 5).reshape(b, f // 4, h, w)


def text_rows():
    """Prompt rows [2, 11, 32] (row 0 zero after 7 tokens) with their I64 mask, and the negative row [1, 4, 32]."""
    gen = torch.Generator().manual_seed(TEXT_SEED)
    length = max(TEXT_LENGTHS)
    embeds = torch.zeros(len(TEXT_LENGTHS), length, TEXT_WIDTH)
    mask = torch.zeros(len(TEXT_LENGTHS), length, dtype=torch.int64)
    for i, n in enumerate(TEXT_LENGTHS):
        embeds[i, :n] = torch.randn(n, TEXT_WIDTH, generator=gen)
        mask[i, :n] = 1
    negative = torch.randn(1, NEGATIVE_LENGTH, TEXT_WIDTH, generator=torch.Generator().manual_seed(NEGATIVE_SEED))
    return embeds, mask, negative


def schedule(scheduler, steps, tokens):
    """The pipeline's set_timesteps call for `steps` steps at `tokens` image tokens: (sigmas, timesteps, mu)."""
    sigmas = np.linspace(1.0, 1 / steps, steps)
    mu = calculate_shift(tokens, scheduler.config.get("base_image_seq_len", 256),
                         scheduler.config.get("max_image_seq_len", 4096), scheduler.config.get("base_shift", 0.5),
                         scheduler.config.get("max_shift", 1.15))
    scheduler.set_timesteps(steps, sigmas=sigmas, mu=mu)
    return scheduler.sigmas.clone(), scheduler.timesteps.clone(), mu


def schedule_in_float64(steps, tokens):
    """MODELS2's formula in float64: sigma' = e^mu / (e^mu + 1/s - 1), stretched so the last is 0.02, then 0."""
    c = SCHEDULER
    mu = c["base_shift"] + (tokens - c["base_image_seq_len"]) * (c["max_shift"] - c["base_shift"]) / (
        c["max_image_seq_len"] - c["base_image_seq_len"])
    s = np.linspace(1.0, 1 / steps, steps)
    shifted = math.exp(mu) / (math.exp(mu) + 1 / s - 1)
    stretched = 1 - (1 - shifted) * (1 - c["shift_terminal"]) / (1 - shifted[-1])
    return np.concatenate([stretched, [0.0]])


def float64_outputs(embeds, mask, negative, noise):
    """The same calls with the transformer, the VAE and every input in float64: {name: (latents, images)}."""
    transformer = QwenImageTransformer2DModel.from_pretrained(TRANSFORMER, torch_dtype=torch.float64).eval()
    vae = AutoencoderKLQwenImage.from_pretrained(VAE, torch_dtype=torch.float64).eval()
    pipe = QwenImagePipeline(scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER), vae=vae, text_encoder=None,
                             tokenizer=None, transformer=transformer)
    h, w = noise.shape[2:]
    out = {}
    for name, call in CALLS.items():
        kwargs = dict(call, height=HEIGHT, width=WIDTH, prompt_embeds=embeds.double(), prompt_embeds_mask=mask.clone())
        if call["true_cfg_scale"] > 1:
            kwargs.update(negative_prompt_embeds=negative.double().expand(len(TEXT_LENGTHS), -1, -1).contiguous(),
                          negative_prompt_embeds_mask=torch.ones(len(TEXT_LENGTHS), NEGATIVE_LENGTH, dtype=torch.int64))
        with torch.no_grad():
            latents = pipe(latents=pack(noise.double()), output_type="latent", **kwargs).images
            images = pipe(latents=pack(noise.double()), output_type="pt", **kwargs).images
        out[name] = (unpack(latents, h, w), images)
    return out


# ---- end to end: prompts -> Qwen2.5-VL -> the loop -> the VAE ----

E2E_OUT = os.path.join(OUT, "from_prompts")
PROMPTS = ["a photo of a cat", "red stripes on a blue wall"]
NEGATIVE = "blurry, low quality"
# Every text whose ids get random embedding rows: the prompts, the negatives, and what the sampler tests encode.
E2E_TEXTS = PROMPTS + [" ", NEGATIVE, "", "a red cube", "a photo of sks", "x", "a blue ball"]
E2E_HEIGHT, E2E_WIDTH = 32, 48  # pixels: latents 4 x 6, a 2 x 3 token grid (non-square)
MAX_SEQUENCE_LENGTH = 512
E2E_TEXT = dict(vocab_size=QWEN_VOCAB, hidden_size=TEXT_WIDTH, intermediate_size=32, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6,
                rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 1, 1]})
E2E_VISION = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=TEXT_WIDTH,
                  patch_size=14, spatial_merge_size=2, temporal_patch_size=2, fullatt_block_indexes=[0],
                  window_size=112)
E2E_CALLS = {
    "plain": dict(num_inference_steps=4, true_cfg_scale=1.0),
    "cfg": dict(num_inference_steps=5, true_cfg_scale=4.0, negative_prompt=""),
    "cfg_negative": dict(num_inference_steps=4, true_cfg_scale=4.0, negative_prompt=NEGATIVE),
    "cfg_space": dict(num_inference_steps=5, true_cfg_scale=4.0, negative_prompt=" "),  # rows and measures only
}
E2E_TEXT_SEED, E2E_NOISE_SEED = 21, 22


class RecordingPipeline(QwenImagePipeline):
    """QwenImagePipeline that keeps what encode_prompt returned on its last call (positive first, then negative)."""

    def encode_prompt(self, *args, **kwargs):
        embeds, mask = super().encode_prompt(*args, **kwargs)
        self.encoded.append((embeds.detach().clone(), None if mask is None else mask.detach().clone()))
        return embeds, mask


def e2e_run(pipe, name, prompts, noise, output_type):
    call = dict(E2E_CALLS[name])
    if "negative_prompt" in call:
        call["negative_prompt"] = [call["negative_prompt"]] * len(prompts)
    pipe.encoded = []
    with torch.no_grad():
        out = pipe(list(prompts), height=E2E_HEIGHT, width=E2E_WIDTH, latents=pack(noise).clone(),
                   output_type=output_type, max_sequence_length=MAX_SEQUENCE_LENGTH, **call).images
    return out, pipe.encoded


def end_to_end():
    os.makedirs(E2E_OUT, exist_ok=True)
    tokenizer = qwen_image_tokenizer()
    used = set()
    for text in E2E_TEXTS:
        used.update(tokenizer(QWEN_IMAGE_TEMPLATE.format(text))["input_ids"])
    used = sorted(used | {tokenizer.pad_token_id})
    config = Qwen2_5_VLConfig(text_config=E2E_TEXT, vision_config=E2E_VISION, tie_word_embeddings=False,
                              attn_implementation="sdpa")
    qwen25 = Qwen2_5_VLForConditionalGeneration(config).eval()
    redraw(qwen25.model.language_model, used, E2E_TEXT_SEED)
    save_encoder(qwen25.model.language_model.state_dict(), used, QWEN_VOCAB,
                 os.path.join(E2E_OUT, "qwen25vl.safetensors"), {"head_dim": "8"})
    text_config = json.loads(config.to_json_string(use_diff=False))
    text_config.pop("transformers_version", None)
    with open(os.path.join(E2E_OUT, "qwen25vl_config.json"), "w") as f:
        json.dump(text_config, f, indent=2, sort_keys=True)
        f.write("\n")

    def pipeline(dtype):
        transformer = QwenImageTransformer2DModel.from_pretrained(TRANSFORMER, torch_dtype=dtype).eval()
        vae = AutoencoderKLQwenImage.from_pretrained(VAE, torch_dtype=dtype).eval()
        return RecordingPipeline(scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER), vae=vae,
                                 text_encoder=qwen25.to(dtype), tokenizer=tokenizer, transformer=transformer)

    h, w = E2E_HEIGHT // 8, E2E_WIDTH // 8
    noise = torch.randn(len(PROMPTS), 16, h, w, generator=torch.Generator().manual_seed(E2E_NOISE_SEED))
    cases = {"noise": noise}
    measured = {"tokens": {text: len(tokenizer(QWEN_IMAGE_TEMPLATE.format(text))["input_ids"]) for text in E2E_TEXTS},
                "used_token_ids": len(used)}
    pipe = pipeline(torch.float32)
    for name, call in E2E_CALLS.items():
        images, encoded = e2e_run(pipe, name, PROMPTS, noise, "pt")
        latents, encoded_again = e2e_run(pipe, name, PROMPTS, noise, "latent")
        images, latents = images.float(), unpack(latents.float(), h, w)
        assert images.shape == (len(PROMPTS), 3, E2E_HEIGHT, E2E_WIDTH) and torch.isfinite(images).all(), name
        assert len(encoded) == (2 if "negative_prompt" in call else 1), name
        for (a, am), (b, bm) in zip(encoded, encoded_again):
            assert torch.equal(a, b) and (am is None) == (bm is None)
        embeds, mask = encoded[0]
        if "prompt_embeds" in cases:  # every call encodes the prompts the same way, bit for bit
            assert torch.equal(cases["prompt_embeds"], embeds) and torch.equal(cases["prompt_mask"], mask), name
        cases["prompt_embeds"], cases["prompt_mask"] = embeds.float().contiguous(), mask.to(torch.int64)
        if len(encoded) == 2:
            negative, negative_mask = encoded[1]
            assert negative_mask is None and torch.equal(negative[0], negative[1]), name  # one row, no padding
            cases[f"{name}.negative_embeds"] = negative[:1].float().contiguous()
        if name == "cfg_space":
            measured["cfg_space_vs_cfg_images_max"] = float((images - cases["cfg.images"]).abs().max())
            continue
        cases[f"{name}.images"] = images
        cases[f"{name}.latents"] = latents
        measured[name] = {"latents_minus_noise_max": float((latents - noise).abs().max()),
                          "saturated_fraction": float(((images == 0) | (images == 1)).float().mean()),
                          "image_std": float(images.std())}
    names = [name for name in E2E_CALLS if name != "cfg_space"]
    for a in range(len(names)):
        for b in range(a + 1, len(names)):
            d = float((cases[names[a] + ".images"] - cases[names[b] + ".images"]).abs().max())
            measured[f"{names[a]}_vs_{names[b]}_images_max"] = d
            assert d > 1e-2, (names[a], names[b], d)

    # diffusers' own float32 rounding: the same calls with every part in float64 (absolute).
    pipe64 = pipeline(torch.float64)
    for name in names:
        images, _ = e2e_run(pipe64, name, PROMPTS, noise.double(), "pt")
        measured[name]["f32_vs_f64_images_max"] = float((cases[name + ".images"].double() - images).abs().max())
    qwen25.to(torch.float32)

    metadata = {"prompts": json.dumps(PROMPTS), "size": json.dumps({"height": E2E_HEIGHT, "width": E2E_WIDTH}),
                "scheduler": json.dumps(SCHEDULER), "measured": json.dumps(measured, sort_keys=True),
                "versions": json.dumps({"torch": torch.__version__.split("+")[0], "diffusers": diffusers.__version__,
                                        "transformers": transformers.__version__})}
    metadata.update({name: json.dumps(dict(call, max_sequence_length=MAX_SEQUENCE_LENGTH), sort_keys=True)
                     for name, call in E2E_CALLS.items()})
    save_sorted(cases, os.path.join(E2E_OUT, "case.safetensors"), metadata)
    print_file_sizes(E2E_OUT)
    print_total_size(E2E_OUT)
    print(json.dumps(measured, indent=1, sort_keys=True))
    for k in sorted(cases):
        print(f"  {k}: {tuple(cases[k].shape)} {cases[k].dtype}")


def main():
    require_repo_root()
    deterministic_torch()
    os.makedirs(OUT, exist_ok=True)

    transformer = QwenImageTransformer2DModel.from_pretrained(TRANSFORMER, torch_dtype=torch.float32).eval()
    vae = AutoencoderKLQwenImage.from_pretrained(VAE, torch_dtype=torch.float32).eval()
    scheduler = FlowMatchEulerDiscreteScheduler(**SCHEDULER)
    pipe = QwenImagePipeline(scheduler=scheduler, vae=vae, text_encoder=None, tokenizer=None,
                             transformer=transformer)
    assert pipe.vae_scale_factor == 8

    embeds, mask, negative = text_rows()
    h, w = HEIGHT // 8, WIDTH // 8
    noise = torch.randn(len(TEXT_LENGTHS), 16, h, w, generator=torch.Generator().manual_seed(NOISE_SEED))
    cases = {"noise": noise, "prompt_embeds": embeds, "prompt_mask": mask, "negative_embeds": negative}
    measured = {}
    negatives = negative.expand(len(TEXT_LENGTHS), -1, -1).contiguous()
    for name, call in CALLS.items():
        kwargs = dict(call, height=HEIGHT, width=WIDTH, prompt_embeds=embeds.clone(), prompt_embeds_mask=mask.clone())
        if call["true_cfg_scale"] > 1:
            kwargs.update(negative_prompt_embeds=negatives.clone(),
                          negative_prompt_embeds_mask=torch.ones(negatives.shape[:2], dtype=torch.int64))
        outputs = {}
        for output_type in ("latent", "pt"):
            with torch.no_grad():
                outputs[output_type] = pipe(latents=pack(noise).clone(), output_type=output_type, **kwargs).images
            if output_type == "latent":
                sigmas, timesteps = scheduler.sigmas.clone(), scheduler.timesteps.clone()
            else:
                assert torch.equal(sigmas, scheduler.sigmas) and torch.equal(timesteps, scheduler.timesteps)
        latents = unpack(outputs["latent"].float(), h, w)
        images = outputs["pt"].float()
        assert latents.shape == noise.shape and torch.isfinite(latents).all(), name
        assert images.shape == (len(TEXT_LENGTHS), 3, HEIGHT, WIDTH) and torch.isfinite(images).all(), name
        steps = call["num_inference_steps"]
        again, _, mu = schedule(FlowMatchEulerDiscreteScheduler(**SCHEDULER), steps, h * w // 4)
        assert torch.equal(again, sigmas), name
        cases.update({f"{name}.sigmas": sigmas, f"{name}.timesteps": timesteps, f"{name}.latents": latents,
                      f"{name}.images": images})
        measured[name] = {
            "mu": mu,
            "sigmas_vs_float64_formula_max": float(np.abs(sigmas.double().numpy() -
                                                          schedule_in_float64(steps, h * w // 4)).max()),
            "latents_minus_noise_max": float((latents - noise).abs().max()),
            "latents_abs_max": float(latents.abs().max()),
            "saturated_fraction": float(((images == 0) | (images == 1)).float().mean()),
            "image_std": float(images.std()),
        }
        # The padded row gives what the prompt alone gives (the mask hides its padding).
        with torch.no_grad():
            alone = pipe(latents=pack(noise[:1]).clone(), output_type="latent",
                         **dict(kwargs, prompt_embeds=embeds[:1, :TEXT_LENGTHS[0]].clone(),
                                prompt_embeds_mask=mask[:1, :TEXT_LENGTHS[0]].clone(),
                                **({"negative_prompt_embeds": negative.clone(),
                                    "negative_prompt_embeds_mask": torch.ones(1, NEGATIVE_LENGTH, dtype=torch.int64)}
                                   if call["true_cfg_scale"] > 1 else {}))).images
        measured[name]["padded_vs_alone"] = rel_err(latents[:1], unpack(alone.float(), h, w))

    # diffusers' own float32 rounding: its float32 outputs against the same calls in float64 (absolute).
    for name, (latents, images) in float64_outputs(embeds, mask, negative, noise).items():
        measured[name]["f32_vs_f64_latents_max"] = float((cases[f"{name}.latents"].double() - latents).abs().max())
        measured[name]["f32_vs_f64_images_max"] = float((cases[f"{name}.images"].double() - images).abs().max())

    d = float((cases["plain.images"] - cases["cfg.images"]).abs().max())
    assert d > 1e-2, d
    measured["plain_vs_cfg_images_max"] = d

    for steps, tokens in SCHEDULES:
        sigmas, timesteps, mu = schedule(FlowMatchEulerDiscreteScheduler(**SCHEDULER), steps, tokens)
        cases[f"schedule.{steps}.{tokens}"] = sigmas
        measured[f"schedule.{steps}.{tokens}"] = {
            "mu": mu, "vs_float64_formula_max": float(np.abs(sigmas.double().numpy() -
                                                              schedule_in_float64(steps, tokens)).max())}

    metadata = {"size": json.dumps({"height": HEIGHT, "width": WIDTH}), "scheduler": json.dumps(SCHEDULER),
                "text_lengths": json.dumps(list(TEXT_LENGTHS)), "negative_length": str(NEGATIVE_LENGTH),
                "schedules": json.dumps(SCHEDULES), "measured": json.dumps(measured, sort_keys=True),
                "versions": json.dumps({"torch": torch.__version__.split("+")[0], "diffusers": diffusers.__version__,
                                        "numpy": np.__version__})}
    metadata.update({name: json.dumps(call, sort_keys=True) for name, call in CALLS.items()})
    save_sorted({k: v.float() if v.is_floating_point() else v for k, v in cases.items()},
                os.path.join(OUT, "case.safetensors"), metadata)
    print_file_sizes(OUT)
    print_total_size(OUT)
    print(json.dumps(measured, indent=1, sort_keys=True))
    for k in sorted(cases):
        print(f"  {k}: {tuple(cases[k].shape)}")
    for name in CALLS:
        print(f"  {name}.sigmas = {[float(x) for x in cases[name + '.sigmas']]}")
    end_to_end()


if __name__ == "__main__":
    main()
