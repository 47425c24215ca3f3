#!/usr/bin/env python3
"""Which keys of a Flux (Flux.1, FLUX.2), SD3, SDXL, Z-Image or Qwen-Image LoRA file ComfyUI would load: a
standard-library-only re-implementation of ComfyUI's key rule (no torch, no numpy; the safetensors headers are parsed
directly), plus a shape check.

    python3 tests/reference/comfyui_lora_keys.py --model-keys tests/data/flux/dev_bfl.safetensors --lora FILE
    python3 tests/reference/comfyui_lora_keys.py --model-keys sd3.5_medium.safetensors --lora FILE [--comfyui-map old]

--model-keys is a Flux checkpoint in Black Forest Labs' naming or an SD3 / SD3.5 MMDiT in Stability AI's naming (no
prefix, `diffusion_model.` or `model.diffusion_model.`); only its header is read; the family is told by its keys. Every LoRA key ComfyUI would not load is printed as
"lora key not loaded: <key>" (ComfyUI's own warning text); a LoRA module whose shapes do not fit the model weight is
printed as "shape mismatch: ...". Exit 1 if there is any, else the number of loaded modules is printed and the exit
status is 0. Exit 2 on a usage error.

The rule, as read (in the code index; ComfyUI is GPL, nothing of it is copied here) from comfyanonymous/ComfyUI:
  comfy/lora.py at 41444b5 (model_lora_keys_unet, load_lora) and a newer indexed copy of model_lora_keys_unet whose
  commit the index does not record (it adds the DiffSynth and `linear1_qkv` forms below); comfy/weight_adapter/lora.py
  at 6fd406f (LoRAAdapter.load: the accepted up/down spellings); comfy/lora_convert.py at 02b5222 (convert_lora,
  applied to the file first); comfy/utils.py flux_to_diffusers (indexed copy with the Flux 2 entries) and
  mmdit_to_diffusers (two indexed copies, see 2b); comfy/model_detection.py at 006dd0a (detect_unet_config, mmdit).

 1. The model's state-dict keys are "diffusion_model.<BFL key>". For every key X ending in ".weight", ComfyUI
    registers the LoRA names  lora_unet_<X without "diffusion_model." and ".weight", '.' -> '_'>  and
    diffusion_model.<...>  (the "generic" form); a key not ending in ".weight" is registered under its own name.
 2. Flux: for every diffusers name D (".weight" entries of flux_to_diffusers(depth, depth_single_blocks,
    hidden_size)) it registers  transformer.<D>,  lycoris_<D '.'->'_'>,  lora_transformer_<D '.'->'_'>  and (newer)
    <D> itself. D maps to a whole BFL weight or to a row slice: attn.to_q/to_k/to_v -> img_attn.qkv rows
    [0,h), [h,2h), [2h,3h); attn.add_q/k/v_proj -> txt_attn.qkv slices; single attn.to_q/to_k/to_v/proj_mlp ->
    linear1 rows [0,h), [h,2h), [2h,3h), [3h,7h); norm_out.linear -> final_layer.adaLN_modulation.1 (halves swapped
    by a function at merge time). Newer versions also register  diffusion_model.single_blocks.N.linear1_qkv  for
    rows [0,3h) of linear1.
 2a. FLUX.2 (dev, klein; BFL names) takes rules 1 and 2 unchanged, as Flux.1 does: ComfyUI's
    comfy.model_base.Flux2 subclasses model_base.Flux (an indexed copy of comfy/model_base.py, commit not recorded),
    so model_lora_keys_unet's `isinstance(model, Flux)` branch and flux_to_diffusers apply. flux_to_diffusers'
    "Flux 2" entries map diffusers' FLUX.2 block names: ff.linear_in / ff.linear_out / ff_context.linear_in /
    ff_context.linear_out -> img_mlp.0 / img_mlp.2 / txt_mlp.0 / txt_mlp.2 and single attn.to_qkv_mlp_proj ->
    linear1, attn.to_out -> linear2 (whole weights); the double blocks' q/k/v are the slices of rule 2. diffusers'
    FLUX.2 names outside the blocks (time_guidance_embed.*, double_stream_modulation_*.linear,
    single_stream_modulation.linear) are not in that map: a LoRA on them loads only under its BFL name (rule 1).
 2b. SD3 (comfy/lora.py model_lora_keys_unet, `isinstance(model, SD3)`; comfy/utils.py mmdit_to_diffusers): for
    every ".weight" entry D of mmdit_to_diffusers(unet_config) it registers  transformer.<D>,  base_model.model.<D>,
    lora_transformer_<D '.'->'_'>  and  lycoris_<D '.'->'_'>. ComfyUI's model detection sets depth =
    x_embedder.proj.weight rows // 64 (comfy/model_detection.py, detect_unet_config), and mmdit_to_diffusers loops
    over `num_blocks`, which defaults to that depth, with q/k/v row slices of 64 * depth rows: attn.to_q/to_k/to_v ->
    x_block.attn.qkv, attn.add_q/k/v_proj -> context_block.attn.qkv, and (in the newer map) attn2.to_q/k/v ->
    x_block.attn2.qkv; MMDIT_MAP_BLOCK renames norm1.linear, attn.to_out.0, ff.net.0.proj, ff.net.2,
    norm1_context.linear, attn.to_add_out, ff_context.net.0.proj, ff_context.net.2 (and, in the newer map,
    attn.norm_q/k, attn.norm_added_q/k, attn2.to_out.0, attn2.norm_q/k); MMDIT_MAP_BASIC the embedders, proj_out and
    norm_out.linear (swap_scale_shift), and transformer_blocks.<depth - 1>.norm1_context.linear is swapped too. Two
    versions of MMDIT_MAP_BLOCK are in the code index (their commits not recorded): the newer has the attn2 and QK-norm
    entries, the older has neither. --comfyui-map new (default) models the newer; --comfyui-map old the older, under
    which a PEFT LoRA's attn2 keys are "not loaded" (kohya-named files load under both: rule 1).
 2c. Z-Image (ComfyUI's native names: layers.N.attention.qkv / out / q_norm / k_norm, x_embedder, final_layer;
    told by layers.0.attention.qkv.weight and cap_embedder.1.weight), as MODELS2 section 1.6 "LoRA files ComfyUI
    loads for Z-Image" describes comfy/lora.py's Lumina2 branch and comfy/utils.py z_image_to_diffusers (not re-read
    here): every diffusers name D is registered as  diffusion_model.<D>,  transformer.<D>,  lycoris_<D '.'->'_'>  and
    <D>; attention.to_q/to_k/to_v -> row slices [0, dim), [dim, 2 dim), [2 dim, 3 dim) of attention.qkv,
    attention.to_out.0 -> attention.out, attention.norm_q/k -> attention.q_norm/k_norm, all_x_embedder.2-1 ->
    x_embedder, all_final_layer.2-1 -> final_layer, the others (feed_forward.w1/w2/w3, adaLN_modulation.0, the
    refiners') under their own names. musubi-tuner's kohya names for the q/k/v projections
    (lora_unet_layers_0_attention_to_q) are none of these: ComfyUI does not load them (rule 1 names only the fused
    lora_unet_layers_0_attention_qkv).
 2d. Qwen-Image (told by txt_norm.weight and transformer_blocks.0.img_mod.1.weight; MODELS2 section 2.6 on
    comfy/lora.py's QwenImage branch): ComfyUI's module tree uses diffusers' names, so every ".weight" key D is
    registered as  transformer.<D>,  lycoris_<D '.'->'_'>  and  <D>  besides rule 1's names (which take musubi-tuner's
    lora_unet_transformer_blocks_0_attn_to_q as it is); nothing is sliced or renamed.
 1c. SDXL / SD 1.x UNet (sgm names, told by input_blocks.0.0.weight): rule 1's names; ComfyUI also registers the
    diffusers names of the UNet (unet_to_diffusers), which are not modelled here (a kohya file in LDM names does not
    need them). A convolution's LoRA (LoCon) is down [r, in, kh, kw], up [out, r, 1, 1].
 3. load_lora: for every registered name x it takes  x.alpha  and  x.dora_scale  if present, and a LoRA pair if the
    "up" key exists, first match wins: x.lora_up.weight / x.lora_down.weight (+ x.lora_mid.weight),
    x_lora.up.weight / x_lora.down.weight, x.lora_B.weight / x.lora_A.weight, x.lora.up.weight / x.lora.down.weight,
    x.lora_B / x.lora_A, x.lora_linear_layer.up.weight / .down.weight, x.lora_B.default.weight /
    x.lora_A.default.weight (+ x.reshape_weight); also the whole-weight forms x.diff, x.diff_b, x.set_weight,
    x.w_norm / x.b_norm. Any file key not taken is logged "lora key not loaded". An "up" key without its "down" key
    raises KeyError in ComfyUI; here it is reported as not loaded. Before that, comfy/lora_convert.py rewrites BFL
    control LoRAs, Wan-Fun and USO files; those are detected and reported as not modelled.
Not modelled (reported as not loaded): LoHa / LoKr / GLoRA / OFT / BOFT keys, text-encoder keys (lora_te*_, which
ComfyUI maps through the CLIP/T5 model, not given here).
Shape check (not ComfyUI's: ComfyUI only logs an error at merge time, or reshapes silently when the element counts
agree): lora_down [r, in] and lora_up [out, r] against the target weight [out, in] (out = slice length for a slice),
alpha a scalar, dora_scale [1, in] or [out, 1].
Also noted (not an error): a LoRA module with no alpha is merged by ComfyUI with scale 1, whatever r and the file's
lora_adapter_metadata say (diffusers applies lora_alpha / r from that metadata).
"""
import argparse
import json
import os
import re
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # also under python3 -I / PYTHONSAFEPATH
import reference_common  # noqa: E402  (standard library only, as this script)

UP_DOWN = [  # (up suffix, down suffix, mid suffix) in ComfyUI's order
    (".lora_up.weight", ".lora_down.weight", ".lora_mid.weight"),
    ("_lora.up.weight", "_lora.down.weight", None),
    (".lora_B.weight", ".lora_A.weight", None),
    (".lora.up.weight", ".lora.down.weight", None),
    (".lora_B", ".lora_A", None),
    (".lora_linear_layer.up.weight", ".lora_linear_layer.down.weight", None),
    (".lora_B.default.weight", ".lora_A.default.weight", None),
]
WHOLE = [".diff", ".diff_b", ".set_weight", ".w_norm", ".b_norm"]


def read_header(path):
    header, _ = reference_common.read_header(path)
    meta = header.pop("__metadata__", {}) or {}
    return meta, {k: v["shape"] for k, v in header.items()}


def flux_to_diffusers(depth, depth_single, hidden):
    """diffusers name -> (BFL key, row offset or None, row count or None). Only '.weight' entries are needed."""
    m = {}
    h = hidden
    for i in range(depth):
        d, b = f"transformer_blocks.{i}", f"double_blocks.{i}"
        for j, n in enumerate(("to_q", "to_k", "to_v")):
            m[f"{d}.attn.{n}.weight"] = (f"{b}.img_attn.qkv.weight", j * h, h)
        for j, n in enumerate(("add_q_proj", "add_k_proj", "add_v_proj")):
            m[f"{d}.attn.{n}.weight"] = (f"{b}.txt_attn.qkv.weight", j * h, h)
        for src, dst in (("attn.to_out.0", "img_attn.proj"), ("norm1.linear", "img_mod.lin"),
                         ("norm1_context.linear", "txt_mod.lin"), ("attn.to_add_out", "txt_attn.proj"),
                         ("ff.net.0.proj", "img_mlp.0"), ("ff.net.2", "img_mlp.2"),
                         ("ff_context.net.0.proj", "txt_mlp.0"), ("ff_context.net.2", "txt_mlp.2"),
                         ("ff.linear_in", "img_mlp.0"), ("ff.linear_out", "img_mlp.2"),
                         ("ff_context.linear_in", "txt_mlp.0"), ("ff_context.linear_out", "txt_mlp.2"),
                         ("attn.norm_q", "img_attn.norm.query_norm"), ("attn.norm_k", "img_attn.norm.key_norm"),
                         ("attn.norm_added_q", "txt_attn.norm.query_norm"),
                         ("attn.norm_added_k", "txt_attn.norm.key_norm")):
            m[f"{d}.{src}.weight"] = (f"{b}.{dst}.weight", None, None)
    for i in range(depth_single):
        s, b = f"single_transformer_blocks.{i}", f"single_blocks.{i}"
        for j, n in enumerate(("attn.to_q", "attn.to_k", "attn.to_v")):
            m[f"{s}.{n}.weight"] = (f"{b}.linear1.weight", j * h, h)
        m[f"{s}.proj_mlp.weight"] = (f"{b}.linear1.weight", 3 * h, 4 * h)
        for src, dst in (("norm.linear", "modulation.lin"), ("proj_out", "linear2"),
                         ("attn.norm_q", "norm.query_norm"), ("attn.norm_k", "norm.key_norm"),
                         ("attn.to_qkv_mlp_proj", "linear1"), ("attn.to_out", "linear2")):
            m[f"{s}.{src}.weight"] = (f"{b}.{dst}.weight", None, None)
    for dst, src in (("final_layer.linear", "proj_out"), ("img_in", "x_embedder"),
                     ("time_in.in_layer", "time_text_embed.timestep_embedder.linear_1"),
                     ("time_in.out_layer", "time_text_embed.timestep_embedder.linear_2"),
                     ("txt_in", "context_embedder"),
                     ("vector_in.in_layer", "time_text_embed.text_embedder.linear_1"),
                     ("vector_in.out_layer", "time_text_embed.text_embedder.linear_2"),
                     ("guidance_in.in_layer", "time_text_embed.guidance_embedder.linear_1"),
                     ("guidance_in.out_layer", "time_text_embed.guidance_embedder.linear_2"),
                     ("final_layer.adaLN_modulation.1", "norm_out.linear"),
                     ("pos_embed_input", "controlnet_x_embedder")):
        m[f"{src}.weight"] = (f"{dst}.weight", None, None)
    return m


MMDIT_BLOCK_RENAMES_OLD = [  # (diffusers module under transformer_blocks.N, SAI module under joint_blocks.N)
    ("norm1_context.linear", "context_block.adaLN_modulation.1"), ("attn.to_add_out", "context_block.attn.proj"),
    ("ff_context.net.0.proj", "context_block.mlp.fc1"), ("ff_context.net.2", "context_block.mlp.fc2"),
    ("norm1.linear", "x_block.adaLN_modulation.1"), ("attn.to_out.0", "x_block.attn.proj"),
    ("ff.net.0.proj", "x_block.mlp.fc1"), ("ff.net.2", "x_block.mlp.fc2"),
]
MMDIT_BLOCK_RENAMES_NEW = MMDIT_BLOCK_RENAMES_OLD + [
    ("attn.norm_added_q", "context_block.attn.ln_q"), ("attn.norm_added_k", "context_block.attn.ln_k"),
    ("attn.norm_q", "x_block.attn.ln_q"), ("attn.norm_k", "x_block.attn.ln_k"),
    ("attn2.to_out.0", "x_block.attn2.proj"), ("attn2.norm_q", "x_block.attn2.ln_q"),
    ("attn2.norm_k", "x_block.attn2.ln_k"),
]


def mmdit_to_diffusers(depth, newer):
    """diffusers name -> (SAI key, row offset or None, row count or None), '.weight' entries, as ComfyUI's map for a
    model whose x_embedder has 64 * depth rows (num_blocks = depth)."""
    m = {}
    offset = depth * 64
    for i in range(depth):
        d, b = f"transformer_blocks.{i}", f"joint_blocks.{i}"
        qkv = [("attn", ("to_q", "to_k", "to_v"), "x_block.attn.qkv"),
               ("attn", ("add_q_proj", "add_k_proj", "add_v_proj"), "context_block.attn.qkv")]
        if newer:
            qkv.append(("attn2", ("to_q", "to_k", "to_v"), "x_block.attn2.qkv"))
        for attn, names, target in qkv:
            for j, n in enumerate(names):
                m[f"{d}.{attn}.{n}.weight"] = (f"{b}.{target}.weight", j * offset, offset)
        for src, dst in (MMDIT_BLOCK_RENAMES_NEW if newer else MMDIT_BLOCK_RENAMES_OLD):
            m[f"{d}.{src}.weight"] = (f"{b}.{dst}.weight", None, None)
    for src, dst in (("context_embedder", "context_embedder"),
                     ("time_text_embed.timestep_embedder.linear_1", "t_embedder.mlp.0"),
                     ("time_text_embed.timestep_embedder.linear_2", "t_embedder.mlp.2"),
                     ("pos_embed.proj", "x_embedder.proj"),
                     ("time_text_embed.text_embedder.linear_1", "y_embedder.mlp.0"),
                     ("time_text_embed.text_embedder.linear_2", "y_embedder.mlp.2"),
                     ("norm_out.linear", "final_layer.adaLN_modulation.1"),  # swap_scale_shift at merge time
                     ("proj_out", "final_layer.linear")):
        m[f"{src}.weight"] = (f"{dst}.weight", None, None)
    return m


def zimage_to_diffusers(keys):
    """Z-Image (ComfyUI's Lumina2-style model): diffusers name -> (native key, row offset or None, row count or None),
    '.weight' entries, from the model's own keys (rule 2c)."""
    m = {}
    patch = int(round((keys["diffusion_model.x_embedder.weight"][1] // 16) ** 0.5))
    for k, shape in keys.items():
        if not k.endswith(".weight"):
            continue
        native = k[len("diffusion_model."):]
        if native.endswith(".attention.qkv.weight"):
            dim = shape[0] // 3
            stem = native[:-len("qkv.weight")]
            for j, n in enumerate(("to_q", "to_k", "to_v")):
                m[f"{stem}{n}.weight"] = (native, j * dim, dim)
            continue
        d = native
        for src, dst in ((".attention.out.", ".attention.to_out.0."), (".attention.q_norm.", ".attention.norm_q."),
                         (".attention.k_norm.", ".attention.norm_k.")):
            d = d.replace(src, dst)
        if d.startswith("x_embedder."):
            d = f"all_x_embedder.{patch}-1." + d[len("x_embedder."):]
        elif d.startswith("final_layer."):
            d = f"all_final_layer.{patch}-1." + d[len("final_layer."):]
        m[d] = (native, None, None)
    return m


def model_key_map(model_shapes, comfyui_map="new"):
    """LoRA name -> (model key with 'diffusion_model.', row offset or None, row count or None)."""
    keys = {}
    for k, shape in model_shapes.items():
        k = k[len("model."):] if k.startswith("model.diffusion_model.") else k
        k = k if k.startswith("diffusion_model.") else "diffusion_model." + k
        keys[k] = shape
    key_map = {}
    for k in keys:
        if k.endswith(".weight"):
            base = k[len("diffusion_model."):-len(".weight")]
            key_map["lora_unet_" + base.replace(".", "_")] = (k, None, None)
            key_map[k[:-len(".weight")]] = (k, None, None)
        else:
            key_map[k] = (k, None, None)
    def count(kind):
        found = (re.match(r"diffusion_model\.%s\.(\d+)\." % kind, k) for k in keys)
        return len({m.group(1) for m in found if m})

    if "diffusion_model.input_blocks.0.0.weight" in keys:  # SDXL / SD 1.x UNet in sgm's names: rule 1 (1c)
        return keys, key_map
    if "diffusion_model.joint_blocks.0.context_block.attn.qkv.weight" in keys:  # SD3 / SD3.5 (ComfyUI's "mmdit")
        depth = keys["diffusion_model.x_embedder.proj.weight"][0] // 64
        for d, (sai, off, cnt) in mmdit_to_diffusers(depth, comfyui_map == "new").items():
            target = ("diffusion_model." + sai, off, cnt)
            stem = d[:-len(".weight")]
            for name in ("transformer." + stem, "base_model.model." + stem, "lora_transformer_" + stem.replace(".", "_"),
                         "lycoris_" + stem.replace(".", "_")):
                key_map[name] = target
        return keys, key_map
    if "diffusion_model.layers.0.attention.qkv.weight" in keys and "diffusion_model.cap_embedder.1.weight" in keys:
        for d, (native, off, cnt) in zimage_to_diffusers(keys).items():  # Z-Image (rule 2c)
            target = ("diffusion_model." + native, off, cnt)
            stem = d[:-len(".weight")]
            for name in ("diffusion_model." + stem, "transformer." + stem, "lycoris_" + stem.replace(".", "_"), stem):
                key_map.setdefault(name, target)
        return keys, key_map
    if "diffusion_model.txt_norm.weight" in keys and "diffusion_model.transformer_blocks.0.img_mod.1.weight" in keys:
        for k in keys:  # Qwen-Image (rule 2d): the native names are diffusers', nothing sliced or renamed
            if k.endswith(".weight"):
                stem = k[len("diffusion_model."):-len(".weight")]
                for name in ("transformer." + stem, "lycoris_" + stem.replace(".", "_"), stem):
                    key_map.setdefault(name, (k, None, None))
        return keys, key_map
    depth, single = count("double_blocks"), count("single_blocks")
    if "diffusion_model.img_in.weight" not in keys:
        raise SystemExit("comfyui_lora_keys: --model-keys is neither a Flux checkpoint (no img_in.weight) nor an "
                         "SD3 MMDiT (no joint_blocks.0.context_block.attn.qkv.weight)")
    hidden = keys["diffusion_model.img_in.weight"][0]
    for d, (bfl, off, cnt) in flux_to_diffusers(depth, single, hidden).items():
        target = ("diffusion_model." + bfl, off, cnt)
        stem = d[:-len(".weight")]
        for name in ("transformer." + stem, "lycoris_" + stem.replace(".", "_"),
                     "lora_transformer_" + stem.replace(".", "_"), stem):
            key_map[name] = target
    for k in keys:
        if k.endswith(".weight") and ".linear1." in k:
            key_map[k.replace(".linear1.weight", ".linear1_qkv")] = (k, 0, hidden * 3)
    return keys, key_map


def check(model_path, lora_path, comfyui_map="new"):
    _, model_shapes = read_header(model_path)
    meta, lora = read_header(lora_path)
    if ("img_in.lora_A.weight" in lora and "single_blocks.0.norm.key_norm.scale" in lora) \
            or "lora_unet__blocks_0_cross_attn_k.lora_down.weight" in lora \
            or "single_blocks.37.processor.qkv_lora.up.weight" in lora \
            or any(k.startswith("t_embedder.") for k in lora):
        print("comfyui_lora_keys: this file would first be rewritten by comfy/lora_convert.py; not modelled")
        return 1
    model_keys, key_map = model_key_map(model_shapes, comfyui_map)
    loaded, modules, problems, no_alpha = set(), 0, [], []
    for x, (target, off, cnt) in key_map.items():
        alpha = x + ".alpha"
        if alpha in lora:
            loaded.add(alpha)
            if lora[alpha] not in ([], [1]):
                problems.append(f"shape mismatch: {alpha} is {lora[alpha]}, expected a scalar")
        dora = x + ".dora_scale"
        if dora in lora:
            loaded.add(dora)
        for up_s, down_s, mid_s in UP_DOWN:
            up, down = x + up_s, x + down_s
            if up not in lora:
                continue
            if down not in lora:
                break  # ComfyUI raises KeyError here; both stay "not loaded"
            loaded.update((up, down))
            if mid_s and x + mid_s in lora:
                loaded.add(x + mid_s)
            if x + ".reshape_weight" in lora:
                loaded.add(x + ".reshape_weight")
            modules += 1
            if alpha not in lora:
                no_alpha.append(x)
            shape = model_keys.get(target)
            if shape is None:
                problems.append(f"shape mismatch: {x} targets {target}, which the model does not have")
                break
            out_dim, in_dim = (cnt if cnt is not None else shape[0]), shape[1] if len(shape) > 1 else 1
            u, d = lora[up], lora[down]
            if len(shape) == 4:  # a convolution (LoCon): down [r, in, kh, kw], up [out, r, 1, 1]
                if d[1:] != shape[1:] or u != [out_dim, d[0], 1, 1]:
                    problems.append(f"shape mismatch: {x}: up {u}, down {d}; the convolution {target} {shape} "
                                    f"needs up [{out_dim}, r, 1, 1], down [r, {', '.join(map(str, shape[1:]))}]")
                break
            if len(u) != 2 or len(d) != 2 or u != [out_dim, d[0]] or d[1] != in_dim:
                problems.append(f"shape mismatch: {x}: up {u}, down {d}; the target {target}"
                                f"{'' if off is None else f' rows [{off}, {off + cnt})'} needs up [{out_dim}, r], "
                                f"down [r, {in_dim}]")
            if dora in lora and lora[dora] not in ([1, in_dim], [out_dim, 1]):
                problems.append(f"shape mismatch: {dora} is {lora[dora]}, expected [1, {in_dim}] or [{out_dim}, 1]")
            break
        for s in WHOLE:
            if x + s in lora:
                loaded.add(x + s)
                modules += 1
    not_loaded = sorted(set(lora) - loaded)
    for k in not_loaded:
        print(f"lora key not loaded: {k}")
    for p in problems:
        print(p)
    if no_alpha:
        adapter_meta = meta.get("lora_adapter_metadata")
        note = ""
        if adapter_meta:
            try:
                cfg = json.loads(adapter_meta)
                r, a = cfg.get("transformer.r"), cfg.get("transformer.lora_alpha")
                if r and a is not None and float(a) != float(r):
                    note = f"; the file's lora_adapter_metadata says lora_alpha {a} / r {r} = {float(a) / r:g}, " \
                           f"which diffusers applies and ComfyUI ignores: the two outputs differ"
            except (ValueError, TypeError, ZeroDivisionError):
                pass
        print(f"note: {len(no_alpha)} modules have no .alpha; ComfyUI merges them with scale 1{note}")
    if not_loaded or problems:
        print(f"comfyui_lora_keys: FAIL: {len(not_loaded)} keys not loaded, {len(problems)} shape problems")
        return 1
    print(f"comfyui_lora_keys: ok: {modules} modules loaded, all {len(lora)} keys used")
    return 0


def main():
    parser = argparse.ArgumentParser(description="keys of a Flux, SD3 or SDXL LoRA that ComfyUI would not load")
    parser.add_argument("--model-keys", required=True,
                        help="Flux (BFL names), SD3 (SAI names) or SDXL (sgm names) checkpoint; only its header is read")
    parser.add_argument("--lora", required=True, help="LoRA safetensors")
    parser.add_argument("--comfyui-map", choices=("new", "old"), default="new",
                        help="SD3: the newer mmdit_to_diffusers (attn2 and QK-norm entries) or the older one")
    args = parser.parse_args()
    try:
        return check(args.model_keys, args.lora, args.comfyui_map)
    except (OSError, ValueError, struct.error) as e:
        print(f"comfyui_lora_keys: {e}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
