#!/usr/bin/env python3
"""wick's GPU ops (bench/cuda_ops_bench.cpp) against PyTorch eager on the same shapes and dtypes.

    python3 bench/gpu/ops_vs_torch.py                       # finds the program, prints the table last
    python3 bench/gpu/ops_vs_torch.py --binary build/bench/cuda_ops_bench --markdown ops.md
    python3 bench/gpu/ops_vs_torch.py --cases layer_norm,sdpa --samples 200
    python3 bench/gpu/ops_vs_torch.py --wick-json r.json --no-torch   # the table from saved results

Runs the wick program (Google Benchmark, JSON written to a file), then times torch on cuda:0 with
CUDA events exactly as the program does: before each timed call a 512 MiB fill evicts L2 and keeps
the GPU busy while the call is enqueued; the median of --samples calls after 5 warm-ups. Backward
passes are torch.autograd.grad on a random upstream gradient (graph kept between calls). Ratio is
torch time / wick time (> 1: wick faster). Exits 1 when wick's output checks failed or a case broke.
"""
import argparse
import glob
import json
import os
import site
import statistics
import subprocess
import sys
import tempfile

ROWS, COLS = 16384, 3072                     # x [ROWS, COLS] for norms, softmax, gelu
HEADS, TOKENS, HEAD_DIM = 24, 4608, 128      # Flux attention, batch 1
OPTIMIZER_PARAMS = 256 << 20                 # f32 parameters of the optimizer steps
FILLER_BYTES = 512 << 20
WARMUP = 5

# (case, kind, what torch runs). kind: "memory" (target >= 1.0x torch and >= 80% of copy), "flops"
# (>= 1.0x torch), "optimizer" (>= 80% of copy; the torch column is for reference).
CASES = [
    ("layer_norm_fwd", "memory", "F.layer_norm"),
    ("layer_norm_bwd", "memory", "autograd.grad of F.layer_norm (dx, dweight, dbias)"),
    ("rms_norm_fwd", "memory", "F.rms_norm"),
    ("rms_norm_bwd", "memory", "autograd.grad of F.rms_norm (dx, dweight)"),
    ("softmax_fwd", "memory", "F.softmax(dim=-1)"),
    ("softmax_bwd", "memory", "autograd.grad of F.softmax"),
    ("gelu_fwd", "memory", 'F.gelu(approximate="tanh")'),
    ("gelu_bwd", "memory", 'autograd.grad of F.gelu(approximate="tanh")'),
    ("sdpa_fwd", "flops", "F.scaled_dot_product_attention"),
    ("sdpa_bwd", "flops", "autograd.grad of F.scaled_dot_product_attention (dq, dk, dv)"),
    ("adamw_step", "optimizer", "torch.optim.AdamW(fused=True).step"),
    ("adamw8bit_step", "optimizer", "bnb.optim.AdamW8bit.step (fused AdamW when bitsandbytes is absent)"),
    ("adamw_optimizer_step", "optimizer", "torch.optim.AdamW(fused=True).step"),
    ("adamw8bit_optimizer_step", "optimizer", "as adamw8bit_step"),
]


def wick_benchmark_name(case):
    return "BM_wick_" + case


# ---------------------------------------------------------------- the wick program

def default_binary():
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.path.join(here, "..", "..", "bin", "cuda_ops_bench"),
                  os.path.join(here, "..", "..", "build", "bench", "cuda_ops_bench")]
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return os.path.normpath(path)
    return os.path.normpath(candidates[-1])


def library_env():
    """The environment for the wick program: CUDA's lib64 and the nvidia-* wheels' lib folders
    (cuDNN, NCCL, NVRTC) added to LD_LIBRARY_PATH, as bench/gpu/run.sh does."""
    dirs = ["/usr/local/cuda/lib64"]
    for packages in site.getsitepackages():
        dirs += sorted(glob.glob(os.path.join(packages, "nvidia", "*", "lib")))
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join(dirs + [p for p in [env.get("LD_LIBRARY_PATH", "")] if p])
    return env


def run_wick(binary, cases):
    """Runs the program; returns (path of its JSON results or None, its exit status)."""
    if not os.path.isfile(binary):
        print(f"wick program not found: {binary} (build it: ninja -C build cuda_ops_bench)", flush=True)
        return None, 2
    out = os.path.join(tempfile.mkdtemp(prefix="wick_ops_"), "cuda_ops_bench.json")
    # Full benchmark names carry suffixes ("BM_wick_gelu_fwd/iterations:200/manual_time").
    names = "|".join([wick_benchmark_name(c) for c in cases] + ["BM_device_copy_bandwidth"])
    command = [binary, f"--benchmark_filter=^({names})(/|$)", f"--benchmark_out={out}",
               "--benchmark_out_format=json"]
    print("running:", " ".join(command), flush=True)
    status = subprocess.run(command, env=library_env()).returncode
    return (out if os.path.isfile(out) else None), status


def parse_wick_json(path):
    """{benchmark name: {"ms", "gbps", "pct", "tflops", "label", "error"}} from Google Benchmark JSON.
    ms is the program's median (counter median_ms), else its mean real time."""
    with open(path) as f:
        report = json.load(f)
    scale_to_ms = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
    results = {}
    for run in report.get("benchmarks", []):
        if run.get("run_type", "iteration") != "iteration":
            continue
        name = run["name"].split("/")[0]
        error = run.get("error_message") if (run.get("error_occurred") or run.get("skipped")) else None
        ms = run.get("median_ms")
        if ms is None and "real_time" in run:
            ms = run["real_time"] * scale_to_ms.get(run.get("time_unit", "ns"), 1e-6)
        results[name] = {"ms": ms, "gbps": run.get("GB/s"), "pct": run.get("pct_of_copy"),
                         "tflops": run.get("TFLOP/s"), "label": run.get("label", ""), "error": error}
    return results


# ---------------------------------------------------------------- torch

def time_torch(torch, fn, samples):
    """Median milliseconds of fn() over `samples` calls, each timed with CUDA events after a fill
    of FILLER_BYTES on the same (default) stream."""
    filler = torch.empty(FILLER_BYTES, dtype=torch.uint8, device="cuda")
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(samples):
        filler.fill_(i & 0xFF)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def sdpa_backend(torch, q, k, v, call):
    """Which backend torch picks for these inputs: its own choice function, then the longest
    kernel that a profiled call() launched."""
    words = []
    try:
        from torch.nn.attention import SDPBackend
        choice = int(torch._fused_sdp_choice(q, k, v))
        names = {int(member): name for name, member in SDPBackend.__members__.items()}
        words.append(names.get(choice, f"backend {choice}"))
    except Exception as error:  # private API; the kernel names below still tell
        words.append(f"choice unknown ({type(error).__name__})")
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            call()
            torch.cuda.synchronize()
        kernels = sorted(prof.key_averages(), key=lambda e: getattr(e, "device_time_total", 0), reverse=True)
        if kernels:
            words.append("kernel " + kernels[0].key[:90])
    except Exception as error:
        words.append(f"kernels unknown ({type(error).__name__})")
    return "; ".join(words)


def torch_cases(torch, cases, samples):
    """{case: (ms or None, note)} for the requested cases; a case that raises gets its error as note."""
    F = torch.nn.functional
    bf16, dev = torch.bfloat16, "cuda"

    def randn(shape, seed, dtype=bf16, mean=0.0, std=1.0):
        g = torch.Generator(device=dev).manual_seed(seed)
        return torch.randn(shape, generator=g, device=dev, dtype=torch.float32).mul_(std).add_(mean).to(dtype)

    def leaves(*tensors):
        return [t.detach().clone().requires_grad_(True) for t in tensors]

    def norm_inputs():
        x, dy = randn((ROWS, COLS), 1), randn((ROWS, COLS), 4)
        return x, randn((COLS,), 2, mean=1.0, std=0.1), randn((COLS,), 3, std=0.1), dy

    def backward(y, inputs, dy):
        return lambda: torch.autograd.grad(y, inputs, dy, retain_graph=True)

    def layer_norm_fwd():
        x, w, b, _ = norm_inputs()
        return lambda: F.layer_norm(x, (COLS,), w, b, 1e-5), ""

    def layer_norm_bwd():
        x, w, b, dy = norm_inputs()
        x, w, b = leaves(x, w, b)
        return backward(F.layer_norm(x, (COLS,), w, b, 1e-5), (x, w, b), dy), ""

    def rms_norm_fwd():
        x, w, _, _ = norm_inputs()
        return lambda: F.rms_norm(x, (COLS,), w, 1e-6), ""

    def rms_norm_bwd():
        x, w, _, dy = norm_inputs()
        x, w = leaves(x, w)
        return backward(F.rms_norm(x, (COLS,), w, 1e-6), (x, w), dy), ""

    def softmax_fwd():
        x = randn((ROWS, COLS), 1)
        return lambda: F.softmax(x, dim=-1), ""

    def softmax_bwd():
        (x,), dy = leaves(randn((ROWS, COLS), 1)), randn((ROWS, COLS), 4)
        return backward(F.softmax(x, dim=-1), (x,), dy), ""

    def gelu_fwd():
        x = randn((ROWS, COLS), 1)
        return lambda: F.gelu(x, approximate="tanh"), ""

    def gelu_bwd():
        (x,), dy = leaves(randn((ROWS, COLS), 1)), randn((ROWS, COLS), 4)
        return backward(F.gelu(x, approximate="tanh"), (x,), dy), ""

    def attention_inputs():
        shape = (1, HEADS, TOKENS, HEAD_DIM)
        return [randn(shape, seed) for seed in (11, 12, 13)], randn(shape, 14)

    def sdpa_fwd():
        (q, k, v), _ = attention_inputs()
        fn = lambda: F.scaled_dot_product_attention(q, k, v)  # noqa: E731
        return fn, "torch backend: " + sdpa_backend(torch, q, k, v, fn)

    def sdpa_bwd():
        qkv, grad_out = attention_inputs()
        q, k, v = leaves(*qkv)
        fn = backward(F.scaled_dot_product_attention(q, k, v), (q, k, v), grad_out)
        return fn, "torch backend: " + sdpa_backend(torch, q, k, v, fn)

    def adamw_step():
        p = torch.nn.Parameter(randn((OPTIMIZER_PARAMS,), 21, dtype=torch.float32))
        p.grad = randn((OPTIMIZER_PARAMS,), 22, dtype=torch.float32)
        opt = torch.optim.AdamW([p], lr=1e-4, weight_decay=1e-2, fused=True)
        return opt.step, "torch AdamW fused=True"

    def adamw8bit_step():
        try:
            import bitsandbytes as bnb
        except ImportError:
            fn, _ = adamw_step()
            return fn, "bitsandbytes absent: torch AdamW fused=True (32-bit state)"
        p = torch.nn.Parameter(randn((OPTIMIZER_PARAMS,), 21, dtype=torch.float32))
        p.grad = randn((OPTIMIZER_PARAMS,), 22, dtype=torch.float32)
        opt = bnb.optim.AdamW8bit([p], lr=1e-4, weight_decay=1e-2)
        return opt.step, f"bitsandbytes {getattr(bnb, '__version__', '?')} AdamW8bit"

    builders = {f.__name__: f for f in (layer_norm_fwd, layer_norm_bwd, rms_norm_fwd, rms_norm_bwd, softmax_fwd,
                                        softmax_bwd, gelu_fwd, gelu_bwd, sdpa_fwd, sdpa_bwd, adamw_step,
                                        adamw8bit_step)}
    results = {}
    for case in cases:
        # The optimizer rows of wick's Optimizer front compare against the same torch step.
        builder = builders[case.replace("_optimizer_step", "_step")]
        if case.endswith("_optimizer_step") and case.replace("_optimizer_step", "_step") in results:
            results[case] = results[case.replace("_optimizer_step", "_step")]
            continue
        try:
            fn, note = builder()
            results[case] = (time_torch(torch, fn, samples), note)
        except Exception as error:
            results[case] = (None, f"torch failed: {type(error).__name__}: {error}"[:200])
        finally:
            fn = None
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        print(f"torch {case}: {results[case][0]} ms  {results[case][1]}", flush=True)
    return results


# ---------------------------------------------------------------- the table

def build_rows(cases, wick, torch_results):
    """One row per case: (case, wick ms, torch ms, ratio, rate, pct of copy, target, verdict)."""
    copy = wick.get("BM_device_copy_bandwidth", {})
    rows = []
    for case, kind, _ in CASES:
        if case not in cases:
            continue
        w = wick.get(wick_benchmark_name(case), {"error": "not run"})
        torch_ms = torch_results.get(case, (None, ""))[0]
        wick_ms = None if w.get("error") else w.get("ms")
        ratio = torch_ms / wick_ms if (wick_ms and torch_ms) else None
        pct = w.get("pct")
        if pct is None and w.get("gbps") and copy.get("gbps"):
            pct = 100.0 * w["gbps"] / copy["gbps"]
        if kind == "flops":
            rate = f"{w['tflops']:.0f} TFLOP/s" if w.get("tflops") else "-"
            target = ">=1.0x"
            met = ratio is not None and ratio >= 1.0
        elif kind == "memory":
            rate = f"{w['gbps']:.0f} GB/s" if w.get("gbps") else "-"
            target = ">=1.0x, >=80% copy"
            met = ratio is not None and ratio >= 1.0 and pct is not None and pct >= 80.0
        else:
            rate = f"{w['gbps']:.0f} GB/s" if w.get("gbps") else "-"
            target = ">=80% copy"
            met = pct is not None and pct >= 80.0
        verdict = "met" if met else "missed"
        if kind != "optimizer" and torch_ms is None:
            verdict = "no torch time"
        if w.get("error"):
            verdict = "error: " + str(w["error"])[:60]
        rows.append((case, fmt(wick_ms, "{:.3f}"), fmt(torch_ms, "{:.3f}"), fmt(ratio, "{:.3f}x"), rate,
                     fmt(pct, "{:.0f}%"), target, verdict))
    return rows


def fmt(value, pattern):
    return "-" if value is None else pattern.format(value)


HEADER = ("case", "wick ms", "torch ms", "ratio", "wick rate", "of copy", "target", "result")


def text_table(rows):
    widths = [max(len(str(r[i])) for r in rows + [HEADER]) for i in range(len(HEADER))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)) for row in [HEADER] + rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(rows):
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", default=default_binary(), help="the cuda_ops_bench program")
    parser.add_argument("--markdown", help="also write the table as markdown to this file")
    parser.add_argument("--samples", type=int, default=100, help="timed torch calls per case (>= 50)")
    parser.add_argument("--cases", help="comma-separated case prefixes (default: all), e.g. layer_norm,sdpa")
    parser.add_argument("--wick-json", help="use these saved results instead of running the program")
    parser.add_argument("--no-torch", action="store_true", help="skip torch (table from wick's numbers only)")
    args = parser.parse_args(argv)
    if args.samples < 50:
        parser.error("--samples must be at least 50")
    prefixes = [p.strip() for p in args.cases.split(",")] if args.cases else [""]
    cases = [c for c, _, _ in CASES if any(c.startswith(p) for p in prefixes)]
    if not cases:
        parser.error(f"--cases {args.cases!r} matches none of: {', '.join(c for c, _, _ in CASES)}")

    status = 0
    if args.wick_json:
        path = args.wick_json
    else:
        path, status = run_wick(args.binary, cases)
    wick = parse_wick_json(path) if path else {}
    if not wick:
        print("no wick results (no CUDA device, or the program failed)", flush=True)
        status = status or 1

    torch_results, notes = {}, []
    if not args.no_torch:
        import torch
        if not torch.cuda.is_available():
            print("torch sees no CUDA device; nothing to compare", flush=True)
            return 1
        notes.append(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
        torch_results = torch_cases(torch, cases, args.samples)
        status = status or (1 if any(ms is None for ms, _ in torch_results.values()) else 0)
    copy = wick.get("BM_device_copy_bandwidth", {})
    if copy.get("gbps"):
        notes.append(f"device-to-device copy (wick program, read + write): {copy['gbps']:.0f} GB/s")
    for case in cases:
        label = wick.get(wick_benchmark_name(case), {}).get("label")
        if label:
            notes.append(f"{case}: wick backend {label}")
        if case in torch_results and torch_results[case][1]:
            notes.append(f"{case}: {torch_results[case][1]}")
    notes.append("ratio = torch ms / wick ms (> 1: wick faster); attention FLOPs 4*B*H*L^2*D forward, 2.5x backward")
    if any(c.endswith("_optimizer_step") for c in cases):
        notes.append("*_optimizer_step: wick's Optimizer::step (gather, norm, kernel, write-back) vs the torch step")

    rows = build_rows(cases, wick, torch_results)
    for note in notes:
        print("#", note)
    print(text_table(rows), flush=True)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join("- " + n for n in notes) + "\n\n" + markdown_table(rows) + "\n")
    if any(r[-1].startswith("error") for r in rows):
        status = status or 1
    return status


if __name__ == "__main__":
    sys.exit(main())
