#!/usr/bin/env python3
"""Generates tests/data/adapters/*.safetensors for tests/models/adapters_test.cpp: forward and backward of
PEFT's own DoRA (Linear) and LoRA (Conv2d) layers, so that wick's DoRALinear (DoraAxis::Output) and
LoRAConv2d are checked against PEFT itself rather than against a re-derivation (f32, CPU, one thread,
deterministic algorithms; the shared set-up is in reference_torch.py).

Made with torch 2.15.0 (+cu132 wheel, CPU only), peft 0.21.2, safetensors 0.8.0. Run from the repository
root:
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch peft safetensors
    /tmp/venv/bin/python tests/reference/make_adapter_fixtures.py
Rerunning reproduces every tensor bit for bit (the metadata's order in the header may differ).

Each file holds, under wick's parameter names (PEFT's lora_A -> lora_down, lora_B -> lora_up,
lora_magnitude_vector -> magnitude):
    param.<name>    weight, bias (the frozen base), lora_down.weight, lora_up.weight[, magnitude]
    input, target   the batch; loss = mean((output - target)^2)
    output          the PEFT layer's output (train mode)
    loss            0-d
    grad.<name>     d loss / d adapter parameter (lora_down, lora_up[, magnitude]); grad.input
    merged.weight   the base weight after PEFT's merge (merge_adapter)
and, for the dropout case, dropout_multiplier (keep / (1 - p)), the mask PEFT's lora_dropout applied.

Cases
    dora_linear.safetensors          LoraConfig(r=4, lora_alpha=8, use_dora=True) on Linear(12 -> 10, bias);
                                     lora_B random (non-zero), the magnitude perturbed away from ||W||_row;
                                     input [2, 3, 12]
    dora_linear_dropout.safetensors  the same with lora_dropout=0.25 in train mode, the dropout replaced by a
                                     fixed mask so the output is reproducible: PEFT then computes
                                     base(x) + (m/n - 1) * (x_d W^T) + (m/n) * s * (x_d A^T B^T), x_d = dropped x
    lora_conv.safetensors            LoraConfig(r=4, lora_alpha=8) on Conv2d(6 -> 8, 3x3, stride 1, padding 1,
                                     bias); lora_B random; input [2, 6, 5, 7]
    lora_conv_stride2.safetensors    the same conv with stride 2, padding 1 (output [2, 8, 3, 4])
"""
import copy
import os

import peft
import safetensors
import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import save_file
from torch import nn

from reference_common import data_dir
from reference_torch import deterministic_torch, generator_metadata, uniform

OUT_DIR = data_dir("adapters")
RANK, ALPHA = 4, 8.0


class Holder(nn.Module):
    """A one-layer model for get_peft_model to target ("layer")."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        return self.layer(x)


class FixedMask(nn.Module):
    """Stands in for nn.Dropout: multiplies by a fixed keep / (1 - p) tensor."""

    def __init__(self, multiplier):
        super().__init__()
        self.multiplier = multiplier

    def forward(self, x):
        return x * self.multiplier


def wrap(base, gen, use_dora, dropout=0.0):
    """PEFT's adapter on `base` with seeded A, random non-zero B and (DoRA) a perturbed magnitude."""
    torch.manual_seed(0)  # PEFT draws lora_A from the global generator; it is overwritten below anyway
    config = LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=["layer"], use_dora=use_dora,
                        lora_dropout=dropout, init_lora_weights=True)
    model = get_peft_model(Holder(base), config)
    layer = model.base_model.model.layer
    a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
    with torch.no_grad():
        fan_in = a[0].numel()
        a.copy_(uniform(gen, a.shape, fan_in ** -0.5))
        b.copy_(uniform(gen, b.shape, RANK ** -0.5) * 0.5)
        if use_dora:
            m = layer.lora_magnitude_vector["default"].weight
            m.mul_(1 + 0.2 * uniform(gen, m.shape, 1.0))
    model.train()
    return model, layer


def params_of(layer, use_dora):
    base = layer.get_base_layer()
    out = {"weight": base.weight, "lora_down.weight": layer.lora_A["default"].weight,
           "lora_up.weight": layer.lora_B["default"].weight}
    if base.bias is not None:
        out["bias"] = base.bias
    if use_dora:
        out["magnitude"] = layer.lora_magnitude_vector["default"].weight
    return out


def finish(name, model, layer, use_dora, x, target, metadata, extra=None):
    """Runs the PEFT layer, differentiates the MSE loss and writes the fixture."""
    x = x.clone().requires_grad_(True)
    params = params_of(layer, use_dora)
    trainable = [n for n in params if n not in ("weight", "bias")]
    y = model(x)
    loss = torch.mean((y - target) ** 2)
    grads = torch.autograd.grad(loss, [params[n] for n in trainable] + [x])
    tensors = {"param." + n: p.detach().clone().contiguous() for n, p in params.items()}
    tensors.update({"grad." + n: g.contiguous() for n, g in zip(trainable, grads[:-1])})
    tensors["grad.input"] = grads[-1].contiguous()
    tensors.update({"input": x.detach().contiguous(), "target": target.contiguous(),
                    "output": y.detach().contiguous(), "loss": loss.detach().reshape(())})
    merged = copy.deepcopy(model)
    merged.merge_adapter()
    tensors["merged.weight"] = merged.base_model.model.layer.get_base_layer().weight.detach().clone().contiguous()
    tensors.update(extra or {})
    path = os.path.join(OUT_DIR, name)
    save_file(tensors, path, metadata=metadata)
    size = os.path.getsize(path)
    print(f"{path}: {len(tensors)} tensors, {size} bytes, loss {loss.item():.8g}")
    return size


def make_dora_linear(gen, metadata, dropout):
    base = nn.Linear(12, 10, bias=True)
    with torch.no_grad():
        base.weight.copy_(uniform(gen, base.weight.shape, 12 ** -0.5))
        base.bias.copy_(uniform(gen, base.bias.shape, 12 ** -0.5))
    model, layer = wrap(base, gen, use_dora=True, dropout=dropout)
    x = torch.randn((2, 3, 12), generator=gen)
    target = torch.randn((2, 3, 10), generator=gen)
    extra = None
    if dropout > 0:
        keep = (torch.rand(x.shape, generator=gen) >= dropout).float()
        multiplier = keep / (1 - dropout)
        layer.lora_dropout["default"] = FixedMask(multiplier)
        extra = {"dropout_multiplier": multiplier.contiguous()}
        name = "dora_linear_dropout.safetensors"
    else:
        name = "dora_linear.safetensors"
    return finish(name, model, layer, True, x, target, metadata, extra)


def make_lora_conv(gen, metadata, stride, name):
    base = nn.Conv2d(6, 8, 3, stride=stride, padding=1, bias=True)
    with torch.no_grad():
        base.weight.copy_(uniform(gen, base.weight.shape, 54 ** -0.5))
        base.bias.copy_(uniform(gen, base.bias.shape, 54 ** -0.5))
    model, layer = wrap(base, gen, use_dora=False)
    x = torch.randn((2, 6, 5, 7), generator=gen)
    with torch.no_grad():
        out_shape = base(x).shape
    target = torch.randn(out_shape, generator=gen)
    return finish(name, model, layer, False, x, target, metadata)


def main():
    deterministic_torch()
    os.makedirs(OUT_DIR, exist_ok=True)
    metadata = generator_metadata(__file__, peft, safetensors)
    gen = torch.Generator().manual_seed(20250301)
    total = make_dora_linear(gen, metadata, 0.0)
    total += make_dora_linear(gen, metadata, 0.25)
    total += make_lora_conv(gen, metadata, 1, "lora_conv.safetensors")
    total += make_lora_conv(gen, metadata, 2, "lora_conv_stride2.safetensors")
    print(f"total {total} bytes")
    assert total < 100 * 1024, "fixtures must stay small"


if __name__ == "__main__":
    main()
