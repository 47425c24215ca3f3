#!/usr/bin/env python3
"""Generates tests/data/sdxl_sample/: what diffusers' StableDiffusionXLPipeline makes from two prompts with a tiny random
SDXL-like UNet, the committed tiny text encoders, tokenizers and 4-channel VAE, and given starting noise, so that wick's
SDXL sampler (models/sdxl/sdxl_sampler.h: encode_sdxl_prompts -> the micro-conditioning -> Euler over
EulerDiscreteScheduler's "leading" schedule with classifier-free guidance -> latents / 0.13025 -> the VAE decoder) can
be checked against it end to end. See tests/data/sdxl_sample/README.md for every file and tensor.

Made with (pip, CPU only): torch 2.15.0, transformers 5.24.0, diffusers 0.42.1, open-clip-torch 3.3.0 (only its
bytes_to_unicode, through make_prompt_fixtures.py), sentencepiece, safetensors, Python 3.11. Run from the repository
root:
    /tmp/venv/bin/python tests/reference/make_sdxl_sample_fixtures.py
Everything runs on the CPU, one thread, torch.use_deterministic_algorithms(True); weights and noise come from seeded
generators, so a rerun rewrites byte-identical files.

Components:
  unet:      UNet2DConditionModel(sample_size=8, in_channels=4, out_channels=4, layers_per_block=1,
             block_out_channels=(8, 16), down_block_types=(DownBlock2D, CrossAttnDownBlock2D),
             up_block_types=(CrossAttnUpBlock2D, UpBlock2D), attention_head_dim=(1, 2) (head counts: heads of 8),
             transformer_layers_per_block=1, use_linear_projection=True, cross_attention_dim=32,
             addition_embed_type="text_time", addition_time_embed_dim=8, projection_class_embeddings_input_dim=80
             (bigG's pooled 32 + 6 x 8), norm_num_groups=4) after torch.manual_seed(0), every weight rounded to
             float16 (the file's dtype), stored as a diffusers unet/ folder. 32 = CLIP-L's 16 + bigG's 16.
  vae:       tests/data/vae/sdxl_tiny/vae (AutoencoderKL, 4 latent channels, x4, scaling_factor 0.13025).
  text:      CLIP-L = tests/data/clip_text/clip_l (CLIPTextModel), bigG = tests/data/clip_text/clip_g
             (CLIPTextModelWithProjection, projection 32); tokenizers as make_prompt_fixtures.py builds them (bigG's
             pads with "!").
  scheduler: EulerDiscreteScheduler as stable-diffusion-xl-base-1.0's scheduler/scheduler_config.json has it:
             num_train_timesteps 1000, beta_schedule "scaled_linear", beta_start 0.00085, beta_end 0.012,
             timestep_spacing "leading", steps_offset 1, prediction_type "epsilon", interpolation_type "linear",
             use_karras_sigmas false; "vpred" uses prediction_type "v_prediction".
Calls: StableDiffusionXLPipeline(..., force_zeros_for_empty_prompt=True, add_watermarker=False)(PROMPTS, height=24,
width=40, latents=noise, output_type="pt", ...), the default original_size = target_size = (24, 40), crop (0, 0):
  cfg:      6 steps, guidance 5.0, negative_prompt None: ZERO negative embeddings (force_zeros_for_empty_prompt);
  negative: 4 steps, guidance 3.0, negative_prompt "blurry, low quality" (encoded);
  encoded:  4 steps, guidance 3.0, negative_prompt "" given explicitly: encoded like any prompt, not zeroed;
  plain:    4 steps, guidance 1.0 (no guidance: one forward per step);
  vpred:    4 steps, guidance 3.0, negative_prompt None, the scheduler with prediction_type "v_prediction".
The same calls with output_type="latent" give the final latents.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_common import print_file_sizes, require_repo_root, single_threaded_tokenizers  # noqa: E402

single_threaded_tokenizers()
import torch  # noqa: E402
import diffusers  # noqa: E402
import transformers  # noqa: E402
from diffusers import (AutoencoderKL, EulerDiscreteScheduler, StableDiffusionXLPipeline,  # noqa: E402
                       UNet2DConditionModel)
from transformers import CLIPTextModel, CLIPTextModelWithProjection  # noqa: E402

from make_prompt_fixtures import clip_tokenizers  # noqa: E402
from reference_torch import deterministic_torch, save_sorted, write_fp16_diffusers  # noqa: E402

OUT = "tests/data/sdxl_sample"
PROMPTS = ["a photo of a cat", "red stripes on a blue wall"]
NEGATIVE = "blurry, low quality"
HEIGHT, WIDTH = 24, 40  # pixels: latents 6 x 10 through the x4 VAE (the 2-level UNet needs even latent sizes)
UNET = dict(sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(8, 16),
            down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), attention_head_dim=(1, 2),
            transformer_layers_per_block=1, use_linear_projection=True, cross_attention_dim=32,
            addition_embed_type="text_time", addition_time_embed_dim=8, projection_class_embeddings_input_dim=80,
            norm_num_groups=4)
# stable-diffusion-xl-base-1.0/scheduler/scheduler_config.json (diffusers 0.19 era), the keys that matter.
SCHEDULER = dict(num_train_timesteps=1000, beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012,
                 timestep_spacing="leading", steps_offset=1, prediction_type="epsilon", interpolation_type="linear",
                 use_karras_sigmas=False, clip_sample=False, sample_max_value=1.0, set_alpha_to_one=False,
                 skip_prk_steps=True, trained_betas=None)
CASES = {
    "cfg": dict(steps=6, guidance=5.0, negative_prompt=None, prediction="epsilon"),
    "negative": dict(steps=4, guidance=3.0, negative_prompt=NEGATIVE, prediction="epsilon"),
    "encoded": dict(steps=4, guidance=3.0, negative_prompt="", prediction="epsilon"),
    "plain": dict(steps=4, guidance=1.0, negative_prompt=None, prediction="epsilon"),
    "vpred": dict(steps=4, guidance=3.0, negative_prompt=None, prediction="v_prediction"),
}


def main():
    require_repo_root()
    deterministic_torch()
    os.makedirs(OUT, exist_ok=True)

    tok_l, tok_g = clip_tokenizers()
    clip_l = CLIPTextModel.from_pretrained("tests/data/clip_text/clip_l", dtype=torch.float32).eval()
    clip_g = CLIPTextModelWithProjection.from_pretrained("tests/data/clip_text/clip_g", dtype=torch.float32).eval()
    vae = AutoencoderKL.from_pretrained("tests/data/vae/sdxl_tiny/vae", torch_dtype=torch.float32).eval()
    assert vae.config.scaling_factor == 0.13025 and vae.config.latent_channels == 4

    torch.manual_seed(0)
    unet = UNet2DConditionModel(**UNET).float().eval()
    with torch.no_grad():
        for p in unet.parameters():
            p.copy_(p.half().float())
    write_fp16_diffusers(unet, os.path.join(OUT, "unet"))

    h, w = HEIGHT // 4, WIDTH // 4
    noise = torch.randn(len(PROMPTS), 4, h, w, generator=torch.Generator().manual_seed(1))
    cases = {"noise": noise}
    measured = {}
    for name, settings in CASES.items():
        # from_config, as from_pretrained reads the file: the DDIM-era keys EulerDiscreteScheduler has no use for
        # (clip_sample, ...) are ignored.
        scheduler = EulerDiscreteScheduler.from_config({**SCHEDULER, "prediction_type": settings["prediction"]})
        assert scheduler.config.timestep_spacing == "leading" and scheduler.config.steps_offset == 1
        pipe = StableDiffusionXLPipeline(vae=vae, text_encoder=clip_l, text_encoder_2=clip_g, tokenizer=tok_l,
                                         tokenizer_2=tok_g, unet=unet, scheduler=scheduler,
                                         force_zeros_for_empty_prompt=True, add_watermarker=False)
        assert pipe.vae_scale_factor == 4
        call = dict(height=HEIGHT, width=WIDTH, num_inference_steps=settings["steps"],
                    guidance_scale=settings["guidance"], negative_prompt=settings["negative_prompt"])
        with torch.no_grad():
            images = pipe(PROMPTS, latents=noise.clone(), output_type="pt", **call).images
            latents = pipe(PROMPTS, latents=noise.clone(), output_type="latent", **call).images
        cases[f"{name}.images"] = images.float()
        cases[f"{name}.latents"] = latents.float()
        cases[f"{name}.sigmas"] = pipe.scheduler.sigmas.float()
        cases[f"{name}.timesteps"] = pipe.scheduler.timesteps.float()
        cases[f"{name}.init_noise_sigma"] = torch.tensor([float(pipe.scheduler.init_noise_sigma)])
        measured[name] = {"saturated_fraction": float(((images == 0) | (images == 1)).float().mean()),
                          "image_std": float(images.std()),
                          "latent_change": float((latents.float() - noise).abs().max())}
        assert images.shape == (len(PROMPTS), 3, HEIGHT, WIDTH) and torch.isfinite(images).all()
    for other in ("plain", "encoded", "negative"):
        measured[f"cfg_vs_{other}"] = float((cases["cfg.images"] - cases[f"{other}.images"]).abs().max())

    metadata = {"prompts": json.dumps(PROMPTS), "cases": json.dumps(CASES), "scheduler": json.dumps(SCHEDULER),
                "size": json.dumps({"height": HEIGHT, "width": WIDTH}), "measured": json.dumps(measured),
                "versions": json.dumps({"torch": torch.__version__.split("+")[0], "diffusers": diffusers.__version__,
                                        "transformers": transformers.__version__})}
    save_sorted(cases, os.path.join(OUT, "case.safetensors"), metadata)
    print_file_sizes(OUT)
    print(json.dumps(measured))
    for name in CASES:
        print(name, [round(float(t)) for t in cases[f"{name}.timesteps"]],
              [round(float(s), 5) for s in cases[f"{name}.sigmas"]], float(cases[f"{name}.init_noise_sigma"][0]))


if __name__ == "__main__":
    main()
