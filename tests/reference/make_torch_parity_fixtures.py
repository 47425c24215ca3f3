#!/usr/bin/env python3
"""Generates tests/data/parity/*.safetensors for tests/models/torch_parity_test.cpp: forward and backward of
small wick models recomputed in PyTorch (f32, CPU, one thread, deterministic algorithms).

Made with torch 2.15.0 (+cu132 wheel, CPU only), numpy 2.4.6, safetensors 0.8.0. Run from the repository root:
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch numpy safetensors
    /tmp/venv/bin/python tests/reference/make_torch_parity_fixtures.py

Each file holds
    param.<wick name>   every parameter, under the name wick's module tree gives it (load with prefix "param.")
    input, target       the batch (target: I64 class labels or an f32 regression target)
    loss                the 0-d loss
    grad.<wick name>    d loss / d parameter for every parameter (all of them are trainable in the test)
    grad.input          d loss / d input

Cases
    mlp.safetensors     Sequential(Linear 784->16 "0", ReLU "1", Linear 16->10 "2"), batch 8, mean cross-entropy.
                        (The hidden width is 16, not 128, to keep the fixtures small: W1 and its gradient are
                        784 x hidden f32 each.)
    block.safetensors   pre-norm transformer block, width 32, 4 heads, 8 tokens, batch 2, MLP hidden 64:
                          h = x + attn(norm1(x));  y = h + mlp(norm2(h));  loss = mean((y - target)^2)
                        attn: qkv Linear(32 -> 96, bias), chunk into q, k, v along the last axis, each
                        [B, L, H, Dh] -> transpose(1, 2), SDPA with scale 1/sqrt(Dh), transpose back, merge,
                        proj Linear(32 -> 32). mlp: fc1 (32 -> 64) -> GELU(tanh) -> fc2 (64 -> 32).
                        LoRA (rank 4, alpha 8, scale 2) on attn.qkv and mlp.fc1:
                          base(x) + scale * (x @ lora_down^T) @ lora_up^T, lora_down [r, in], lora_up [out, r],
                        with non-zero lora_up so every adapter parameter gets a gradient.
"""
import math
import os

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from reference_common import data_dir
from reference_torch import deterministic_torch, generator_metadata, uniform

OUT_DIR = data_dir("parity")


def linear_params(gen, prefix, n_in, n_out, bias=True):
    bound = 1.0 / math.sqrt(n_in)
    out = {prefix + "weight": uniform(gen, (n_out, n_in), bound)}
    if bias:
        out[prefix + "bias"] = uniform(gen, (n_out,), bound)
    return out


def finish(params, inputs, loss, path, metadata):
    """Differentiates `loss` w.r.t. every parameter and the input and writes the fixture."""
    names = list(params.keys())
    grads = torch.autograd.grad(loss, [params[n] for n in names] + [inputs["input"]])
    tensors = {}
    for n in names:
        tensors["param." + n] = params[n].detach().contiguous()
    for n, g in zip(names, grads[:-1]):
        tensors["grad." + n] = g.detach().contiguous()
    tensors["grad.input"] = grads[-1].detach().contiguous()
    for k, v in inputs.items():
        tensors[k] = v.detach().contiguous()
    tensors["loss"] = loss.detach().reshape(())
    save_file(tensors, path, metadata=metadata)
    size = os.path.getsize(path)
    print(f"{path}: {len(tensors)} tensors, {size} bytes, loss {loss.item():.8g}")
    return size


def make_mlp(gen, metadata):
    batch, n_in, hidden, n_classes = 8, 784, 16, 10
    params = {}
    params.update(linear_params(gen, "0.", n_in, hidden))
    params.update(linear_params(gen, "2.", hidden, n_classes))
    for p in params.values():
        p.requires_grad_(True)
    x = torch.rand((batch, n_in), generator=gen, dtype=torch.float32).requires_grad_(True)
    labels = torch.randint(0, n_classes, (batch,), generator=gen, dtype=torch.int64)
    h = F.relu(F.linear(x, params["0.weight"], params["0.bias"]))
    logits = F.linear(h, params["2.weight"], params["2.bias"])
    loss = F.cross_entropy(logits, labels)
    return finish(params, {"input": x, "target": labels}, loss, os.path.join(OUT_DIR, "mlp.safetensors"), metadata)


def make_block(gen, metadata):
    batch, tokens, dim, heads, hidden, rank, alpha = 2, 8, 32, 4, 64, 4, 8.0
    head_dim = dim // heads
    scale = alpha / rank
    params = {}
    # Norm affine parameters away from (1, 0) so their gradients are exercised.
    params["norm1.weight"] = 1 + 0.1 * torch.randn(dim, generator=gen)
    params["norm1.bias"] = 0.1 * torch.randn(dim, generator=gen)
    params.update(linear_params(gen, "attn.qkv.", dim, 3 * dim))
    params["attn.qkv.lora_down.weight"] = uniform(gen, (rank, dim), 1.0 / math.sqrt(dim))
    params["attn.qkv.lora_up.weight"] = uniform(gen, (3 * dim, rank), 1.0 / math.sqrt(rank)) * 0.1
    params.update(linear_params(gen, "attn.proj.", dim, dim))
    params["norm2.weight"] = 1 + 0.1 * torch.randn(dim, generator=gen)
    params["norm2.bias"] = 0.1 * torch.randn(dim, generator=gen)
    params.update(linear_params(gen, "mlp.fc1.", dim, hidden))
    params["mlp.fc1.lora_down.weight"] = uniform(gen, (rank, dim), 1.0 / math.sqrt(dim))
    params["mlp.fc1.lora_up.weight"] = uniform(gen, (hidden, rank), 1.0 / math.sqrt(rank)) * 0.1
    params.update(linear_params(gen, "mlp.fc2.", hidden, dim))
    for p in params.values():
        p.requires_grad_(True)
    P = params

    def lora_linear(t, name):
        base = F.linear(t, P[name + ".weight"], P[name + ".bias"])
        return base + scale * F.linear(F.linear(t, P[name + ".lora_down.weight"]), P[name + ".lora_up.weight"])

    x = torch.randn((batch, tokens, dim), generator=gen).requires_grad_(True)
    target = torch.randn((batch, tokens, dim), generator=gen)

    a = F.layer_norm(x, (dim,), P["norm1.weight"], P["norm1.bias"], eps=1e-5)
    q, k, v = lora_linear(a, "attn.qkv").chunk(3, dim=-1)
    q, k, v = (t.reshape(batch, tokens, heads, head_dim).transpose(1, 2) for t in (q, k, v))
    attended = F.scaled_dot_product_attention(q, k, v, scale=1.0 / math.sqrt(head_dim))
    merged = attended.transpose(1, 2).reshape(batch, tokens, dim)
    h = x + F.linear(merged, P["attn.proj.weight"], P["attn.proj.bias"])
    m = F.layer_norm(h, (dim,), P["norm2.weight"], P["norm2.bias"], eps=1e-5)
    m = F.gelu(lora_linear(m, "mlp.fc1"), approximate="tanh")
    y = h + F.linear(m, P["mlp.fc2.weight"], P["mlp.fc2.bias"])
    loss = F.mse_loss(y, target)
    return finish(params, {"input": x, "target": target}, loss, os.path.join(OUT_DIR, "block.safetensors"), metadata)


def main():
    deterministic_torch()
    os.makedirs(OUT_DIR, exist_ok=True)
    metadata = generator_metadata(__file__, np)
    gen = torch.Generator().manual_seed(20240611)
    total = make_mlp(gen, metadata) + make_block(gen, metadata)
    print(f"total {total} bytes")
    assert total < 300 * 1024, "fixtures must stay under 300 KB"


if __name__ == "__main__":
    main()
