#!/usr/bin/env python3
"""Generates tests/data/qwenimage/: a tiny random Qwen-Image transformer (diffusers' QwenImageTransformer2DModel) as a
diffusers folder and as a ComfyUI-prefixed single file, its outputs on a padded batch of two samples with a non-square
odd token grid, a LoRA forward + backward computed with PEFT (on the base and on the base with float8 block Linears as
wick quantizes them), that LoRA as diffusers' training example saves it, the same for a PEFT DoRA, full-training
gradients, and Edit-style cases (reference image tokens after the target, with and without Edit-2511's zero_cond_t),
and a flow-matching training step as diffusers' Qwen-Image LoRA example computes it. See tests/data/qwenimage/README.md for every
file and tensor.

Made with (pip, CPU only): torch 2.15.0, diffusers 0.42.1, peft 0.21.2, safetensors, numpy. Run from the repository
root:
    /tmp/refvenv/bin/python tests/reference/make_qwenimage_fixtures.py
Everything runs in float32 on the CPU, one thread, deterministic algorithms; every random tensor comes from a seeded
torch.Generator, so a rerun rewrites byte-identical files.

Model: QwenImageTransformer2DModel(patch_size=2, in_channels=64, out_channels=16, num_layers=2, attention_head_dim=32,
num_attention_heads=2, joint_attention_dim=32, guidance_embeds=False, axes_dims_rope=(8, 12, 12)) (MODELS2 section
2.7): 338,400 parameters, dim 64, MLP 256. After construction every parameter is redrawn: matrices
N(0, (0.2 sqrt(64 / fan_in))^2), biases N(0, 0.1^2), norm weights 1 + 0.1 N(0, 1); then every value is rounded to
bfloat16, so that the bf16 files hold the f32 model exactly (the reference outputs are computed in f32 from those
values).

Measured (this script's last run; errors are max|a - b| / max|b|): see the printout, copied into the README.
"""
import copy
import json
import math
import os

import torch
import torch.nn.functional as F

import diffusers
import peft
from diffusers import QwenImageTransformer2DModel
from diffusers.loaders import QwenImageLoraLoaderMixin
from diffusers.pipelines.qwenimage.pipeline_qwenimage import QwenImagePipeline
from peft import LoraConfig

from reference_common import REPO, data_dir, print_total_size
from reference_torch import (adapted_modules, correctly_rounded_sinusoid, deterministic_torch, generator_metadata,
                             peft_layer, quantize_linears, rel_err, save_peft_lora, save_sorted, write_f32,
                             write_fp16_diffusers)

OUT_DIR = data_dir("qwenimage")
KWARGS = dict(patch_size=2, in_channels=64, out_channels=16, num_layers=2, attention_head_dim=32,
              num_attention_heads=2, joint_attention_dim=32, guidance_embeds=False, axes_dims_rope=(8, 12, 12))
LATENT = (6, 10)            # 3 x 5 tokens: odd and non-square, so the centring's extra index shows
REFERENCE = (8, 16)         # 4 x 8 tokens: its max(h // 2, w // 2) = 4 moves the text positions (the target's is 2)
TEXT_LENGTHS = (5, 9)       # sample 0 is padded to 9 and masked
SIGMAS = (0.375, 0.8125)  # exact in bf16: diffusers casts the timestep to the model dtype before the sinusoid
SCALE = 0.2                 # the weight matrices' scale (below)
RANK, ALPHA = 4, 8.0
COMFY_PREFIX = "model.diffusion_model."


def build_model(seed, **extra):
    torch.manual_seed(seed)
    model = QwenImageTransformer2DModel(**KWARGS, **extra)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif p.ndim == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(SCALE * (64.0 / p.shape[1]) ** 0.5 * torch.randn(p.shape, generator=gen))
            p.copy_(p.to(torch.bfloat16).float())
    return model.eval()


def pack(latents):
    b, c, h, w = latents.shape
    return QwenImagePipeline._pack_latents(latents, b, c, h, w)


def unpack(tokens, h, w):
    b, n, f = tokens.shape
    c = f // 4
    return tokens.view(b, h // 2, w // 2, c, 2, 2).permute(0, 3, 1, 4, 2, 5).reshape(b, c, h, w)


def make_inputs(seed):
    """Latents [2, 16, 6, 10], context [2, 9, 32] whose padding rows of sample 0 hold random values (the mask alone
    must keep them out), mask [2, 9] (1 = text token), sigma [2]."""
    gen = torch.Generator().manual_seed(seed)
    latents = torch.randn((2, 16) + LATENT, generator=gen)
    context = torch.randn((2, max(TEXT_LENGTHS), KWARGS["joint_attention_dim"]), generator=gen)
    mask = torch.zeros((2, max(TEXT_LENGTHS)))
    for i, n in enumerate(TEXT_LENGTHS):
        mask[i, :n] = 1
    return latents, context, mask, torch.tensor(SIGMAS, dtype=torch.float32)


def shapes_of(*sizes):
    return [(1, h // 2, w // 2) for h, w in sizes]


def run(model, latents, context, mask, sigma, references=None, dtype=torch.float32):
    """The model on packed latents (target first, then the references' tokens), output unpacked to the target."""
    h, w = latents.shape[-2:]
    tokens = [pack(latents)] + [pack(r) for r in (references or [])]
    sizes = [(h, w)] + [tuple(r.shape[-2:]) for r in (references or [])]
    img_shapes = [shapes_of(*sizes)] * latents.shape[0]
    out = model(hidden_states=torch.cat(tokens, 1).to(dtype), encoder_hidden_states=context.to(dtype),
                encoder_hidden_states_mask=mask, timestep=sigma.to(dtype), img_shapes=img_shapes,
                return_dict=False)[0]
    return unpack(out[:, : (h // 2) * (w // 2)].float(), h, w)


def rope_positions(model, sizes, text_length):
    """The angles diffusers' QwenEmbedRope uses for the image tokens and the text tokens, [N, 32 / 2] each (the phase
    of its complex tables): wick's position layout is checked against these."""
    img, txt = model.pos_embed([shapes_of(*sizes)], max_txt_seq_len=text_length, device=torch.device("cpu"))
    return torch.angle(img).float(), torch.angle(txt).float()


def torch_exp_rounding():
    """The entries of the 128 timestep frequencies exp(-ln(10000) i / 128) where torch's f32 exp differs from the
    correctly rounded value on this machine (it varies between CPUs); with angles sigma x 1000 of hundreds of radians
    one ulp there moves a sinusoid feature by ~2e-5."""
    e = -math.log(10000) * torch.arange(0, 128, dtype=torch.float32) / 128
    return torch.nonzero(torch.exp(e) != torch.exp(e.double()).float()).flatten().tolist()


def block_linears():
    names = []
    for i in range(KWARGS["num_layers"]):
        b = f"transformer_blocks.{i}"
        names += [f"{b}.attn.{n}" for n in ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj",
                                            "add_v_proj", "to_add_out")]
        names += [f"{b}.{s}_mlp.net.{n}" for s in ("img", "txt") for n in ("0.proj", "2")]
        names += [f"{b}.img_mod.1", f"{b}.txt_mod.1"]
    return sorted(names)


def text_only_of_last_block():
    """The Linears of the last block whose outputs only the text stream reads: the model outputs the image stream."""
    b = f"transformer_blocks.{KWARGS['num_layers'] - 1}"
    return {f"{b}.attn.add_q_proj", f"{b}.attn.to_add_out", f"{b}.txt_mlp.net.0.proj", f"{b}.txt_mlp.net.2"}


def mse(out, target):
    return F.mse_loss(out.flatten(), target.flatten())


def input_tensors(inputs):
    """The inputs as case.safetensors holds them, for the tables that run a case file's own inputs."""
    latents, context, mask, sigma = inputs
    return {"latents": latents, "context": context, "context_mask": mask, "sigma": sigma}


def adapter_gradients(model, targets, prefix, dora=False):
    """grad.<prefix>.<module>.lora_down / lora_up (/ magnitude) of the adapters the loss reaches; the last block's
    text-only Linears get none (only the image stream is output), as the tables expect of a module without one."""
    case = {}
    for m in targets:
        layer = peft_layer(model, m)
        parts = [("lora_down", layer.lora_A["default"].weight), ("lora_up", layer.lora_B["default"].weight)]
        if dora:
            parts.append(("magnitude", layer.lora_magnitude_vector["default"].weight))
        if m in text_only_of_last_block():
            for _, p in parts:
                assert p.grad is None or float(p.grad.abs().max()) == 0, m
            continue
        for name, p in parts:
            assert float(p.grad.abs().max()) > 0, (m, name)
            case[f"grad.{prefix}.{m}.{name}"] = p.grad
    return case


def make_lora_case(base, inputs, seed, use_dora=False):
    """PEFT LoRA (or DoRA: output-axis magnitudes, PEFT's initial row norms times 1 + 0.1 N(0, 1)) on block_linears(),
    A and B random (std 0.3); loss = MSE of the output against a random target. Returns the case, the output and the
    PEFT model."""
    model = copy.deepcopy(base)
    targets = block_linears()
    model.add_adapter(LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, use_dora=use_dora,
                                 target_modules=targets, init_lora_weights=True))
    assert adapted_modules(model) == targets, adapted_modules(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in targets:
            layer = peft_layer(model, m)
            for part in (layer.lora_A["default"], layer.lora_B["default"]):
                part.weight.copy_(0.3 * torch.randn(part.weight.shape, generator=gen))
            if use_dora:  # PEFT's initial magnitudes (the row norms of W), perturbed
                magnitude = layer.lora_magnitude_vector["default"].weight
                magnitude.mul_(1.0 + 0.1 * torch.randn(magnitude.shape, generator=gen))
    for n, p in model.named_parameters():
        p.requires_grad_(".lora_" in n)
    model.train()  # no dropout anywhere; train mode disables PEFT's DoRA cache
    target = torch.randn(inputs[0].shape, generator=gen)
    out = run(model, *inputs)
    loss = mse(out, target)
    loss.backward()
    case = {"output": out.detach(), "target": target, "loss": loss.detach().reshape(()), "alpha": torch.tensor(ALPHA),
            "rank": torch.tensor(RANK, dtype=torch.int64)}
    for m in targets:
        layer = peft_layer(model, m)
        case[f"lora.{m}.lora_down"] = layer.lora_A["default"].weight.detach()
        case[f"lora.{m}.lora_up"] = layer.lora_B["default"].weight.detach()
        if use_dora:
            case[f"lora.{m}.magnitude"] = layer.lora_magnitude_vector["default"].weight.detach()
            for part, key in (("lora_A", "lora_A"), ("lora_B", "lora_B")):
                case[f"peft.{m}.{key}"] = getattr(layer, part)["default"].weight.detach()
            case[f"peft.{m}.lora_magnitude_vector"] = layer.lora_magnitude_vector["default"].weight.detach()
    case.update(adapter_gradients(model, targets, "lora", use_dora))
    case.update(input_tensors(inputs))
    return case, out, model


def float8_case(base, case, inputs, use_dora=False):
    """The case's adapters and target on the base whose block Linears are float8 as wick's model.quantize makes them
    (reference_torch.quantize_e4m3: per-row scales, computed with as codes x scale in f32): output, loss, gradients."""
    model = copy.deepcopy(base)
    n = quantize_linears(model, ("transformer_blocks.",))
    assert n == 14 * KWARGS["num_layers"], n
    targets = block_linears()
    model.add_adapter(LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, use_dora=use_dora,
                                 target_modules=targets, init_lora_weights=True))
    with torch.no_grad():
        for m in targets:
            layer = peft_layer(model, m)
            layer.lora_A["default"].weight.copy_(case[f"lora.{m}.lora_down"])
            layer.lora_B["default"].weight.copy_(case[f"lora.{m}.lora_up"])
            if use_dora:
                layer.lora_magnitude_vector["default"].weight.copy_(case[f"lora.{m}.magnitude"])
    for n, p in model.named_parameters():
        p.requires_grad_(".lora_" in n)
    model.train()
    out = run(model, *inputs)
    loss = mse(out, case["target"])
    loss.backward()
    f8 = {"output": out.detach(), "loss": loss.detach().reshape(())}
    f8.update(adapter_gradients(model, targets, "lora", use_dora))
    return f8


def full_grad_names():
    """Small tensors on every kind of path: the text norm and both embedders, the timestep MLP, norm_out and proj_out,
    in each block the image QK norms, modulation and MLP output biases, and the text stream's of block 0 (block 1's
    text queries, output projection and MLP reach nothing: only the image stream is output)."""
    names = ["txt_norm.weight", "img_in.bias", "txt_in.bias", "time_text_embed.timestep_embedder.linear_1.bias",
             "time_text_embed.timestep_embedder.linear_2.bias", "norm_out.linear.bias", "proj_out.bias"]
    for i in range(KWARGS["num_layers"]):
        b = f"transformer_blocks.{i}"
        names += [f"{b}.attn.norm_q.weight", f"{b}.attn.norm_k.weight", f"{b}.img_mod.1.bias", f"{b}.img_mlp.net.2.bias"]
    # The last block's text stream feeds only its own image tokens' attention (keys and values).
    b = "transformer_blocks.0"
    names += [f"{b}.attn.{n}.weight" for n in ("norm_added_q", "norm_added_k")]
    names += [f"{b}.txt_mod.1.bias", f"{b}.txt_mlp.net.2.bias", f"{b}.attn.to_add_out.bias"]
    names += ["transformer_blocks.1.attn.norm_added_k.weight", "transformer_blocks.1.txt_mod.1.bias"]
    return names


def full_gradients(base, inputs, seed):
    model = copy.deepcopy(base)
    for p in model.parameters():
        p.requires_grad_(True)
    gen = torch.Generator().manual_seed(seed)
    target = torch.randn(inputs[0].shape, generator=gen)
    loss = mse(run(model, *inputs), target)
    loss.backward()
    params = dict(model.named_parameters())
    out = {"full_target": target, "full_loss": loss.detach().reshape(())}
    for name in full_grad_names():
        assert float(params[name].grad.abs().max()) > 0, name
        out[f"grad.{name}"] = params[name].grad
    return out


def flow_matching_case(model, inputs, seed):
    """A training step's prediction and loss as diffusers' examples/dreambooth/train_dreambooth_lora_qwen_image.py
    computes them (weighting scheme none): x_sigma = (1 - sigma) x0 + sigma eps, the model at timestep T / 1000 with
    T = 1000 sigma the scheduler's timestep, the packed prediction unpacked, MSE against eps - x0 (the network's output
    is the velocity; no sign change). sigma = (0.25, 0.875): T and T / 1000 exact in f32. The text and mask of `case`.
    The reference uses the correctly rounded sinusoid table (reference_torch.correctly_rounded_sinusoid)."""
    _, context, mask, _ = inputs
    gen = torch.Generator().manual_seed(seed)
    x0 = torch.randn((2, 16) + LATENT, generator=gen)
    noise = torch.randn((2, 16) + LATENT, generator=gen)
    timesteps = torch.tensor([250.0, 875.0])
    sigmas = (timesteps / 1000).view(-1, 1, 1, 1)
    noisy = (1.0 - sigmas) * x0 + sigmas * noise
    with torch.no_grad(), correctly_rounded_sinusoid():
        pred = run(model, noisy, context, mask, timesteps / 1000)
    target = noise - x0
    loss = torch.mean(((pred.float() - target.float()) ** 2).reshape(target.shape[0], -1), 1).mean()
    return {"x0": x0, "noise": noise, "sigma": timesteps / 1000, "prediction": pred, "loss": loss}


def main():
    deterministic_torch()
    os.makedirs(OUT_DIR, exist_ok=True)
    meta = generator_metadata(__file__, diffusers, peft)
    model = build_model(2024)
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    n_params = sum(v.numel() for v in sd.values())
    print(f"model: {n_params} parameters, {len(sd)} tensors")
    assert n_params == 338400

    inputs = make_inputs(7)
    latents, context, mask, sigma = inputs
    with torch.no_grad():
        out = run(model, *inputs)
        singles = [run(model, latents[i:i + 1], context[i:i + 1, :n], None, sigma[i:i + 1])
                   for i, n in enumerate(TEXT_LENGTHS)]
        out_bf16 = run(copy.deepcopy(model).to(torch.bfloat16), *inputs, dtype=torch.bfloat16)
        # The padding rows' values must not matter: other garbage there gives the same output.
        other = context.clone()
        other[0, TEXT_LENGTHS[0]:] = 5.0
        garbage = rel_err(run(model, latents, other, mask, sigma), out)
    batch_vs_single = max(rel_err(s, out[i:i + 1]) for i, s in enumerate(singles))
    bf16_err = rel_err(out_bf16, out)
    print(f"  output max |.| {float(out.abs().max()):.4f}; batched (padded) vs one sample at a time "
          f"{batch_vs_single:.3e}; other padding values {garbage:.3e}; bf16 model vs f32 {bf16_err:.3e}")
    assert batch_vs_single < 1e-5 and garbage < 1e-6

    img_angles, txt_angles = rope_positions(model, [LATENT], max(TEXT_LENGTHS))
    case = {"latents": latents, "context": context, "context_mask": mask, "sigma": sigma, "output": out,
            "output_bf16": out_bf16, "hidden_states": pack(latents), "rope_image_angles": img_angles,
            "rope_text_angles": txt_angles}
    with torch.no_grad():
        case["timestep_features"] = model.time_text_embed.time_proj(sigma)
        with correctly_rounded_sinusoid():
            case["timestep_features_exact"] = model.time_text_embed.time_proj(sigma)
            case["temb_exact"] = model.time_text_embed(sigma, latents)
            case["output_exact"] = run(model, *inputs)
    print(f"  torch's f32 exp of the frequencies differs from the correctly rounded value at {torch_exp_rounding()}; "
          f"the correctly rounded table moves the output by {rel_err(case['output_exact'], out):.3e}")
    case.update(full_gradients(model, inputs, 555))
    write_f32(case, os.path.join(OUT_DIR, "case.safetensors"),
              dict(meta, model=json.dumps(KWARGS, sort_keys=True), bf16_rel_err=f"{bf16_err:.3e}",
                   batched_vs_single=f"{batch_vs_single:.3e}"))

    # Edit: one reference image after the target (frame index 1), the output sliced to the target; the same weights
    # without (Edit, Edit-2509) and with zero_cond_t (Edit-2511: the reference tokens modulated at t = 0).
    gen = torch.Generator().manual_seed(31)
    reference = torch.randn((2, 16) + REFERENCE, generator=gen)
    zero_cond = QwenImageTransformer2DModel(**KWARGS, zero_cond_t=True).eval()
    zero_cond.load_state_dict(sd, strict=True)
    with torch.no_grad():
        edit = run(model, *inputs, references=[reference])
        edit_zero = run(zero_cond, *inputs, references=[reference])
        t2i_zero = run(zero_cond, *inputs)
        with correctly_rounded_sinusoid():
            edit_exact = run(model, *inputs, references=[reference])
            edit_zero_exact = run(zero_cond, *inputs, references=[reference])
    print(f"  edit vs t2i {rel_err(edit, out):.3e}; zero_cond_t vs not {rel_err(edit_zero, edit):.3e}; "
          f"zero_cond_t without references vs t2i {rel_err(t2i_zero, out):.3e}")
    assert rel_err(t2i_zero, out) < 1e-6
    ref_angles, ref_txt_angles = rope_positions(model, [LATENT, REFERENCE], max(TEXT_LENGTHS))
    write_f32({"reference": reference, "output": edit, "output_zero_cond_t": edit_zero, "output_exact": edit_exact,
               "output_zero_cond_t_exact": edit_zero_exact,
               "rope_image_angles": ref_angles, "rope_text_angles": ref_txt_angles},
              os.path.join(OUT_DIR, "edit_case.safetensors"), meta)

    # The diffusers folder (bf16, one file, config.json) and the ComfyUI single file (bf16, prefixed names).
    folder = os.path.join(OUT_DIR, "transformer")
    write_fp16_diffusers(model, folder, torch.bfloat16)
    reloaded = QwenImageTransformer2DModel.from_pretrained(folder, torch_dtype=torch.float32)
    with torch.no_grad():
        print(f"  diffusers folder reloaded vs model: {rel_err(run(reloaded, *inputs), out):.3e}")
    save_sorted({COMFY_PREFIX + k: v.to(torch.bfloat16) for k, v in sd.items()},
                os.path.join(OUT_DIR, "comfyui_bf16.safetensors"), {"format": "pt"})

    lora_case, lora_out, lora_model = make_lora_case(model, inputs, 777)
    print(f"  LoRA loss {float(lora_case['loss']):.6f}; output change vs base {rel_err(lora_out, out):.3f}")
    write_f32(lora_case, os.path.join(OUT_DIR, "lora_case.safetensors"),
              dict(meta, lora=json.dumps({"r": RANK, "lora_alpha": ALPHA, "targets": block_linears()})))
    # The case's LoRA as diffusers' Qwen-Image training example saves it (PEFT names, lora_alpha in the metadata), and
    # diffusers' QwenImagePipeline loading it back gives the case's output.
    peft_path = os.path.join(OUT_DIR, "lora_peft.safetensors")
    save_peft_lora(lora_model, peft_path, QwenImageLoraLoaderMixin)
    reloaded = copy.deepcopy(model)
    state, alphas = QwenImageLoraLoaderMixin.lora_state_dict(peft_path, return_lora_metadata=True)
    QwenImageLoraLoaderMixin.load_lora_into_transformer(state, reloaded, metadata=alphas)
    with torch.no_grad():
        peft_err = rel_err(run(reloaded, *inputs), lora_case["output"])
    print(f"  lora_peft.safetensors loaded by diffusers vs the case's output: {peft_err:.3e}")
    assert peft_err < 1e-6, peft_err
    f8_lora = float8_case(model, lora_case, inputs)
    print(f"  float8 LoRA loss {float(f8_lora['loss']):.6f} (unquantized base: {float(lora_case['loss']):.6f}); "
          f"output change vs the f32 case {rel_err(f8_lora['output'], lora_case['output']):.3e}")
    f8_meta = dict(meta, float8="e4m3fn per-row scales on every block Linear; base computes in f32 with codes * scale")
    write_f32(f8_lora, os.path.join(OUT_DIR, "float8_lora_case.safetensors"), f8_meta)
    dora_case, dora_out, _ = make_lora_case(model, inputs, 888, use_dora=True)
    print(f"  DoRA loss {float(dora_case['loss']):.6f}; output change vs base {rel_err(dora_out, out):.3f}")
    write_f32(dora_case, os.path.join(OUT_DIR, "dora_case.safetensors"),
              dict(meta, lora=json.dumps({"r": RANK, "lora_alpha": ALPHA, "use_dora": True,
                                          "targets": block_linears()})))
    f8_dora = float8_case(model, dora_case, inputs, use_dora=True)
    print(f"  float8 DoRA loss {float(f8_dora['loss']):.6f} (unquantized base: {float(dora_case['loss']):.6f})")
    write_f32(f8_dora, os.path.join(OUT_DIR, "float8_dora_case.safetensors"), f8_meta)
    fm = flow_matching_case(model, inputs, 4321)
    print(f"  flow-matching loss (diffusers' training step) {float(fm['loss']):.6f}")
    write_f32(fm, os.path.join(OUT_DIR, "flow_matching_case.safetensors"), meta)
    print_total_size(OUT_DIR)


if __name__ == "__main__":
    main()
