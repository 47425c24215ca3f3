#!/usr/bin/env python3
"""Generates tests/data/sd3_sample/: what diffusers' StableDiffusion3Pipeline makes from two prompts with a tiny random
SD3.5-Medium-like transformer, the committed tiny text encoders, tokenizers and VAE, and given starting noise, so that
wick's SD3 sampler (models/sd3/sd3_sampler.h: encode_sd3_prompts -> Euler over FlowMatchEulerDiscreteScheduler's
shifted schedule with classifier-free guidance -> the VAE decoder) can be checked against it end to end. See
tests/data/sd3_sample/README.md for every file and tensor.

Made with (pip, CPU only): torch 2.15.0, transformers 5.24.0, diffusers 0.42.1, sentencepiece 0.2.x, open-clip-torch
3.3.0 (only its bytes_to_unicode, through make_prompt_fixtures.py), safetensors, Python 3.11. Run from the
repository root:
    /tmp/venv/bin/python tests/reference/make_sd3_sample_fixtures.py
Everything runs on the CPU, one thread, torch.use_deterministic_algorithms(True); weights and noise come from seeded
generators, so a rerun rewrites byte-identical files.

Components:
  transformer: SD3Transformer2DModel(patch_size=2, in_channels=16, out_channels=16, num_layers=2,
               attention_head_dim=8, num_attention_heads=4, joint_attention_dim=48, caption_projection_dim=32,
               pooled_projection_dim=48, pos_embed_max_size=10, qk_norm="rms_norm", dual_attention_layers=(0,)) after
               torch.manual_seed(0), every weight rounded to float16 (the file's dtype): hidden 32, QK norm and attn2
               in block 0 (SD3.5 Medium's shape); 48 = T5's width (the CLIP part 16 + 16 padded to it) and the pooled
               16 (CLIP-L projected) + 32 (bigG projected).
  vae:         tests/data/vae/flux_tiny/vae (AutoencoderKL, 16 latent channels, x2; SD3's VAE has the same layout)
               with SD3's scaling_factor 1.5305 and shift_factor 0.0609 in place of its own.
  text:        CLIP-L = tests/data/clip_text/clip_l + tests/data/prompts/sd3_clip_l_projection.safetensors
               (CLIPTextModelWithProjection, width 16, projection 16), bigG = tests/data/clip_text/clip_g (projection
               32), T5 = tests/data/prompts/sd3_t5 (d_model 48); tokenizers as make_prompt_fixtures.py builds them (the
               script asserts that sentencepiece, which wick uses, gives transformers' ids on every prompt here).
  scheduler:   FlowMatchEulerDiscreteScheduler(shift=3.0): stable-diffusion-3.5-large's and -medium's
               scheduler_config.json (num_train_timesteps 1000, shift 3.0, no dynamic shifting).
Calls: StableDiffusion3Pipeline(...)(PROMPTS, height=24, width=40, latents=noise, output_type="pt", ...):
  cfg:      num_inference_steps=6, guidance_scale=4.5, negative_prompt None ("", diffusers' default),
            max_sequence_length=256;
  negative: num_inference_steps=4, guidance_scale=3.0, negative_prompt="blurry, low quality", max_sequence_length=256;
  plain:    num_inference_steps=4, guidance_scale=1.0 (no guidance: one forward per step), max_sequence_length=256.
The same calls with output_type="latent" give the final latents.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_common import print_file_sizes, require_repo_root, single_threaded_tokenizers  # noqa: E402

single_threaded_tokenizers()
import sentencepiece as spm  # noqa: E402
import torch  # noqa: E402
import diffusers  # noqa: E402
import transformers  # noqa: E402
from diffusers import (AutoencoderKL, FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel,  # noqa: E402
                       StableDiffusion3Pipeline)
from transformers import CLIPTextModelWithProjection, T5EncoderModel  # noqa: E402

from make_prompt_fixtures import SPIECE, clip_tokenizers, sd3_clip_l, t5_tokenizer  # noqa: E402
from reference_torch import deterministic_torch, save_sorted, write_fp16_diffusers  # noqa: E402

OUT = "tests/data/sd3_sample"
PROMPTS = ["a photo of a cat", "red stripes on a blue wall"]
NEGATIVE = "blurry, low quality"
HEIGHT, WIDTH = 24, 40  # pixels: latents 12 x 20 through the x2 VAE, 6 x 10 = 60 patches
TRANSFORMER = dict(patch_size=2, in_channels=16, out_channels=16, num_layers=2, attention_head_dim=8,
                   num_attention_heads=4, joint_attention_dim=48, caption_projection_dim=32, pooled_projection_dim=48,
                   pos_embed_max_size=10, qk_norm="rms_norm", dual_attention_layers=(0,))
SD3_VAE = dict(scaling_factor=1.5305, shift_factor=0.0609)
CASES = {
    "cfg": dict(steps=6, guidance=4.5, negative_prompt=None, max_sequence_length=256),
    "negative": dict(steps=4, guidance=3.0, negative_prompt=NEGATIVE, max_sequence_length=256),
    "plain": dict(steps=4, guidance=1.0, negative_prompt=None, max_sequence_length=256),
}


def main():
    require_repo_root()
    deterministic_torch()
    os.makedirs(OUT, exist_ok=True)

    tok_l, tok_g = clip_tokenizers()
    tok_t5 = t5_tokenizer()
    sp = spm.SentencePieceProcessor(model_file=SPIECE)
    for prompt in PROMPTS + [NEGATIVE, ""]:
        assert tok_t5(prompt)["input_ids"] == sp.encode(prompt) + [1], prompt
    clip_l, _ = sd3_clip_l()
    clip_g = CLIPTextModelWithProjection.from_pretrained("tests/data/clip_text/clip_g", dtype=torch.float32).eval()
    t5 = T5EncoderModel.from_pretrained("tests/data/prompts/sd3_t5", dtype=torch.float32).eval()
    vae = AutoencoderKL.from_pretrained("tests/data/vae/flux_tiny/vae", torch_dtype=torch.float32, **SD3_VAE).eval()
    assert vae.config.scaling_factor == SD3_VAE["scaling_factor"] and vae.config.shift_factor == SD3_VAE["shift_factor"]

    torch.manual_seed(0)
    transformer = SD3Transformer2DModel(**TRANSFORMER).float().eval()
    with torch.no_grad():
        for p in transformer.state_dict().values():  # parameters and the persistent pos_embed buffer
            p.copy_(p.half().float())
    write_fp16_diffusers(transformer, os.path.join(OUT, "transformer"))

    h, w = HEIGHT // 2, WIDTH // 2
    noise = torch.randn(len(PROMPTS), 16, h, w, generator=torch.Generator().manual_seed(1))
    cases = {"noise": noise}
    measured = {}
    pipe = StableDiffusion3Pipeline(transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
                                    vae=vae, text_encoder=clip_l, tokenizer=tok_l, text_encoder_2=clip_g,
                                    tokenizer_2=tok_g, text_encoder_3=t5, tokenizer_3=tok_t5)
    assert pipe.vae_scale_factor == 2
    for name, settings in CASES.items():
        call = dict(height=HEIGHT, width=WIDTH, num_inference_steps=settings["steps"],
                    guidance_scale=settings["guidance"], negative_prompt=settings["negative_prompt"],
                    max_sequence_length=settings["max_sequence_length"])
        with torch.no_grad():
            images = pipe(PROMPTS, latents=noise.clone(), output_type="pt", **call).images
            latents = pipe(PROMPTS, latents=noise.clone(), output_type="latent", **call).images
        cases[f"{name}.images"] = images.float()
        cases[f"{name}.latents"] = latents.float()
        cases[f"{name}.sigmas"] = pipe.scheduler.sigmas.float()
        measured[name] = {"saturated_fraction": float(((images == 0) | (images == 1)).float().mean()),
                          "image_std": float(images.std()),
                          "latent_change": float((latents.float() - noise).abs().max())}
        assert images.shape == (len(PROMPTS), 3, HEIGHT, WIDTH) and torch.isfinite(images).all()
    measured["cfg_vs_plain"] = float((cases["cfg.images"] - cases["plain.images"]).abs().max())

    metadata = {"prompts": json.dumps(PROMPTS), "cases": json.dumps(CASES),
                "size": json.dumps({"height": HEIGHT, "width": WIDTH}), "vae": json.dumps(SD3_VAE),
                "measured": json.dumps(measured),
                "versions": json.dumps({"torch": torch.__version__.split("+")[0], "diffusers": diffusers.__version__,
                                        "transformers": transformers.__version__})}
    save_sorted(cases, os.path.join(OUT, "case.safetensors"), metadata)
    print_file_sizes(OUT)
    print(json.dumps(measured))
    for name in CASES:
        print(name, [round(float(s), 6) for s in cases[f"{name}.sigmas"]])


if __name__ == "__main__":
    main()
