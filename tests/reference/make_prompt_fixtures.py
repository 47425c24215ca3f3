#!/usr/bin/env python3
"""Generates tests/data/prompts/: what diffusers' FluxPipeline, StableDiffusion3Pipeline and StableDiffusionXLPipeline
`encode_prompt` return for four prompts, computed from the committed tiny text encoders and the real CLIP vocabulary,
so that wick's encode_flux_prompts / encode_sd3_prompts / encode_sdxl_prompts (models/{flux,sd3,sdxl}/*_text.h) can
be checked against them. See tests/data/prompts/README.md for every file and tensor.

Made with (pip, CPU only): torch 2.15.0, transformers 5.24.0, diffusers 0.42.1, sentencepiece 0.2.x, open-clip-torch
3.3.0 (only its bytes_to_unicode), safetensors, Python 3.11. Run from the repository root:
    /tmp/venv/bin/pip install torch transformers diffusers sentencepiece protobuf open-clip-torch safetensors
    /tmp/venv/bin/python tests/reference/make_prompt_fixtures.py
Everything runs on the CPU, one thread, torch.use_deterministic_algorithms(True); the two new tensors are drawn from
seeded torch.Generators, so a rerun rewrites byte-identical files.

Pipelines are built with only their text side (transformer / unet / vae / scheduler = None, which diffusers'
register_modules accepts) and `encode_prompt` is called as the pipelines' __call__ calls it:
  FluxPipeline(text_encoder = tests/data/clip_text/clip_l (CLIPTextModel), tokenizer = CLIP-L,
               text_encoder_2 = tests/data/t5/pipeline/text_encoder_3 (T5EncoderModel, d_model 32), tokenizer_2 = T5)
      .encode_prompt(prompts, max_sequence_length=512 (dev) and 256 (schnell))
  StableDiffusion3Pipeline(text_encoder = clip_l + a text_projection (CLIPTextModelWithProjection, projection 16),
                           tokenizer = CLIP-L, text_encoder_2 = tests/data/clip_text/clip_g, tokenizer_2 = bigG,
                           text_encoder_3 = sd3_t5/ (a new T5 with d_model 48, so that the CLIP part 16 + 16 = 32 is
                           padded to 48 as SD3 pads 768 + 1280 = 2048 to 4096), tokenizer_3 = T5)
      .encode_prompt(prompts, prompts, prompts, do_classifier_free_guidance=True, negative_prompt=None,
                     max_sequence_length=256)
  StableDiffusionXLPipeline(text_encoder = clip_l, text_encoder_2 = clip_g, tokenizer = CLIP-L, tokenizer_2 = bigG,
                            force_zeros_for_empty_prompt=True, add_watermarker=False)
      .encode_prompt(prompts, do_classifier_free_guidance=True, negative_prompt=None)  -> zero negatives
      and once more with negative_prompt="" (explicit) -> the encoding of "" (checked equal to prompt 1's rows)

Tokenizers, as diffusers' pipeline folders give them to transformers 5.24:
  CLIP-L: CLIPTokenizer(vocab, merges, model_max_length=77) built in memory from
          tests/data/clip_tokenizer/bpe_simple_vocab_16e6.txt.gz (MODELS.md 4.1), pad <|endoftext|> = 49407;
  bigG:   the same with pad_token="!" (id 0), as SDXL's and SD3's tokenizer_2 (a typed "!" then becomes id 0 too);
  T5:     transformers' T5Tokenizer (T5TokenizerFast is the same class in transformers 5: the Rust tokenizers Unigram,
          which diffusers' Flux and SD3 pipelines use) from tests/data/t5/spiece.model. Its ids differ from
          libsentencepiece's (wick) on some inputs (docs/text_encoders.md); the prompts below were chosen where they
          are equal, and the script asserts it: python sentencepiece's encode(p) + [1] == transformers' ids on every
          prompt, so both implementations see the same ids.

Prompts: "a photo of a cat"; "" (empty); a 114-word caption (135 CLIP tokens: cut at 77; 409 T5 pieces: cut at 256,
not at 512); a Unicode one with "wow!!!" (CJK, accents, an emoji, a dash: bigG's tokenizer gives each "!" id 0).

New model tensors (both rounded to float16, the dtype of the real files; references computed in float32 from those
values):
  sd3_clip_l_projection.safetensors: text_projection.weight [16, 16] N(0, 1/16) (seed 11): the tests add it to
      clip_l's tensors to make SD3's CLIP-L (CLIPTextModelWithProjection; the real one has 768 x 768).
  sd3_t5/: T5Config(vocab 1128, d_model 48, d_kv 12, 4 heads, d_ff 37, 2 layers, 32 buckets, max distance 128,
      gated-gelu), every weight redrawn (seed 5) as make_t5_fixtures.py does; config.json + model.safetensors f16.
"""
import json
import os
import shutil
import tempfile

from reference_common import print_file_sizes, require_repo_root, single_threaded_tokenizers

single_threaded_tokenizers()
import sentencepiece as spm  # noqa: E402
import torch  # noqa: E402
import diffusers  # noqa: E402
import transformers  # noqa: E402
from diffusers import FluxPipeline, StableDiffusion3Pipeline, StableDiffusionXLPipeline  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import (CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer,  # noqa: E402
                          T5Config, T5EncoderModel, T5Tokenizer)

from reference_torch import clip_vocabulary, deterministic_torch, save_sorted  # noqa: E402

OUT = "tests/data/prompts"
CLIP_L = "tests/data/clip_text/clip_l"
CLIP_G = "tests/data/clip_text/clip_g"
T5_32 = "tests/data/t5/pipeline/text_encoder_3"
SPIECE = "tests/data/t5/spiece.model"
BPE = "tests/data/clip_tokenizer/bpe_simple_vocab_16e6.txt.gz"

LONG = ("a highly detailed oil painting of an ancient castle on top of a misty mountain at sunset, "
        "with a golden river winding through a forest of tall pine trees below, a flock of white birds flying "
        "across an orange and purple sky, tiny villagers walking along a cobblestone road toward the castle gate, "
        "warm light glowing from every window, dramatic clouds, soft shadows, intricate architecture, cinematic "
        "composition, trending on artstation, by a famous landscape painter, 8k resolution, masterpiece, "
        "a quiet lake in the foreground reflecting the whole scene like a mirror, fishing boats resting on the shore, "
        "a small red fox watching from the tall grass, autumn leaves drifting in the cool evening wind")
UNICODE = "Ein Café in Zürich at night, 東京の夜景, naïve ÆSTHETIC ☕ — wow!!! 2024"
PROMPTS = ["a photo of a cat", "", LONG, UNICODE]


def clip_tokenizers():
    vocab, merges = clip_vocabulary(BPE)
    clip_l = CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=77)
    big_g = CLIPTokenizer(vocab=vocab, merges=merges, pad_token="!", model_max_length=77)
    assert clip_l.pad_token_id == 49407 and big_g.pad_token_id == 0
    return clip_l, big_g


def t5_tokenizer():
    folder = tempfile.mkdtemp()
    shutil.copy(SPIECE, os.path.join(folder, "spiece.model"))
    tokenizer = T5Tokenizer.from_pretrained(folder)
    shutil.rmtree(folder)
    sp = spm.SentencePieceProcessor(model_file=SPIECE)
    for prompt in PROMPTS:
        assert tokenizer(prompt)["input_ids"] == sp.encode(prompt) + [1], prompt
    return tokenizer


def round_f16(model):
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())


def sd3_clip_l():
    """clip_l with a text_projection: SD3's first encoder is a CLIPTextModelWithProjection."""
    config = CLIPTextConfig.from_pretrained(CLIP_L)
    config.projection_dim = config.hidden_size
    model = CLIPTextModelWithProjection(config).float().eval()
    state = load_file(os.path.join(CLIP_L, "model.safetensors"))
    generator = torch.Generator().manual_seed(11)
    projection = (torch.randn(config.hidden_size, config.hidden_size, generator=generator)
                  / config.hidden_size ** 0.5).half()
    state["text_projection.weight"] = projection
    missing, unexpected = model.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    assert not unexpected and all(k.endswith("position_ids") for k in missing), (missing, unexpected)
    return model, {"text_projection.weight": projection}


def sd3_t5():
    config = T5Config(vocab_size=1128, d_model=48, d_kv=12, d_ff=37, num_layers=2, num_heads=4,
                      relative_attention_num_buckets=32, relative_attention_max_distance=128,
                      feed_forward_proj="gated-gelu", is_encoder_decoder=False, tie_word_embeddings=False,
                      dropout_rate=0.0, use_cache=False)
    torch.manual_seed(0)
    model = T5EncoderModel(config).float().eval()
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layer_norm.weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=generator))
            elif name == "shared.weight" or name.endswith("relative_attention_bias.weight"):
                p.copy_(torch.randn(p.shape, generator=generator))
            else:
                p.copy_(torch.randn(p.shape, generator=generator) / p.shape[1] ** 0.5)
    round_f16(model)
    return model


def write_t5_folder(model, folder):
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    state = {k: v.half() for k, v in model.state_dict().items() if k != "encoder.embed_tokens.weight"}
    save_sorted(state, os.path.join(folder, "model.safetensors"), {"format": "pt"})
    model.config.architectures = ["T5EncoderModel"]
    model.config.dtype = "float16"
    model.config.to_json_file(os.path.join(folder, "config.json"))
    # What wick loads must be what diffusers runs.
    reloaded = T5EncoderModel.from_pretrained(folder, dtype=torch.float32)
    for name, p in model.state_dict().items():
        assert torch.equal(p, reloaded.state_dict()[name]), name


def ids_of(tokenizer, length):
    return tokenizer(PROMPTS, padding="max_length", max_length=length, truncation=True,
                     return_tensors="pt").input_ids


def main():
    require_repo_root()
    deterministic_torch()
    os.makedirs(OUT, exist_ok=True)

    tok_l, tok_g = clip_tokenizers()
    tok_t5 = t5_tokenizer()
    clip_l = CLIPTextModel.from_pretrained(CLIP_L, dtype=torch.float32).eval()
    clip_g = CLIPTextModelWithProjection.from_pretrained(CLIP_G, dtype=torch.float32).eval()
    t5_32 = T5EncoderModel.from_pretrained(T5_32, dtype=torch.float32).eval()
    clip_l_proj, projection = sd3_clip_l()
    t5_48 = sd3_t5()
    write_t5_folder(t5_48, os.path.join(OUT, "sd3_t5"))
    save_sorted(projection, os.path.join(OUT, "sd3_clip_l_projection.safetensors"), {"format": "pt"})

    cases = {"clip_l.ids": ids_of(tok_l, 77), "clip_g.ids": ids_of(tok_g, 77), "t5.ids.512": ids_of(tok_t5, 512),
             "t5.ids.256": ids_of(tok_t5, 256)}
    with torch.no_grad():
        flux = FluxPipeline(scheduler=None, vae=None, text_encoder=clip_l, tokenizer=tok_l, text_encoder_2=t5_32,
                            tokenizer_2=tok_t5, transformer=None)
        for name, length in (("flux_dev", 512), ("flux_schnell", 256)):
            embeds, pooled, text_ids = flux.encode_prompt(PROMPTS, prompt_2=None, max_sequence_length=length)
            assert embeds.shape == (4, length, 32) and pooled.shape == (4, 16) and not text_ids.any()
            cases[f"{name}.prompt_embeds"], cases[f"{name}.pooled_prompt_embeds"] = embeds, pooled

        sd3 = StableDiffusion3Pipeline(transformer=None, scheduler=None, vae=None, text_encoder=clip_l_proj,
                                       tokenizer=tok_l, text_encoder_2=clip_g, tokenizer_2=tok_g,
                                       text_encoder_3=t5_48, tokenizer_3=tok_t5)
        embeds, negative, pooled, negative_pooled = sd3.encode_prompt(
            PROMPTS, PROMPTS, PROMPTS, do_classifier_free_guidance=True, negative_prompt=None, max_sequence_length=256)
        assert embeds.shape == (4, 77 + 256, 48) and pooled.shape == (4, 16 + 32)
        assert not embeds[:, :77, 32:].any(), "the CLIP part is padded with zeros"
        # The negative prompt (None -> "") is encoded like any prompt: it equals prompt 1 ("").
        assert torch.equal(negative, embeds[1:2].expand_as(negative))
        assert torch.equal(negative_pooled, pooled[1:2].expand_as(negative_pooled))
        cases["sd3.prompt_embeds"], cases["sd3.pooled_prompt_embeds"] = embeds, pooled
        # SAI's sd3_infer.py and ComfyUI pool CLIP-L without its projection.
        unprojected = clip_l_proj.text_model(input_ids=cases["clip_l.ids"]).pooler_output
        cases["sd3.pooled_unprojected"] = torch.cat([unprojected, pooled[:, 16:]], dim=-1)

        sdxl = StableDiffusionXLPipeline(vae=None, text_encoder=clip_l, text_encoder_2=clip_g, tokenizer=tok_l,
                                         tokenizer_2=tok_g, unet=None, scheduler=None,
                                         force_zeros_for_empty_prompt=True, add_watermarker=False)
        embeds, negative, pooled, negative_pooled = sdxl.encode_prompt(
            PROMPTS, device=torch.device("cpu"), num_images_per_prompt=1, do_classifier_free_guidance=True,
            negative_prompt=None)
        assert embeds.shape == (4, 77, 32) and pooled.shape == (4, 32)
        assert not negative.any() and not negative_pooled.any() and negative.shape == embeds.shape
        cases["sdxl.prompt_embeds"], cases["sdxl.pooled_prompt_embeds"] = embeds, pooled
        cases["sdxl.negative_prompt_embeds"], cases["sdxl.negative_pooled_prompt_embeds"] = negative, negative_pooled
        # An explicit "" is encoded, not zeroed: force_zeros_for_empty_prompt applies to a missing negative prompt.
        _, negative, _, negative_pooled = sdxl.encode_prompt(
            PROMPTS, device=torch.device("cpu"), num_images_per_prompt=1, do_classifier_free_guidance=True,
            negative_prompt="")
        assert torch.equal(negative, embeds[1:2].expand_as(negative)) and negative.any()
        assert torch.equal(negative_pooled, pooled[1:2].expand_as(negative_pooled))

    metadata = {"prompts": json.dumps(PROMPTS, ensure_ascii=True),
                "made_by": "tests/reference/make_prompt_fixtures.py",
                "versions": json.dumps({"torch": torch.__version__.split("+")[0],
                                        "transformers": transformers.__version__,
                                        "diffusers": diffusers.__version__}, sort_keys=True)}
    tensors = {k: (v.to(torch.int64) if not v.is_floating_point() else v.float()) for k, v in cases.items()}
    save_sorted(tensors, os.path.join(OUT, "encode_prompt_cases.safetensors"), metadata)
    print_file_sizes(OUT)


if __name__ == "__main__":
    main()
