#!/usr/bin/env python3
"""The quickstart's DiT training step, wick vs PyTorch on the CPU, same shapes and threads; prints the ratios.

    python3 bench/dit_vs_torch.py --threads 1 2 --repetitions 5 [--binary build/bench/cpu_dit_step_bench]
    python3 bench/dit_vs_torch.py --device cuda --dtype bf16 --batch 256     # on a GPU machine

For each thread count N, runs build/bench/cpu_dit_step_bench (the wick side, Google Benchmark, JSON output)
with OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=N, then builds the same DiT in PyTorch (models/dit/dit.cpp:
patch embedding, learned position table, sinusoidal timestep embedding, pooled-text and token embedders,
adaLN-Zero blocks whose image tokens attend over [image; text] tokens, final layer) with
torch.set_num_threads(N), checks that both have the same parameter count, times the same step and prints
one table: wick ms, torch ms, wick/torch (target <= 1.0), samples/s each, and the wick loader's samples/s
against the step's consumption (the loader must stay ahead). Needs torch (CPU is enough).

The step (configs/quickstart.yaml): batch 32 of latents 4x14x14, 8 text tokens of width 64 (1-3 real per
sample), pooled width 64; σ = sigmoid(N(0, 1)), x_t = (1 − σ)·x0 + σ·ε, target ε − x0, MSE; backward;
gradient clipping at norm 1; AdamW (lr 1e-3, weight decay 0). The phases (forward, backward, optimizer)
are timed separately on both sides too.

--device cuda runs both sides on GPU 0 (each step ends with a synchronization); --dtype bf16 runs wick as
`wick train` with mixed_precision bf16 (bf16 weights and activations, f32 masters, f32 loss) and torch
under torch.autocast(bfloat16) with f32 weights, the usual PyTorch way. --batch sets the batch (default 32).
"""
import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

BATCH, CHANNELS, SIZE, TEXT_TOKENS, TEXT_DIM, POOLED_DIM = 32, 4, 14, 8, 64, 64
HIDDEN, DEPTH, HEADS, PATCH, MLP_RATIO, FREQ_DIM = 96, 3, 4, 2, 4.0, 256


def run_wick(binary, threads, repetitions, min_time, device="cpu", dtype="f32"):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               WICK_BENCH_DEVICE=device, WICK_BENCH_DTYPE=dtype, WICK_BENCH_BATCH=str(BATCH))
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out_path = f.name
    cmd = [binary, f"--benchmark_repetitions={repetitions}", f"--benchmark_min_time={min_time}",
           f"--benchmark_out={out_path}", "--benchmark_out_format=json"]
    print(f"$ OMP_NUM_THREADS={threads} OPENBLAS_NUM_THREADS={threads} WICK_BENCH_DEVICE={device}"
          f" WICK_BENCH_DTYPE={dtype} WICK_BENCH_BATCH={BATCH}", " ".join(cmd), flush=True)
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    with open(out_path) as f:
        data = json.load(f)
    os.unlink(out_path)
    results, skipped = {}, {}
    for b in data["benchmarks"]:
        name = b["run_name"].replace("/real_time", "")
        if b.get("error_occurred"):
            skipped[name] = b.get("error_message", "skipped")
            continue
        if b.get("run_type") != "aggregate" or b.get("aggregate_name") != "median":
            continue
        scale = {"ms": 1e-3, "us": 1e-6, "ns": 1e-9, "s": 1.0}[b["time_unit"]]
        results[name] = dict(b, seconds=b["real_time"] * scale)
    return results, skipped


def median_time(step, repetitions, min_time):
    """Median over `repetitions` of the mean step time in a run of about min_time seconds."""
    for _ in range(3):
        step()  # warm-up (allocator, first-touch)
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


def build_torch_dit(torch):
    nn, F = torch.nn, torch.nn.functional
    grid = SIZE // PATCH
    n_tokens = grid * grid

    def modulate(x, shift, scale):
        return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)

    class EmbedMLP(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.linear_1, self.linear_2 = nn.Linear(width, HIDDEN), nn.Linear(HIDDEN, HIDDEN)

        def forward(self, x):
            return self.linear_2(F.silu(self.linear_1(x)))

    def modulation(n):  # SiLU -> Linear(hidden, n·hidden), zero-initialized ("adaLN_modulation.1")
        seq = nn.Sequential(nn.SiLU(), nn.Linear(HIDDEN, n * HIDDEN))
        nn.init.zeros_(seq[1].weight)
        nn.init.zeros_(seq[1].bias)
        return seq

    class Attention(nn.Module):  # q from the image tokens, k and v from [image; text]
        def __init__(self):
            super().__init__()
            self.q, self.kv, self.proj = nn.Linear(HIDDEN, HIDDEN), nn.Linear(HIDDEN, 2 * HIDDEN), nn.Linear(HIDDEN, HIDDEN)

        def forward(self, x, context, mask):
            b, lq, _ = x.shape
            lk = context.shape[1]
            q = self.q(x).reshape(b, lq, HEADS, HIDDEN // HEADS).transpose(1, 2)
            k, v = self.kv(context).chunk(2, dim=-1)
            k = k.reshape(b, lk, HEADS, HIDDEN // HEADS).transpose(1, 2)
            v = v.reshape(b, lk, HEADS, HIDDEN // HEADS).transpose(1, 2)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            return self.proj(a.transpose(1, 2).reshape(b, lq, HIDDEN))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            mlp_hidden = int(HIDDEN * MLP_RATIO)
            self.norm1 = nn.LayerNorm(HIDDEN, eps=1e-6, elementwise_affine=False)
            self.attn = Attention()
            self.norm2 = nn.LayerNorm(HIDDEN, eps=1e-6, elementwise_affine=False)
            self.fc1, self.fc2 = nn.Linear(HIDDEN, mlp_hidden), nn.Linear(mlp_hidden, HIDDEN)
            self.adaLN_modulation = modulation(6)

        def forward(self, x, text, mask, c):
            shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.adaLN_modulation(c).chunk(6, dim=1)
            h = modulate(self.norm1(x), shift_msa, scale_msa)
            x = x + gate_msa.unsqueeze(1) * self.attn(h, torch.cat([h, text], dim=1), mask)
            h = modulate(self.norm2(x), shift_mlp, scale_mlp)
            return x + gate_mlp.unsqueeze(1) * self.fc2(F.gelu(self.fc1(h), approximate="tanh"))

    class FinalLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm_final = nn.LayerNorm(HIDDEN, eps=1e-6, elementwise_affine=False)
            self.linear = nn.Linear(HIDDEN, PATCH * PATCH * CHANNELS)
            nn.init.zeros_(self.linear.weight)
            nn.init.zeros_(self.linear.bias)
            self.adaLN_modulation = modulation(2)

        def forward(self, x, c):
            shift, scale = self.adaLN_modulation(c).chunk(2, dim=1)
            return self.linear(modulate(self.norm_final(x), shift, scale))

    def sincos_2d():
        quarter = HIDDEN // 4
        omega = 1.0 / 10000.0 ** (torch.arange(quarter, dtype=torch.float64) / quarter)
        hh, ww = torch.meshgrid(torch.arange(grid, dtype=torch.float64), torch.arange(grid, dtype=torch.float64),
                                indexing="ij")
        parts = []
        for pos in (ww.reshape(-1), hh.reshape(-1)):
            args = pos[:, None] * omega[None, :]
            parts += [torch.sin(args), torch.cos(args)]
        return torch.cat(parts, dim=1).float().unsqueeze(0)

    class DiT(nn.Module):
        def __init__(self):
            super().__init__()
            self.x_embedder = nn.Linear(CHANNELS * PATCH * PATCH, HIDDEN)  # "x_embedder.proj"
            self.pos_embed = nn.Parameter(sincos_2d())
            self.t_embedder, self.y_embedder = EmbedMLP(FREQ_DIM), EmbedMLP(POOLED_DIM)
            self.context_embedder = nn.Linear(TEXT_DIM, HIDDEN)
            self.blocks = nn.ModuleList([Block() for _ in range(DEPTH)])
            self.final_layer = FinalLayer()
            half = FREQ_DIM // 2
            self.register_buffer("freqs", 1000.0 * torch.exp(-math.log(10000.0) * torch.arange(half) / half),
                                 persistent=False)

        def forward(self, x, t, context, context_mask, pooled):
            b = x.shape[0]
            # "b c (h ph) (w pw) -> b (h w) (c ph pw)"
            patches = x.reshape(b, CHANNELS, grid, PATCH, grid, PATCH).permute(0, 2, 4, 1, 3, 5)
            tokens = self.x_embedder(patches.reshape(b, n_tokens, CHANNELS * PATCH * PATCH)) + self.pos_embed
            args = t[:, None] * self.freqs[None, :]
            cond = self.t_embedder(torch.cat([torch.cos(args), torch.sin(args)], dim=1)) + self.y_embedder(pooled)
            text = self.context_embedder(context)
            keep = torch.cat([torch.ones(b, n_tokens, dtype=torch.bool, device=x.device), context_mask.bool()], dim=1)
            mask = keep.reshape(b, 1, 1, n_tokens + context.shape[1])
            for block in self.blocks:
                tokens = block(tokens, text, mask, cond)
            out = self.final_layer(tokens, cond)
            out = out.reshape(b, grid, grid, CHANNELS, PATCH, PATCH).permute(0, 3, 1, 4, 2, 5)
            return out.reshape(b, CHANNELS, SIZE, SIZE)

    return DiT()


class TorchQuickstart:
    """The torch model, optimizer, batch and the step's phases."""

    def __init__(self, torch, device="cpu", dtype="f32"):
        self.torch, F = torch, torch.nn.functional
        self.device, self.bf16 = torch.device(device), dtype == "bf16"
        torch.manual_seed(42)
        self.model = build_torch_dit(torch).to(self.device)
        self.params = list(self.model.parameters())
        self.opt = torch.optim.AdamW(self.params, lr=1e-3, weight_decay=0.0)
        self.x0 = (torch.randn(BATCH, CHANNELS, SIZE, SIZE) * 0.5).to(self.device)
        self.context = (torch.randn(BATCH, TEXT_TOKENS, TEXT_DIM) * 0.125).to(self.device)
        self.pooled = (torch.randn(BATCH, POOLED_DIM) * 0.125).to(self.device)
        mask = torch.zeros(BATCH, TEXT_TOKENS, dtype=torch.uint8)
        for i in range(BATCH):
            mask[i, : 1 + i % 3] = 1
        self.mask = mask.to(self.device)
        self.mse = F.mse_loss

    def n_parameters(self):
        return sum(p.numel() for p in self.params)

    def sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def loss(self):
        torch = self.torch
        sigma = torch.sigmoid(torch.randn(BATCH, device=self.device))
        noise = torch.randn_like(self.x0)
        s = sigma.view(BATCH, 1, 1, 1)
        x_t = (1 - s) * self.x0 + s * noise
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            pred = self.model(x_t, sigma, self.context, self.mask, self.pooled)
        return self.mse(pred.float(), noise - self.x0)

    def optimizer_step(self):
        self.torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.opt.step()
        self.sync()

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        self.loss().backward()
        self.optimizer_step()

    def forward(self):
        self.loss()
        self.sync()

    def forward_backward(self):
        self.opt.zero_grad(set_to_none=True)
        self.loss().backward()
        self.sync()


def machine_line():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    load = os.getloadavg()
    return f"{cpu}, {os.cpu_count()} cores; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"


def main():
    global BATCH
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=os.path.join(here, "..", "build", "bench", "cpu_dit_step_bench"))
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=1.0, help="seconds of steps per repetition")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    parser.add_argument("--batch", type=int, default=BATCH)
    args = parser.parse_args()
    BATCH = args.batch

    import torch
    where = machine_line() if args.device == "cpu" else torch.cuda.get_device_name(0)
    print(f"torch {torch.__version__}; {where}; {args.device} {args.dtype}; medians of {args.repetitions} repetitions",
          flush=True)

    rows = []
    for threads in args.threads:
        wick, skipped = run_wick(args.binary, threads, args.repetitions, args.min_time, args.device, args.dtype)
        for name, why in skipped.items():
            print(f"  wick {name}: skipped ({why})", flush=True)
        torch.set_num_threads(threads)
        tq = TorchQuickstart(torch, args.device, args.dtype)
        key = f"/{BATCH}"
        wick_params = int(wick["BM_wick_dit_step" + key]["parameters"])
        assert tq.n_parameters() == wick_params, f"torch has {tq.n_parameters()} parameters, wick {wick_params}"
        t_step = median_time(tq.step, args.repetitions, args.min_time)
        t_fwd = median_time(tq.forward, args.repetitions, args.min_time)
        t_fb = median_time(tq.forward_backward, args.repetitions, args.min_time)
        tq.forward_backward()
        t_opt = median_time(tq.optimizer_step, args.repetitions, args.min_time)

        def w(name):
            return wick[name]["seconds"] if name in wick else math.nan

        loader = wick.get("BM_wick_loader" + key, {}).get("samples/s", math.nan)
        rows.append(dict(threads=threads, params=wick_params, wick=w("BM_wick_dit_step" + key), torch=t_step,
                         wick_fwd=w("BM_wick_dit_forward" + key), torch_fwd=t_fwd,
                         wick_fb=w("BM_wick_dit_forward_backward" + key), torch_fb=t_fb,
                         wick_opt=w("BM_wick_dit_optimizer" + key), torch_opt=t_opt, loader=loader,
                         loaded=w("BM_wick_dit_step_loaded" + key)))
        print(f"  done: {threads} thread(s)", flush=True)

    print(f"\nquickstart DiT ({rows[0]['params']:,} parameters, equal in both), batch {BATCH}, one training step")
    header = (f"{'threads':>7} {'wick ms':>9} {'torch ms':>9} {'wick/torch':>10} {'wick samples/s':>14} "
              f"{'torch samples/s':>15} {'loader samples/s':>16} {'loader/step':>11} {'fed step ms':>11}")
    print(header)
    for r in rows:
        step_rate = BATCH / r["wick"]
        print(f"{r['threads']:7d} {r['wick'] * 1e3:9.2f} {r['torch'] * 1e3:9.2f} {r['wick'] / r['torch']:10.3f} "
              f"{step_rate:14.0f} {BATCH / r['torch']:15.0f} {r['loader']:16.0f} {r['loader'] / step_rate:11.1f} "
              f"{r['loaded'] * 1e3:11.2f}")
    print("(loader/step: samples/s the Prefetcher delivers alone over samples/s the step consumes; "
          "fed step: the step fed by the Prefetcher, as in wick train)")

    print(f"\n{'phases (ms)':>11} {'threads':>7} {'wick':>9} {'torch':>9} {'wick/torch':>10}")
    for r in rows:
        phases = (("forward", r["wick_fwd"], r["torch_fwd"]),
                  ("backward", r["wick_fb"] - r["wick_fwd"], r["torch_fb"] - r["torch_fwd"]),
                  ("optimizer", r["wick_opt"], r["torch_opt"]))
        for label, wv, tv in phases:
            print(f"{label:>11} {r['threads']:7d} {wv * 1e3:9.2f} {tv * 1e3:9.2f} {wv / tv:10.3f}")
    print("(forward includes the noise and the loss; backward = forward+backward minus forward; optimizer = "
          "clipping + AdamW on a fixed gradient)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
