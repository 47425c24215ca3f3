#!/usr/bin/env python3
"""CPU training steps, wick vs PyTorch, same shapes and threads, one run prints the ratios.

    python3 bench/cpu_vs_torch.py --threads 2 --repetitions 5 [--binary build/bench/cpu_train_step_bench]

Runs build/bench/cpu_train_step_bench (the wick side, Google Benchmark, JSON output) with OMP_NUM_THREADS
and OPENBLAS_NUM_THREADS set to --threads, then the same steps in PyTorch with torch.set_num_threads(threads),
and prints median times and wick/torch ratios (target <= 1.0). Needs torch (CPU is enough).

Cases (see bench/cpu_train_step_bench.cpp for the wick side):
    mlp_step     MLP 784 -> 128 -> ReLU -> 10, batch 128, cross-entropy, backward, AdamW step
    block_step   pre-norm transformer block (width 256, 4 heads, 64 tokens, batch 8, MLP 1024, GELU tanh),
                 LoRA rank 8 alpha 8 on attn.qkv and mlp.fc1, base frozen, MSE, backward, AdamW step
    adamw_step   one AdamW step on 10M parameters (torch.optim.AdamW, foreach=False and the default foreach)
    adamw8bit    wick only (params/s and state bytes per parameter)
    checkpoint   wick only: 12 blocks, width 256, 4 heads, 128 tokens, batch 4, forward + backward without and
                 with autograd::checkpoint per block (step time, activation memory)
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time


def run_wick(binary, threads, repetitions, bench_filter):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out_path = f.name
    cmd = [binary, f"--benchmark_repetitions={repetitions}", "--benchmark_min_time=1",
           f"--benchmark_out={out_path}", "--benchmark_out_format=json", f"--benchmark_filter={bench_filter}"]
    print("$", " ".join(f"{k}={env[k]}" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")), " ".join(cmd),
          flush=True)
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    with open(out_path) as f:
        data = json.load(f)
    print(f"(wick results kept in {out_path})", flush=True)
    results = {}
    for b in data["benchmarks"]:
        if b.get("run_type") != "aggregate" or b.get("aggregate_name") != "median":
            continue
        name = b["run_name"].replace("/real_time", "")
        scale = {"ms": 1e-3, "us": 1e-6, "ns": 1e-9, "s": 1.0}[b["time_unit"]]
        results[name] = dict(b, seconds=b["real_time"] * scale)
    return results


def median_time(step, repetitions, min_time=1.0):
    """Median over `repetitions` of the mean step time in a batch of runs lasting about min_time."""
    step()  # warm-up
    t0 = time.perf_counter()
    step()
    one = max(time.perf_counter() - t0, 1e-6)
    n = max(1, int(min_time / one))
    means = []
    for _ in range(repetitions):
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        means.append((time.perf_counter() - t0) / n)
    return statistics.median(means)


def torch_mlp_step(torch):
    nn, F = torch.nn, torch.nn.functional
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
    x = torch.randn(128, 784)
    labels = torch.arange(128) * 7 % 10

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), labels)
        loss.backward()
        opt.step()
    return step


def torch_block_step(torch):
    nn, F = torch.nn, torch.nn.functional
    batch, tokens, dim, heads, hidden, rank, alpha = 8, 64, 256, 4, 1024, 8, 8.0

    class LoRALinear(nn.Module):
        def __init__(self, base):
            super().__init__()
            self.base = base
            self.lora_down = nn.Linear(base.in_features, rank, bias=False)
            self.lora_up = nn.Linear(rank, base.out_features, bias=False)
            nn.init.zeros_(self.lora_up.weight)

        def forward(self, x):
            return self.base(x) + (alpha / rank) * self.lora_up(self.lora_down(x))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

        def forward(self, x):
            b, n, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
            q, k, v = (t.reshape(b, n, heads, dim // heads).transpose(1, 2) for t in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, dim)
            h = x + self.proj(a)
            return h + self.fc2(F.gelu(self.fc1(self.norm2(h)), approximate="tanh"))

    torch.manual_seed(3)
    block = Block()
    for p in block.parameters():
        p.requires_grad_(False)
    block.qkv, block.fc1 = LoRALinear(block.qkv), LoRALinear(block.fc1)
    trainable = [p for p in block.parameters() if p.requires_grad]
    assert sum(p.numel() for p in trainable) == 8 * (256 + 768) + 8 * (256 + 1024)
    opt = torch.optim.AdamW(trainable, lr=1e-3, weight_decay=0.0)
    x, target = torch.randn(batch, tokens, dim), torch.randn(batch, tokens, dim)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(block(x), target)
        loss.backward()
        opt.step()
    return step


def torch_adamw_step(torch, n, foreach):
    p = torch.nn.Parameter(torch.randn(n))
    p.grad = torch.randn(n) * 1e-3
    opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=1e-2, foreach=foreach)
    return opt.step


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=os.path.join(here, "..", "build", "bench", "cpu_train_step_bench"))
    parser.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", os.cpu_count())))
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--filter", default=".", help="Google Benchmark filter for the wick side")
    args = parser.parse_args()

    import torch
    torch.set_num_threads(args.threads)
    print(f"threads {args.threads}, torch {torch.__version__}, medians of {args.repetitions} repetitions", flush=True)

    wick = run_wick(args.binary, args.threads, args.repetitions, args.filter)

    def wick_s(name):
        return wick[name]["seconds"] if name in wick else math.nan

    rows = [
        ("MLP train step (b128, 784-128-10, AdamW)", wick_s("BM_wick_mlp_step/128"),
         median_time(torch_mlp_step(torch), args.repetitions)),
        ("block train step (LoRA r8, w256, L64, b8)", wick_s("BM_wick_block_step/8"),
         median_time(torch_block_step(torch), args.repetitions)),
        ("AdamW step 10M params (torch foreach=False)", wick_s("BM_wick_adamw_step/10000000"),
         median_time(torch_adamw_step(torch, 10_000_000, False), args.repetitions)),
        ("AdamW step 10M params (torch foreach=True)", wick_s("BM_wick_adamw_step/10000000"),
         median_time(torch_adamw_step(torch, 10_000_000, True), args.repetitions)),
    ]
    print(f"\n{'case':46} {'wick ms':>10} {'torch ms':>10} {'wick/torch':>11}")
    for name, w, t in rows:
        print(f"{name:46} {w * 1e3:10.3f} {t * 1e3:10.3f} {w / t:11.3f}")

    print(f"\n{'optimizer (wick, 10M params)':46} {'ms/step':>10} {'Mparams/s':>10} {'state B/param':>14}")
    for label, name in (("AdamW", "BM_wick_adamw_step/10000000"), ("AdamW8bit", "BM_wick_adamw8bit_step/10000000")):
        if name in wick:
            b = wick[name]
            print(f"{label:46} {b['seconds'] * 1e3:10.3f} {b['params/s'] / 1e6:10.1f} {b['state_bytes/param']:14.3f}")

    names = ("BM_wick_checkpoint/0", "BM_wick_checkpoint/1")
    if all(n in wick for n in names):
        plain, ckpt = (wick[n] for n in names)
        print(f"\n{'12 blocks fwd+bwd (w256, L128, b4)':46} {'ms/step':>10} {'held after fwd MB':>18} "
              f"{'peak above base MB':>19}")
        for label, b in (("plain", plain), ("checkpoint per block", ckpt)):
            print(f"{label:46} {b['seconds'] * 1e3:10.1f} {b['held_after_forward_MB']:18.1f} "
                  f"{b['peak_above_baseline_MB']:19.1f}")
        print(f"checkpointing: time x{ckpt['seconds'] / plain['seconds']:.3f}, memory held after forward "
              f"-{100 * (1 - ckpt['held_after_forward_MB'] / plain['held_after_forward_MB']):.1f}%, peak above "
              f"baseline -{100 * (1 - ckpt['peak_above_baseline_MB'] / plain['peak_above_baseline_MB']):.1f}% "
              f"(parameters {plain['parameters_MB']:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
