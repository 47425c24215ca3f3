#!/usr/bin/env python3
"""One transformer-block LoRA training step on the GPU, wick vs PyTorch eager, one table at the end.

    python3 bench/gpu/block_vs_torch.py [--binary PATH] [--steps 30] [--markdown table.md]

Runs the wick side (bench/cuda_block_bench.cpp, --benchmark_format=json; its correctness guard
prints to stderr), then the same step in PyTorch: pre-norm block, width 3072, 24 heads x 128,
4096 tokens (batch 1), MLP 12288 with GELU tanh, LayerNorm before attention and MLP; base weights
frozen in bf16, activations bf16; LoRA rank 16, alpha 16 on qkv, proj, fc1 and fc2 (f32 parameters
cast to bf16 inside the forward, as wick's LoRALinear); MSE in f32 against a random target;
backward (the block input requires a gradient, as inside a stack); AdamW(fused=True) on the LoRA
parameters. Both sides: 3 warm-up steps, CUDA events around each whole step, the median; peak
device memory of one step above the memory held before it; without and with checkpointing of the
block (torch.utils.checkpoint, use_reentrant=False).

MFU = model flops / step time / 989e12 (H100 SXM dense bf16); the model flops are those of
model_flops() below (the same formula as the wick program). Ratio = torch ms / wick ms (> 1: wick faster).
"""
import argparse
import glob
import json
import os
import site
import statistics
import subprocess
import sys

DIM, HEADS, HIDDEN, TOKENS, RANK, ALPHA = 3072, 24, 12288, 4096, 16, 16.0
PEAK_FLOPS = 989e12
LR, WEIGHT_DECAY, WARMUP = 1e-3, 1e-2, 3


def model_flops(t=TOKENS, w=DIM, h=HIDDEN, r=RANK):
    """Frozen-base LoRA step: base linears 2·T·P forward + 2·T·P backward (input gradients only),
    LoRA 6·T·r·(in+out) per linear (forward, input and weight gradients), attention 4·T²·W forward
    and 2.5x that backward."""
    p_base = 4 * w * w + 2 * w * h
    lora_in_out = (w + 3 * w) + (w + w) + (w + h) + (h + w)
    return 4 * t * p_base + 6 * t * r * lora_in_out + 3.5 * 4 * t * t * w


def library_path():
    """CUDA libraries for the wick program: the toolkit's and the nvidia-* wheels next to PyTorch
    (cuDNN, NCCL), as bench/gpu/run.sh sets them."""
    dirs = ["/usr/local/cuda/lib64"]
    for sp in site.getsitepackages():
        dirs += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib")))
    return ":".join(dirs + [os.environ.get("LD_LIBRARY_PATH", "")])


def run_wick(binary):
    env = dict(os.environ, LD_LIBRARY_PATH=library_path())
    cmd = [binary, "--benchmark_format=json"]
    print("$", " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        sys.stdout.write(proc.stdout)
        raise SystemExit(f"{binary} exited with {proc.returncode}")
    if "no CUDA device" in proc.stdout:
        print(proc.stdout.strip())
        return None
    data = json.loads(proc.stdout)
    results = {}
    for b in data["benchmarks"]:
        name = "/".join(b["name"].split("/")[:2])  # BM_wick_block_lora_step/0
        results[name] = b
    return results


def torch_block(torch, checkpointed):
    nn, F = torch.nn, torch.nn.functional
    from torch.utils.checkpoint import checkpoint
    device, bf16 = "cuda", torch.bfloat16

    class LoRALinear(nn.Module):
        def __init__(self, base):
            super().__init__()
            self.base = base
            self.lora_down = nn.Linear(base.in_features, RANK, bias=False, device=device)
            self.lora_up = nn.Linear(RANK, base.out_features, bias=False, device=device)
            nn.init.zeros_(self.lora_up.weight)
            self.scale = ALPHA / RANK

        def forward(self, x):  # wick's LoRALinear: f32 adapters cast to x's dtype, path in x's dtype
            low = F.linear(x, self.lora_down.weight.to(x.dtype))
            update = F.linear(low, self.lora_up.weight.to(x.dtype))
            return self.base(x) + update * self.scale

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
            self.qkv, self.proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
            self.fc1, self.fc2 = nn.Linear(DIM, HIDDEN), nn.Linear(HIDDEN, DIM)

        def forward(self, x):
            b, n, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
            q, k, v = (t.reshape(b, n, HEADS, DIM // HEADS).transpose(1, 2) for t in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, DIM)
            h = x + self.proj(a)
            return h + self.fc2(F.gelu(self.fc1(self.norm2(h)), approximate="tanh"))

    torch.manual_seed(3)
    block = Block().to(device=device, dtype=bf16)
    for p in block.parameters():
        p.requires_grad_(False)
    for name in ("qkv", "proj", "fc1", "fc2"):
        setattr(block, name, LoRALinear(getattr(block, name)))
    trainable = [p for p in block.parameters() if p.requires_grad]
    assert all(p.dtype == torch.float32 for p in trainable)
    assert sum(p.numel() for p in trainable) == RANK * ((DIM + 3 * DIM) + 2 * DIM + 2 * (DIM + HIDDEN))
    opt = torch.optim.AdamW(trainable, lr=LR, weight_decay=WEIGHT_DECAY, fused=True)
    x = torch.randn(1, TOKENS, DIM, device=device, dtype=bf16, requires_grad=True)
    target = torch.randn(1, TOKENS, DIM, device=device, dtype=torch.float32)

    def clear_grads():
        opt.zero_grad(set_to_none=True)
        x.grad = None

    def step():
        clear_grads()
        out = checkpoint(block, x, use_reentrant=False) if checkpointed else block(x)
        loss = F.mse_loss(out.float(), target)
        loss.backward()
        opt.step()
        return loss
    return step, clear_grads


def median_ms(torch, body, steps, warmup=WARMUP):
    for _ in range(warmup):
        body()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(steps):
        start.record()
        body()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def measure_torch(torch, checkpointed, steps):
    step, clear_grads = torch_block(torch, checkpointed)
    losses = [step().item() for _ in range(10)]  # the first 10 steps, for the log
    torch.cuda.synchronize()
    clear_grads()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    ms = median_ms(torch, step, steps, warmup=0)
    return dict(ms=ms, peak_mb=peak / 1e6, losses=losses)


def torch_matmul_flops(torch, n=8192):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    return 2.0 * n ** 3 / (median_ms(torch, lambda: a @ b, 20) * 1e-3)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_binary = os.path.join(here, "..", "..", "bin", "cuda_block_bench")
    if not os.path.exists(default_binary):
        default_binary = os.path.join(here, "..", "..", "build", "bench", "cuda_block_bench")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=default_binary)
    parser.add_argument("--steps", type=int, default=30, help="timed PyTorch steps per case")
    parser.add_argument("--markdown", help="also write the table as markdown to this path")
    args = parser.parse_args()

    wick = run_wick(os.path.normpath(args.binary))
    if wick is None:
        return 0
    import torch
    props = torch.cuda.get_device_properties(0)
    print(f"torch {torch.__version__}, {props.name}", flush=True)

    flops = model_flops()
    wick_flops = wick["BM_wick_block_lora_step/0"]["model_GFLOP"] * 1e9
    if abs(wick_flops - flops) > 1e-6 * flops:
        print(f"warning: model flops differ: wick {wick_flops:.6g}, this script {flops:.6g}")
    wick_mm = wick["BM_wick_bf16_matmul/8192"]["TFLOP/s"] * 1e12 if "BM_wick_bf16_matmul/8192" in wick else \
        wick["BM_wick_block_lora_step/0"]["matmul_TFLOP/s"] * 1e12
    torch_mm = torch_matmul_flops(torch)
    print(f"bf16 8192^3 matmul: wick {wick_mm / 1e12:.1f} TFLOP/s, torch {torch_mm / 1e12:.1f} TFLOP/s")
    print(f"model flops per step {flops / 1e9:.1f} GFLOP ({TOKENS} tokens)")

    header = ["case", "wick ms", "torch ms", "torch/wick", "wick MFU", "torch MFU", "wick/matmul",
              "torch/matmul", "wick peak MB", "torch peak MB"]
    rows = []
    for arg, label in ((0, "LoRA block step"), (1, "LoRA block step, checkpointed")):
        w = wick[f"BM_wick_block_lora_step/{arg}"]
        t = measure_torch(torch, bool(arg), args.steps)
        print(f"torch {label}: losses of the first 10 steps " + " ".join(f"{v:.6f}" for v in t["losses"]))
        wick_s, torch_s = w["median_ms"] * 1e-3, t["ms"] * 1e-3
        rows.append([label, f"{wick_s * 1e3:.2f}", f"{torch_s * 1e3:.2f}", f"{torch_s / wick_s:.3f}",
                     f"{flops / wick_s / PEAK_FLOPS:.3f}", f"{flops / torch_s / PEAK_FLOPS:.3f}",
                     f"{flops / wick_s / wick_mm:.3f}", f"{flops / torch_s / torch_mm:.3f}",
                     f"{w['peak_MB']:.0f}", f"{t['peak_mb']:.0f}"])

    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    print()
    for r in [header] + rows:
        print("  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("| " + " | ".join(header) + " |\n")
            f.write("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|\n")
            for r in rows:
                f.write("| " + " | ".join(r) + " |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
