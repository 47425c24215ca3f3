#!/usr/bin/env python3
"""Generates tests/data/flux_sample/: what diffusers' FluxPipeline makes from two prompts with a tiny random Flux
transformer, the committed tiny text encoders, tokenizers and VAE, and given starting noise, so that wick's Flux
sampler (models/flux/flux_sampler.h: encode_flux_prompts -> Euler over BFL's schedule -> the VAE decoder) can be
checked against it end to end. See tests/data/flux_sample/README.md for every file and tensor.

Made with (pip, CPU only): torch 2.15.0, transformers 5.24.0, diffusers 0.42.1, sentencepiece 0.2.x, open-clip-torch
3.3.0 (only its bytes_to_unicode, through make_prompt_fixtures.py), safetensors, Python 3.11. Run from the
repository root:
    /tmp/venv/bin/python tests/reference/make_flux_sample_fixtures.py
Everything runs on the CPU, one thread, torch.use_deterministic_algorithms(True); weights and noise come from seeded
generators, so a rerun rewrites byte-identical files.

Components:
  transformer: FluxTransformer2DModel(patch_size=1, in_channels=64, num_layers=2, num_single_layers=2,
               attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=16,
               guidance_embeds=True, axes_dims_rope=[4, 6, 6]) after torch.manual_seed(0), every weight rounded to
               float16 (the file's dtype); 64 = the VAE's 16 latent channels x 2 x 2, 32 = T5's width, 16 = CLIP-L's.
  schnell:     the same weights without time_text_embed.guidance_embedder (guidance_embeds=False).
  vae:         tests/data/vae/flux_tiny/vae (AutoencoderKL, 16 latent channels, x2, scaling 0.3611, shift 0.1159).
  text:        tests/data/clip_text/clip_l (CLIPTextModel, width 16), tests/data/t5/pipeline/text_encoder_3
               (T5EncoderModel, width 32); tokenizers as make_prompt_fixtures.py builds them (CLIP-L from
               tests/data/clip_tokenizer/bpe_simple_vocab_16e6.txt.gz, T5 from tests/data/t5/spiece.model; the script
               asserts that sentencepiece, which wick uses, gives transformers' ids on both prompts).
  scheduler:   FlowMatchEulerDiscreteScheduler with FLUX.1-dev's config (use_dynamic_shifting, base_shift 0.5,
               max_shift 1.15, base_image_seq_len 256, max_image_seq_len 4096) for dev and FLUX.1-schnell's
               (use_dynamic_shifting False, shift 1.0) for schnell.
Calls: FluxPipeline(...)(PROMPTS, height=24, width=40, latents=<noise packed as _pack_latents does>,
  output_type="pt"): dev with num_inference_steps=6, guidance_scale=3.5, max_sequence_length=512; schnell with
  num_inference_steps=4, max_sequence_length=256 (its guidance is not used). The same calls with output_type="latent"
  give the final latents.
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
from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel  # noqa: E402
from transformers import CLIPTextModel, T5EncoderModel  # noqa: E402

from make_prompt_fixtures import SPIECE, clip_tokenizers, t5_tokenizer  # noqa: E402
from reference_torch import (deterministic_torch, pack_flux_latents, save_sorted, unpack_flux_latents,  # noqa: E402
                             write_fp16_diffusers)

OUT = "tests/data/flux_sample"
PROMPTS = ["a photo of a cat", "red stripes on a blue wall"]
HEIGHT, WIDTH = 24, 40  # pixels: latents 12 x 20 through the x2 VAE, 6 x 10 = 60 image tokens
TRANSFORMER = dict(patch_size=1, in_channels=64, num_layers=2, num_single_layers=2, attention_head_dim=16,
                   num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=16, axes_dims_rope=[4, 6, 6])
DEV = dict(steps=6, guidance=3.5, max_sequence_length=512)
SCHNELL = dict(steps=4, guidance=0.0, max_sequence_length=256)


def main():
    require_repo_root()
    deterministic_torch()
    os.makedirs(OUT, exist_ok=True)

    tok_l, _ = clip_tokenizers()
    tok_t5 = t5_tokenizer()
    sp = spm.SentencePieceProcessor(model_file=SPIECE)
    for prompt in PROMPTS:
        assert tok_t5(prompt)["input_ids"] == sp.encode(prompt) + [1], prompt
    clip_l = CLIPTextModel.from_pretrained("tests/data/clip_text/clip_l", dtype=torch.float32).eval()
    t5 = T5EncoderModel.from_pretrained("tests/data/t5/pipeline/text_encoder_3", dtype=torch.float32).eval()
    vae = AutoencoderKL.from_pretrained("tests/data/vae/flux_tiny/vae", torch_dtype=torch.float32).eval()

    torch.manual_seed(0)
    dev = FluxTransformer2DModel(guidance_embeds=True, **TRANSFORMER).float().eval()
    with torch.no_grad():
        for p in dev.parameters():
            p.copy_(p.half().float())
    schnell = FluxTransformer2DModel(guidance_embeds=False, **TRANSFORMER).float().eval()
    missing, unexpected = schnell.load_state_dict(dev.state_dict(), strict=False)
    assert not missing and all(k.startswith("time_text_embed.guidance_embedder.") for k in unexpected), unexpected
    write_fp16_diffusers(dev, os.path.join(OUT, "transformer"))
    write_fp16_diffusers(schnell, os.path.join(OUT, "transformer_schnell"))

    h, w = HEIGHT // 2, WIDTH // 2
    noise = torch.randn(len(PROMPTS), 16, h, w, generator=torch.Generator().manual_seed(1))
    cases = {"noise": noise}
    measured = {}
    for name, model, scheduler, settings in (
            ("dev", dev, FlowMatchEulerDiscreteScheduler(base_image_seq_len=256, base_shift=0.5, max_image_seq_len=4096,
                                                         max_shift=1.15, shift=3.0, use_dynamic_shifting=True), DEV),
            ("schnell", schnell, FlowMatchEulerDiscreteScheduler(shift=1.0, use_dynamic_shifting=False), SCHNELL)):
        pipe = FluxPipeline(scheduler=scheduler, vae=vae, text_encoder=clip_l, tokenizer=tok_l, text_encoder_2=t5,
                            tokenizer_2=tok_t5, transformer=model)
        assert pipe.vae_scale_factor == 2
        call = dict(height=HEIGHT, width=WIDTH, num_inference_steps=settings["steps"],
                    guidance_scale=settings["guidance"], max_sequence_length=settings["max_sequence_length"])
        with torch.no_grad():
            images = pipe(PROMPTS, latents=pack_flux_latents(noise), output_type="pt", **call).images
            latents = pipe(PROMPTS, latents=pack_flux_latents(noise), output_type="latent", **call).images
        cases[f"{name}.images"] = images.float()
        cases[f"{name}.latents"] = unpack_flux_latents(latents.float(), h, w)
        cases[f"{name}.sigmas"] = pipe.scheduler.sigmas.float()
        measured[name] = {"saturated_fraction": float(((images == 0) | (images == 1)).float().mean()),
                          "image_std": float(images.std())}
        assert images.shape == (len(PROMPTS), 3, HEIGHT, WIDTH) and torch.isfinite(images).all()

    metadata = {"prompts": json.dumps(PROMPTS), "dev": json.dumps(DEV), "schnell": json.dumps(SCHNELL),
                "size": json.dumps({"height": HEIGHT, "width": WIDTH}), "measured": json.dumps(measured),
                "versions": json.dumps({"torch": torch.__version__.split("+")[0], "diffusers": diffusers.__version__,
                                        "transformers": transformers.__version__})}
    save_sorted(cases, os.path.join(OUT, "case.safetensors"), metadata)
    print_file_sizes(OUT)
    print(json.dumps(measured))


if __name__ == "__main__":
    main()
