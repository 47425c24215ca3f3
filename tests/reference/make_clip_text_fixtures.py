#!/usr/bin/env python3
"""Generates tests/data/clip_text/: two tiny random CLIP text encoders, one like OpenAI CLIP-L (quick-GELU,
CLIPTextModel) and one like OpenCLIP bigG (GELU, CLIPTextModelWithProjection), as transformers folders, the bigG
one also in OpenCLIP names under SDXL's prefix, and what transformers computes for real token ids. The OpenCLIP file
is made by this script's own converter and checked independently with open_clip's own model code. See
tests/data/clip_text/README.md for every file and tensor.

Made with (pip, CPU only): torch 2.15.0, transformers 5.24.0, open-clip-torch 3.3.0, safetensors 0.8.0, numpy 2.4.6,
Python 3.11. Run from the repository root:
    /tmp/venv/bin/pip install torch transformers open-clip-torch safetensors numpy
    /tmp/venv/bin/python tests/reference/make_clip_text_fixtures.py
Everything runs on the CPU, one thread, torch.use_deterministic_algorithms(True), default (SDPA) attention; every
random tensor comes from a seeded torch.Generator, so a rerun rewrites byte-identical files.

Models (vocab 49408 and 77 positions, so that real CLIP token ids work; LayerNorm eps 1e-5):
  clip_l: CLIPTextModel, hidden 16, 3 layers, 4 heads of 4, MLP 37, hidden_act quick_gelu, eos_token_id 2 (the
          legacy value OpenAI's and LAION's released configs carry: transformers then pools at argmax(ids)).
  clip_g: CLIPTextModelWithProjection, hidden 16, 2 layers, 2 heads of 8, MLP 37, hidden_act gelu, projection_dim
          32 (text_projection.weight [32, 16], not square, so a missed transpose cannot load), eos_token_id 49407
          (transformers then pools at the first id == 49407).
The width is 16, not 32, to halve the committed size: the token embedding (49408 rows) is almost all of it.
After construction every parameter is redrawn: Linear weights N(0, 1/fan_in), biases N(0, 0.1^2), LayerNorm
weights 1 + 0.1 N(0, 1) and biases 0.1 N(0, 1), position embeddings N(0, 0.5^2), token embeddings N(0, 0.5^2)
rounded to multiples of 1/64 (so that git compresses them); then every parameter is rounded to float16, the dtype
the real files ship in, and the files are float16. References are computed in float32 from those float16 values,
so they are exactly what a float32 model loading the files computes.

Files (names as the real ones):
  clip_l/{config.json, model.safetensors}: keys "text_model.*", as every real diffusers text_encoder/ and
      ComfyUI's clip_l.safetensors (transformers 5.24's own save_pretrained of a CLIPTextModel drops the
      "text_model." prefix; it loads this folder with 0 missing / 0 unexpected keys, checked below).
  clip_g/{config.json, model.safetensors}: CLIPTextModelWithProjection's save_pretrained ("text_model.*",
      "text_projection.weight"), as diffusers' text_encoder_2/.
  sdxl_clip_g_openclip.safetensors: clip_g in OpenCLIP names under "conditioner.embedders.1.model." plus
      "logit_scale", as SDXL single files hold bigG (sgm's FrozenOpenCLIPEmbedder2 keeps open_clip's CLIP minus
      .visual). Converter (openclip_from_hf): token_embedding.weight, positional_embedding, ln_final,
      transformer.resblocks.N.{ln_1, ln_2, attn.out_proj, mlp.c_fc (fc1), mlp.c_proj (fc2)}, attn.in_proj_weight /
      in_proj_bias = rows [q; k; v], text_projection = text_projection.weight TRANSPOSED ([16, 32]).
  cases.safetensors: ids and the outputs (see below).

Independent check of the OpenCLIP file: open_clip.model.CLIP(embed_dim=32, text_cfg width 16, heads 2, layers 2,
mlp_ratio 37/16, tiny vision tower) with .visual deleted has exactly the file's keys (without the prefix); it loads
them strict, and its encode_text and a replica of sgm's FrozenOpenCLIPEmbedder2.encode_with_transformer
(penultimate = the input of the last resblock, last = ln_final(output), pooled = argmax(ids) row @ projection)
match transformers (errors printed, all below 1e-6; see README).

Inputs: ids [3, 77] int64, real CLIP BPE ids: row 0 "a photo of a cat" = BOS 49406, 320, 1125, 539, 320, 2368,
EOS 49407, padded with 49407 (CLIP-L's tokenizer pads with EOS); row 1 "a red cube on a table" = 49406, 320, 736,
11353, 525, 320, 2175, 49407, padded with 0 (bigG's tokenizers pad with "!" = 0); row 2 = 77 ids below BOS, with
neither BOS nor EOS, where the two pooling rules disagree: argmax(ids) is the largest id's position, the first-EOS
rule pools position 0. (With BOS present both rules agree whenever EOS is present, and pool BOS otherwise; with
CLIP's 49408-row vocabulary they only differ on sequences without EOS and BOS, or with added ids above 49407.)

Outputs per model m in (l, g), float32: m.last_hidden_state [3, 77, 16] (after final_layer_norm),
m.hidden_states.K for K = 0..n_layers (transformers' hidden_states: embeddings, then each layer, no final LN;
m.hidden_states.{n_layers - 1} is the penultimate), m.pooled_argmax / m.pooled_first_eos [3, 16] (transformers'
pooler_output with eos_token_id 2, and with 49407), for g also g.text_embeds_argmax / g.text_embeds_first_eos
[3, 32]. bf16: the transformers model cast to bfloat16 (weights float16 -> bfloat16, round to nearest even) on the
same ids: m.bf16.last_hidden_state, m.bf16.penultimate, m.bf16.pooled (the folder config's rule), g.bf16.text_embeds,
stored as float32.
"""
import json
import os
import shutil
import sys

import numpy as np
import torch
from safetensors.torch import load_file, save_file

import open_clip
import transformers
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

from reference_common import data_dir
from reference_torch import deterministic_torch, rel_err_f32

OUT_DIR = data_dir("clip_text")
SDXL_G_PREFIX = "conditioner.embedders.1.model."
VOCAB, POSITIONS, HIDDEN, MLP = 49408, 77, 16, 37
BOS, EOS = 49406, 49407

CONFIGS = {
    "l": dict(num_hidden_layers=3, num_attention_heads=4, hidden_act="quick_gelu", eos_token_id=2),
    "g": dict(num_hidden_layers=2, num_attention_heads=2, hidden_act="gelu", eos_token_id=EOS, projection_dim=32),
}


def text_config(key, **override):
    kwargs = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=MLP, max_position_embeddings=POSITIONS,
                  layer_norm_eps=1e-5, bos_token_id=BOS, pad_token_id=1, attention_dropout=0.0,
                  projection_dim=CONFIGS[key].get("projection_dim", 512))
    kwargs.update({k: v for k, v in CONFIGS[key].items() if k != "projection_dim"})
    kwargs.update(override)
    return CLIPTextConfig(**kwargs)


def model_class(key):
    return CLIPTextModelWithProjection if key == "g" else CLIPTextModel


def redraw(model, seed):
    """New values for every parameter (see the docstring), rounded to float16."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("token_embedding.weight"):
                v = torch.round(torch.randn(p.shape, generator=gen) * 0.5 * 64) / 64
            elif name.endswith("position_embedding.weight"):
                v = torch.randn(p.shape, generator=gen) * 0.5
            elif "layer_norm" in name:
                noise = torch.randn(p.shape, generator=gen) * 0.1
                v = 1 + noise if name.endswith("weight") else noise
            elif name.endswith("bias"):
                v = torch.randn(p.shape, generator=gen) * 0.1
            else:
                v = torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5
            p.copy_(v.half().float())


def hf_state_dict(key, model):
    """Real-file names: every tensor under "text_model." (CLIPTextModelWithProjection already is; 5.24's flat
    CLIPTextModel is not), text_projection.weight at the top."""
    out = {}
    for name, t in model.state_dict().items():
        if name.endswith("position_ids"):
            continue
        full = name if name.startswith(("text_model.", "text_projection.")) else "text_model." + name
        out[full] = t.detach().half().contiguous()
    return out


def write_folder(key, state):
    folder = os.path.join(OUT_DIR, "clip_" + key)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    save_file(dict(sorted(state.items())), os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    config = text_config(key)
    config.architectures = [model_class(key).__name__]
    config.dtype = "float16"
    config.save_pretrained(folder)
    return folder


def openclip_from_hf(state, n_layers):
    """This script's own converter: transformers names -> OpenCLIP names (without a prefix)."""
    out = {"token_embedding.weight": state["text_model.embeddings.token_embedding.weight"],
           "positional_embedding": state["text_model.embeddings.position_embedding.weight"],
           "ln_final.weight": state["text_model.final_layer_norm.weight"],
           "ln_final.bias": state["text_model.final_layer_norm.bias"],
           "text_projection": state["text_projection.weight"].t().contiguous()}
    renames = {"layer_norm1": "ln_1", "layer_norm2": "ln_2", "self_attn.out_proj": "attn.out_proj",
               "mlp.fc1": "mlp.c_fc", "mlp.fc2": "mlp.c_proj"}
    for n in range(n_layers):
        hf, oc = f"text_model.encoder.layers.{n}.", f"transformer.resblocks.{n}."
        for a, b in renames.items():
            for suffix in ("weight", "bias"):
                out[f"{oc}{b}.{suffix}"] = state[f"{hf}{a}.{suffix}"]
        for suffix in ("weight", "bias"):
            out[f"{oc}attn.in_proj_{suffix}"] = torch.cat(
                [state[f"{hf}self_attn.{p}_proj.{suffix}"] for p in ("q", "k", "v")], 0).contiguous()
    return out


def make_ids():
    gen = torch.Generator().manual_seed(7)
    rows = [[BOS, 320, 1125, 539, 320, 2368, EOS], [BOS, 320, 736, 11353, 525, 320, 2175, EOS]]
    ids = torch.zeros(3, POSITIONS, dtype=torch.int64)
    ids[0] = EOS
    ids[0, :len(rows[0])] = torch.tensor(rows[0])
    ids[1, :len(rows[1])] = torch.tensor(rows[1])
    ids[2] = torch.randint(0, BOS, (POSITIONS,), generator=gen)
    return ids


def run_hf(model, ids, eos_token_id):
    """transformers' outputs with the pooling rule of eos_token_id (2: argmax, else the first id == eos); for
    CLIPTextModelWithProjection also the inner model's pooler_output (which the outer output does not carry)."""
    text_model = model.text_model if hasattr(model, "text_model") else model
    saved = text_model.eos_token_id
    text_model.eos_token_id = eos_token_id
    try:
        with torch.no_grad():
            out = model(input_ids=ids, output_hidden_states=True)
            pooled = text_model(input_ids=ids).pooler_output
    finally:
        text_model.eos_token_id = saved
    return out, pooled


def outputs(key, model, ids, cases):
    n_layers = model.config.num_hidden_layers
    rules = {"argmax": run_hf(model, ids, 2), "first_eos": run_hf(model, ids, EOS)}
    base = rules["argmax"][0]
    cases[f"{key}.last_hidden_state"] = base.last_hidden_state
    assert len(base.hidden_states) == n_layers + 1
    for k, h in enumerate(base.hidden_states):
        cases[f"{key}.hidden_states.{k}"] = h
    for rule, (out, pooled) in rules.items():
        cases[f"{key}.pooled_{rule}"] = pooled
        if key == "g":
            cases[f"g.text_embeds_{rule}"] = out.text_embeds
            with torch.no_grad():
                assert torch.equal(out.text_embeds, model.text_projection(pooled))
        else:
            assert torch.equal(out.pooler_output, pooled)
    positions = {"argmax": ids.argmax(-1), "first_eos": (ids == EOS).int().argmax(-1)}
    for rule, at in positions.items():
        assert torch.equal(cases[f"{key}.pooled_{rule}"], base.last_hidden_state[torch.arange(3), at])
    assert not torch.equal(cases[f"{key}.pooled_argmax"][2], cases[f"{key}.pooled_first_eos"][2])

    # bf16: the same model cast to bfloat16, the folder config's rule.
    rule = "argmax" if model.config.eos_token_id == 2 else "first_eos"
    bf16 = model_class(key).from_pretrained(os.path.join(OUT_DIR, "clip_" + key), dtype=torch.bfloat16).eval()
    with torch.no_grad():
        out = bf16(input_ids=ids, output_hidden_states=True)
        cases[f"{key}.bf16.last_hidden_state"] = out.last_hidden_state.float()
        cases[f"{key}.bf16.penultimate"] = out.hidden_states[-2].float()
        if key == "g":
            cases["g.bf16.text_embeds"] = out.text_embeds.float()
            cases["g.bf16.pooled"] = bf16.text_model(input_ids=ids).pooler_output.float()
        else:
            cases["l.bf16.pooled"] = out.pooler_output.float()
    for name in ("last_hidden_state", "penultimate", "pooled"):
        f32 = cases[f"{key}.{name}"] if name == "last_hidden_state" else (
            cases[f"{key}.hidden_states.{n_layers - 1}"] if name == "penultimate" else cases[f"{key}.pooled_{rule}"])
        print(f"  {key} bf16 {name} vs f32: {rel_err_f32(cases[f'{key}.bf16.{name}'], f32):.2e}")
    if key == "g":
        error = rel_err_f32(cases["g.bf16.text_embeds"], cases["g.text_embeds_" + rule])
        print(f"  g bf16 text_embeds vs f32: {error:.2e}")


def check_openclip(oc_state, ids, cases):
    """open_clip's own CLIP (minus .visual, as SDXL keeps it) loads the converted tensors strict and computes
    what transformers computes."""
    cfg = CONFIGS["g"]
    text_cfg = open_clip.model.CLIPTextCfg(context_length=POSITIONS, vocab_size=VOCAB, width=HIDDEN,
                                           heads=cfg["num_attention_heads"], layers=cfg["num_hidden_layers"],
                                           mlp_ratio=MLP / HIDDEN, pool_type="argmax")
    vision_cfg = open_clip.model.CLIPVisionCfg(layers=1, width=16, head_width=8, patch_size=8, image_size=16)
    clip = open_clip.model.CLIP(embed_dim=cfg["projection_dim"], vision_cfg=vision_cfg, text_cfg=text_cfg,
                                quick_gelu=False)
    del clip.visual
    expected = set(clip.state_dict().keys())
    got = set(oc_state.keys())
    assert expected == got, (sorted(expected - got), sorted(got - expected))
    clip.load_state_dict({k: v.float() for k, v in oc_state.items()}, strict=True)
    clip.eval()
    with torch.no_grad():
        embeds = clip.encode_text(ids)
        # sgm's FrozenOpenCLIPEmbedder2.encode_with_transformer (layer "penultimate", always_return_pooled).
        x = clip.token_embedding(ids) + clip.positional_embedding
        blocks = clip.transformer.resblocks
        for i, block in enumerate(blocks):
            if i == len(blocks) - 1:
                penultimate = x
            x = block(x, attn_mask=clip.attn_mask)
        last = clip.ln_final(x)
        pooled = last[torch.arange(ids.shape[0]), ids.argmax(dim=-1)] @ clip.text_projection
    n = cfg["num_hidden_layers"]
    errors = {"encode_text vs text_embeds_argmax": rel_err_f32(embeds, cases["g.text_embeds_argmax"]),
              "sgm pooled vs text_embeds_argmax": rel_err_f32(pooled, cases["g.text_embeds_argmax"]),
              "sgm penultimate vs hidden_states[-2]": rel_err_f32(penultimate, cases[f"g.hidden_states.{n - 1}"]),
              "sgm last vs last_hidden_state": rel_err_f32(last, cases["g.last_hidden_state"])}
    # open_clip's 'eos' pooling is transformers' first-EOS rule.
    text_tower = open_clip.transformer.TextTransformer(
        context_length=POSITIONS, vocab_size=VOCAB, width=HIDDEN, heads=cfg["num_attention_heads"],
        layers=cfg["num_hidden_layers"], mlp_ratio=MLP / HIDDEN, output_dim=cfg["projection_dim"], pool_type="eos",
        eos_id=EOS)
    text_tower.load_state_dict({k: v.float() for k, v in oc_state.items() if k != "logit_scale"}, strict=True)
    with torch.no_grad():
        errors["TextTransformer(pool 'eos') vs text_embeds_first_eos"] = rel_err_f32(
            text_tower.eval()(ids), cases["g.text_embeds_first_eos"])
    for name, e in errors.items():
        print(f"  open_clip {name}: {e:.2e}")
        assert e < 1e-6, name


def main():
    deterministic_torch()
    os.makedirs(OUT_DIR, exist_ok=True)
    ids = make_ids()
    cases = {"ids": ids}
    states = {}
    for seed, key in enumerate(("l", "g")):
        torch.manual_seed(seed)
        model = model_class(key)(text_config(key)).eval()
        redraw(model, 100 + seed)
        states[key] = hf_state_dict(key, model)
        folder = write_folder(key, states[key])
        # transformers reads the folder back: nothing missing or unexpected, the same values.
        loaded, info = model_class(key).from_pretrained(folder, dtype=torch.float32, output_loading_info=True)
        assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
        sd = loaded.state_dict()
        for name, t in states[key].items():
            short = name if name in sd else name[len("text_model."):]
            assert torch.equal(sd[short], t.float()), name
        print(f"{key}: {sum(t.numel() for t in states[key].values())} parameters, {len(states[key])} tensors")
        outputs(key, loaded.eval(), ids, cases)

    oc = openclip_from_hf(states["g"], CONFIGS["g"]["num_hidden_layers"])
    oc["logit_scale"] = torch.tensor(np.log(1 / 0.07), dtype=torch.float16)
    check_openclip(oc, ids, cases)
    save_file({SDXL_G_PREFIX + k: v for k, v in sorted(oc.items())},
              os.path.join(OUT_DIR, "sdxl_clip_g_openclip.safetensors"), metadata={"format": "pt"})

    cases = {k: (v.float() if v.is_floating_point() else v).contiguous() for k, v in sorted(cases.items())}
    save_file(cases, os.path.join(OUT_DIR, "cases.safetensors"), metadata={"format": "pt"})
    for name in sorted(os.listdir(OUT_DIR)):
        path = os.path.join(OUT_DIR, name)
        size = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)) if os.path.isdir(path) \
            else os.path.getsize(path)
        print(f"  {name}: {size} bytes")


if __name__ == "__main__":
    sys.exit(main())
