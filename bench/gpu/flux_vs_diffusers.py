#!/usr/bin/env python3
"""Full-size Flux.1-dev LoRA train step, wick vs diffusers + PEFT on the same GPU, one table at the end.

    python3 bench/gpu/flux_vs_diffusers.py --wick bin/flux_step_bench [--compile] [--markdown flux.md]
    python3 bench/gpu/flux_vs_diffusers.py --smoke --wick build/bench/flux_step_bench   # tiny, on the CPU

The step on both sides: the Flux.1-dev transformer (19 double + 38 single blocks, hidden 3072, 11.9B
parameters) in bf16 with random weights of the real shapes (weights N(0, 0.02), biases 0, RMSNorm
scales 1, all made on the GPU), LoRA rank 16 alpha 16 on every Linear of both block kinds, gradient
checkpointing per block, 8-bit AdamW over the adapters (lr 1e-4, weight decay 1e-2), batch 1 at
1024²: latents 16 x 128 x 128 packed to 4096 tokens, T5 context 512 x 4096, CLIP pooled 768,
guidance 1.0, σ from the Flux-shifted logit-normal, flow-matching target ε − x0, MSE in f32.
Step = forward + loss + backward + optimizer step; 2 warm-up steps, then the median of 5, each timed
on the host around a device synchronize. Each side runs in its own process (the GPU is empty for
each), wick first (bench/flux_step_bench.cpp), then diffusers eager, then (--compile) diffusers with
regional compilation (FluxTransformer2DModel.compile_repeated_blocks, torch.compile of each block);
a side that fails (out of memory, a compile error, its time limit) is reported in the table.

The diffusers side is what train_dreambooth_lora_flux.py does: FluxTransformer2DModel(guidance_embeds=
True) (its defaults are Flux.1-dev's), requires_grad_(False), add_adapter(LoraConfig(r=16,
lora_alpha=16, init_lora_weights="gaussian", target_modules=...)) with the LoRA factors left in bf16
(the script upcasts them only for fp16), enable_gradient_checkpointing(), bitsandbytes.optim.AdamW8bit
(torch.optim.AdamW(fused=True) with a note if bitsandbytes is not importable). Targets: in
transformer_blocks attn.to_q/to_k/to_v/to_out.0/add_q_proj/add_k_proj/add_v_proj/to_add_out,
ff.net.0.proj/ff.net.2, ff_context.net.0.proj/net.2, norm1.linear, norm1_context.linear; in
single_transformer_blocks attn.to_q/to_k/to_v, proj_mlp, proj_out, norm.linear: the same Linears as
wick's {"double_blocks.*", "single_blocks.*"}, but where wick has one LoRA on the fused qkv (and on
linear1 = q|k|v|mlp), diffusers has one per projection, so it holds 3x (4x) the lora_A parameters
there and more trainable parameters in all; both counts are reported.

FLOPs (flux_step_flops, the same formula as the wick program): every Linear for the rows it sees
(each double-block stream's weights see that stream's tokens, the modulations one row), forward
2·rows·in·out, backward 2·rows·in·out (input gradients only: the base is frozen) except for the
modulations and embedders, LoRA 6·rows·r·(in+out) (wick's fused adapters), attention 4·L²·hidden
forward and 2.5x that backward; model FLOPs = forward + backward, hardware FLOPs = model + the
blocks' forward recomputed by checkpointing. MFU = model FLOPs / step time / 989e12 (H100 SXM dense
bf16), HFU the same with hardware FLOPs; both sides are divided by the same count. Peak memory:
wick's tensor bytes (runtime/memory.h) and torch.cuda.max_memory_allocated, over the first step and
over the timed steps (steady); the device memory in use (wick: cudaMemGetInfo at the end; torch:
max_memory_reserved) is shown beside them. Ratio = diffusers ms / wick ms (> 1: wick is faster).
"""
import argparse
import glob
import json
import math
import os
import site
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

PEAK_FLOPS = 989e12
LR, WEIGHT_DECAY = 1e-4, 1e-2
FULL = dict(hidden=3072, heads=24, depth=19, depth_single=38, side=128, text_len=512, steps=5, warmup=2,
            dtype="bf16", device="cuda")
# The tiny model of --smoke, the same as flux_step_bench --device cpu.
SMOKE = dict(hidden=128, heads=1, depth=1, depth_single=1, side=16, text_len=8, steps=3, warmup=1, dtype="f32",
             device="cpu")
IN_CHANNELS, CONTEXT_DIM, VEC_DIM, MLP_RATIO, AXES = 64, 4096, 768, 4.0, (16, 56, 56)
TARGETS = (r"(transformer_blocks\.\d+\.(attn\.(to_q|to_k|to_v|to_out\.0|add_q_proj|add_k_proj|add_v_proj|to_add_out)"
           r"|ff\.net\.(0\.proj|2)|ff_context\.net\.(0\.proj|2)|norm1\.linear|norm1_context\.linear)"
           r"|single_transformer_blocks\.\d+\.(attn\.(to_q|to_k|to_v)|proj_mlp|proj_out|norm\.linear))")


def flux_step_flops(s, rank, checkpointing):
    """The FLOP count of bench/flux_step_bench.cpp (flux_step_flops): dict of model, hardware, forward,
    backward, recompute."""
    h, m = float(s["hidden"]), float(int(s["hidden"] * MLP_RATIO))
    ti, tt = float((s["side"] // 2) ** 2), float(s["text_len"])
    length = ti + tt

    def linear(rows, i, o):
        return 2 * rows * i * o

    def lora(rows, i, o):
        return 2 * rows * rank * (i + o)

    base = mod = adapters = attention = 0.0
    for _ in range(s["depth"]):
        for rows in (ti, tt):
            base += linear(rows, h, 3 * h) + linear(rows, h, h) + linear(rows, h, m) + linear(rows, m, h)
            adapters += lora(rows, h, 3 * h) + lora(rows, h, h) + lora(rows, h, m) + lora(rows, m, h)
            mod += linear(1, h, 6 * h)
            adapters += lora(1, h, 6 * h)
        attention += 4 * length * length * h
    for _ in range(s["depth_single"]):
        base += linear(length, h, 3 * h + m) + linear(length, h + m, h)
        adapters += lora(length, h, 3 * h + m) + lora(length, h + m, h)
        mod += linear(1, h, 3 * h)
        adapters += lora(1, h, 3 * h)
        attention += 4 * length * length * h
    forward_blocks = base + mod + adapters + attention
    final_linear = linear(ti, h, IN_CHANNELS)
    forward_other = (linear(ti, IN_CHANNELS, h) + linear(tt, CONTEXT_DIM, h) + 2 * linear(1, 256, h) +
                     linear(1, VEC_DIM, h) + 3 * linear(1, h, h) + linear(1, h, 2 * h) + final_linear)
    backward = base + 2 * adapters + 2.5 * attention + final_linear
    recompute = forward_blocks if checkpointing else 0.0
    model = forward_blocks + forward_other + backward
    return dict(model=model, hardware=model + recompute, forward=forward_blocks + forward_other, backward=backward,
                recompute=recompute)


def library_path():
    """CUDA libraries for the wick program: the toolkit's and the nvidia-* wheels next to PyTorch
    (cuDNN, NCCL), as bench/gpu/run.sh sets them."""
    dirs = ["/usr/local/cuda/lib64"]
    for sp in site.getsitepackages():
        dirs += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib")))
        dirs += sorted(glob.glob(os.path.join(sp, "nvidia", "cu13", "lib")))
    return ":".join(dirs + [os.environ.get("LD_LIBRARY_PATH", "")])


def size_args(s, args):
    out = ["--device", s["device"], "--dtype", s["dtype"], "--steps", str(s["steps"]), "--warmup", str(s["warmup"]),
           "--rank", str(args.rank), "--tokens-side", str(s["side"]), "--text-len", str(s["text_len"]),
           "--depth", str(s["depth"]), "--depth-single", str(s["depth_single"]), "--hidden", str(s["hidden"]),
           "--heads", str(s["heads"])]
    return out + ([] if args.checkpointing else ["--no-checkpointing"])


def run_child(name, cmd, timeout, env=None):
    """Runs one side in its own process with a time limit; returns its JSON dict, or {"error": ...}.
    timeout None: not started (the budget is spent)."""
    if timeout is None:
        print(f"[{name}: not run, the time budget is spent]", flush=True)
        return {"error": "not run: the time budget (--budget) is spent"}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "result.json")
        cmd = cmd + ["--json", path]
        print("$", " ".join(cmd), flush=True)
        start = time.time()
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            sys.stdout.write(out)
            return {"error": f"stopped at its time limit of {timeout} s"}
        sys.stdout.write(proc.stdout)
        sys.stderr.write(proc.stderr[-6000:])
        print(f"[{name}: exit {proc.returncode} after {time.time() - start:.0f} s]", flush=True)
        result = None
        if os.path.exists(path):
            with open(path) as f:
                result = json.load(f)
        if result is None:
            tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or ["no output"]
            return {"error": f"exit {proc.returncode}: {tail[0][:300]}"}
        if proc.returncode != 0 and "error" not in result:
            result["error"] = f"exit {proc.returncode}" + ("" if result.get("guard_ok", True) else " (guard failed)")
        return result


# ---- the diffusers side (runs in a child process: --peer eager|compile) ----

def peer_main(args, s):
    import torch
    import torch.nn.functional as F
    result = {"program": "diffusers", "mode": args.peer}
    try:
        import diffusers
        import peft
        from diffusers import FluxTransformer2DModel
        from peft import LoraConfig
    except Exception as e:  # noqa: BLE001 - reported in the table
        result["error"] = f"diffusers/peft not importable ({type(e).__name__}: {e})"
        return result
    result.update(torch=torch.__version__, diffusers=diffusers.__version__, peft=peft.__version__)
    device = torch.device(s["device"])
    dtype = torch.bfloat16 if s["dtype"] == "bf16" else torch.float32
    if device.type == "cuda":
        result["gpu"] = torch.cuda.get_device_name(0)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    start = time.perf_counter()
    # Parameters made on the meta device in the model dtype, then allocated on the device and filled
    # there (as wick: weights N(0, 0.02), biases 0, norm scales 1): no 24 GB from the host.
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    with torch.device("meta"):
        model = FluxTransformer2DModel(
            patch_size=1, in_channels=IN_CHANNELS, num_layers=s["depth"], num_single_layers=s["depth_single"],
            attention_head_dim=s["hidden"] // s["heads"], num_attention_heads=s["heads"],
            joint_attention_dim=CONTEXT_DIM, pooled_projection_dim=VEC_DIM, guidance_embeds=True, axes_dims_rope=AXES)
    torch.set_default_dtype(default_dtype)
    model = model.to_empty(device=device)
    assert not list(model.named_buffers()), "the model has buffers to_empty would leave unset"
    generator = torch.Generator(device=device).manual_seed(7)
    with torch.no_grad():
        for name, module in model.named_modules():
            own = dict(module.named_parameters(recurse=False))
            if not own:
                continue
            kind = type(module).__name__
            if kind == "Linear":
                own["weight"].normal_(0.0, 0.02, generator=generator)
                if "bias" in own:
                    own["bias"].zero_()
            elif "Norm" in kind:
                own["weight"].fill_(1.0)
                if "bias" in own:
                    own["bias"].zero_()
            else:
                raise RuntimeError(f"no fill rule for {name} ({kind})")
    n_base = sum(p.numel() for p in model.parameters())
    weights_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    model.requires_grad_(False)
    model.add_adapter(LoraConfig(r=args.rank, lora_alpha=args.rank, init_lora_weights="gaussian",
                                 target_modules=TARGETS))
    trainable = [p for p in model.parameters() if p.requires_grad]
    result["lora_dtype"] = str(trainable[0].dtype).replace("torch.", "").replace("bfloat16", "bf16").replace(
        "float32", "f32")
    n_adapters = sum(1 for n, _ in model.named_modules() if n.endswith(".lora_A.default"))
    if args.checkpointing:
        model.enable_gradient_checkpointing()
    model.train()
    try:
        import bitsandbytes as bnb
        optimizer = bnb.optim.AdamW8bit(trainable, lr=LR, weight_decay=WEIGHT_DECAY)
        result["optimizer"] = f"bitsandbytes {bnb.__version__} AdamW8bit"
    except Exception as e:  # noqa: BLE001
        optimizer = torch.optim.AdamW(trainable, lr=LR, weight_decay=WEIGHT_DECAY, fused=device.type == "cuda")
        result["optimizer"] = "torch AdamW (" + ("fused, " if device.type == "cuda" else "") + "32-bit state)"
        result["optimizer_note"] = f"bitsandbytes not importable ({type(e).__name__}: {e})"
    if args.peer == "compile":
        model.compile_repeated_blocks()

    # Inputs: latents packed as FluxPipeline._pack_latents, position ids as _prepare_latent_image_ids.
    side, text_len = s["side"], s["text_len"]
    h = w = side // 2
    latents = torch.randn(1, IN_CHANNELS // 4, side, side, device=device, dtype=dtype, generator=generator)
    x0 = latents.view(1, IN_CHANNELS // 4, h, 2, w, 2).permute(0, 2, 4, 1, 3, 5).reshape(1, h * w, IN_CHANNELS)
    context = torch.randn(1, text_len, CONTEXT_DIM, device=device, dtype=dtype, generator=generator)
    pooled = torch.randn(1, VEC_DIM, device=device, dtype=dtype, generator=generator)
    img_ids = torch.zeros(h, w, 3, device=device, dtype=dtype)
    img_ids[..., 1] = torch.arange(h, device=device)[:, None]
    img_ids[..., 2] = torch.arange(w, device=device)[None, :]
    img_ids = img_ids.reshape(h * w, 3)
    txt_ids = torch.zeros(text_len, 3, device=device, dtype=dtype)
    guidance = torch.ones(1, device=device, dtype=torch.float32)
    mu = 0.5 + (1.15 - 0.5) * (h * w - 256) / (4096 - 256)  # Flux's resolution shift

    def step():
        noise = torch.randn(x0.shape, device=device, dtype=dtype, generator=generator)
        sigma = torch.sigmoid(torch.randn(1, device=device, generator=generator))
        sigma = math.exp(mu) / (math.exp(mu) + 1 / sigma - 1)
        s_b = sigma.to(dtype).view(1, 1, 1)
        x_t = (1 - s_b) * x0 + s_b * noise
        pred = model(hidden_states=x_t, encoder_hidden_states=context, pooled_projections=pooled, timestep=sigma,
                     img_ids=img_ids, txt_ids=txt_ids, guidance=guidance, return_dict=False)[0]
        loss = F.mse_loss(pred.float(), (noise - x0).float())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    sync()
    result["build_s"] = time.perf_counter() - start
    print(f"diffusers {args.peer}: {n_base / 1e9:.3f}B base parameters ({weights_bytes / 1e9:.2f} GB), {n_adapters} "
          f"LoRA adapters r{args.rank} ({sum(p.numel() for p in trainable) / 1e6:.2f}M trainable, "
          f"{trainable[0].dtype}), {result['optimizer']}, built in {result['build_s']:.1f} s", flush=True)
    losses, times = [], []
    try:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        losses.append(step().item())
        sync()
        result["first_step_ms"] = (time.perf_counter() - t0) * 1e3
        if device.type == "cuda":
            result["peak_first_step_bytes"] = torch.cuda.max_memory_allocated()
        print(f"diffusers {args.peer}: first step {result['first_step_ms']:.1f} ms", flush=True)
        for _ in range(1, s["warmup"]):
            losses.append(step().item())
        sync()
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        for _ in range(s["steps"]):
            sync()
            t0 = time.perf_counter()
            losses.append(step().item())  # .item() synchronizes, as wick's optimizer step does
            sync()
            times.append(time.perf_counter() - t0)
        if device.type == "cuda":
            result["peak_steady_bytes"] = torch.cuda.max_memory_allocated()
            result["device_in_use_bytes"] = torch.cuda.max_memory_reserved()
    except getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError) as e:
        result["error"] = "out of memory: " + str(e).splitlines()[0][:200]
        return result
    n = 8192 if device.type == "cuda" else 512
    a = torch.randn(n, n, device=device, dtype=dtype, generator=generator)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=generator)
    matmul = []
    for i in range(13):
        sync()
        t0 = time.perf_counter()
        a @ b
        sync()
        if i >= 3:
            matmul.append(time.perf_counter() - t0)
    result.update(step_ms=[t * 1e3 for t in times], median_ms=statistics.median(times) * 1e3, losses=losses,
                  n_parameters=n_base + sum(p.numel() for p in trainable),
                  n_trainable=sum(p.numel() for p in trainable), n_adapters=n_adapters, weights_bytes=weights_bytes,
                  matmul_tflops=2 * n ** 3 / statistics.median(matmul) / 1e12)
    if not all(math.isfinite(v) for v in losses):
        result["error"] = "a loss is not finite"
    print(f"diffusers {args.peer}: losses " + " ".join(f"{v:.6f}" for v in losses), flush=True)
    print(f"diffusers {args.peer}: median step {result['median_ms']:.1f} ms over {s['steps']} steps", flush=True)
    return result


# ---- the table ----

def gb(result, key):
    v = result.get(key)
    return f"{v / 1e9:.2f}" if isinstance(v, (int, float)) and v >= 0 else "-"


def table(rows, flops, wick):
    header = ["side", "step ms (median)", "first step ms", "diffusers/wick", "MFU", "HFU", "peak GB (first step)",
              "peak GB (steady)", "device GB", "trainable", "optimizer"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 2) + ["---"]) + "|"]
    wick_ms = wick.get("median_ms") if "error" not in wick else None
    for label, r in rows:
        if "median_ms" not in r or "error" in r:
            lines.append(f"| {label} | {r.get('error', 'no result')} |" + " |" * (len(header) - 2))
            continue
        ms = r["median_ms"]
        ratio = "1.00" if r is wick else (f"{ms / wick_ms:.2f}" if wick_ms else "-")
        lines.append("| " + " | ".join([
            label, f"{ms:.1f}", f"{r.get('first_step_ms', float('nan')):.0f}", ratio,
            f"{flops['model'] / (ms * 1e-3) / PEAK_FLOPS:.3f}", f"{flops['hardware'] / (ms * 1e-3) / PEAK_FLOPS:.3f}",
            gb(r, "peak_first_step_bytes"), gb(r, "peak_steady_bytes"), gb(r, "device_in_use_bytes"),
            f"{r.get('n_trainable', 0) / 1e6:.2f}M ({r.get('lora_dtype', '?')})",
            ("wick " if r is wick else "") + r.get("optimizer", "-")]) + " |")
    return "\n".join(lines)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_wick = os.path.join(here, "..", "..", "bin", "flux_step_bench")
    if not os.path.exists(default_wick):
        default_wick = os.path.join(here, "..", "..", "build", "bench", "flux_step_bench")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wick", default=default_wick, help="the flux_step_bench program")
    parser.add_argument("--smoke", action="store_true", help="the tiny model on the CPU, f32 (checks the script)")
    parser.add_argument("--compile", action="store_true", help="also diffusers with compile_repeated_blocks()")
    parser.add_argument("--no-checkpointing", dest="checkpointing", action="store_false")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--steps", type=int, help="timed steps (5; smoke 3)")
    parser.add_argument("--warmup", type=int, help="warm-up steps (2; smoke 1)")
    parser.add_argument("--tokens-side", dest="side", type=int, help="latent side in pixels (128 = 1024² images)")
    parser.add_argument("--text-len", type=int, help="T5 tokens (512)")
    parser.add_argument("--depth", type=int, help="double blocks (19)")
    parser.add_argument("--depth-single", type=int, help="single blocks (38)")
    parser.add_argument("--skip-wick", action="store_true")
    parser.add_argument("--skip-eager", action="store_true")
    parser.add_argument("--timeout", type=int, default=240, help="seconds for each side (compile: 1.5x)")
    parser.add_argument("--budget", type=int, help="seconds for all sides together: a side gets at most what is "
                        "left, and none is started with less than 30 s left")
    parser.add_argument("--markdown", help="also write the table and notes as markdown to this path")
    parser.add_argument("--peer", choices=["eager", "compile"], help=argparse.SUPPRESS)  # child mode
    parser.add_argument("--json", help=argparse.SUPPRESS)
    args = parser.parse_args()
    s = dict(SMOKE if args.smoke else FULL)
    for key in ("steps", "warmup", "side", "text_len", "depth", "depth_single"):
        if getattr(args, key) is not None:
            s[key] = getattr(args, key)
    if args.smoke:
        s["smoke"] = True

    if args.peer:
        try:
            result = peer_main(args, s)
        except Exception as e:  # noqa: BLE001 - the parent reports it
            traceback.print_exc()
            result = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"}
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        return 0 if "error" not in result else 3

    flops = flux_step_flops(s, args.rank, args.checkpointing)
    print(f"Flux step: {s['depth']} + {s['depth_single']} blocks, hidden {s['hidden']}, "
          f"{(s['side'] // 2) ** 2} image + {s['text_len']} text tokens, {s['dtype']} on {s['device']}, LoRA r{args.rank}, "
          f"checkpointing {'on' if args.checkpointing else 'off'}; FLOPs per step: model {flops['model']:.4g}, "
          f"hardware {flops['hardware']:.4g} (forward {flops['forward']:.4g}, backward {flops['backward']:.4g}, "
          f"recompute {flops['recompute']:.4g})", flush=True)
    sizes = size_args(s, args)
    deadline = time.time() + args.budget if args.budget else None

    def limit(seconds):
        """The side's time limit within the budget, or None when too little is left to start it."""
        if deadline is None:
            return seconds
        left = int(deadline - time.time())
        return min(seconds, left) if left >= 30 else None
    wick = {"error": "not run (--skip-wick)"}
    if not args.skip_wick:
        if not os.path.exists(args.wick):
            wick = {"error": f"{args.wick} not found"}
        else:
            wick = run_child("wick", [os.path.normpath(args.wick)] + sizes, limit(args.timeout),
                             env=dict(os.environ, LD_LIBRARY_PATH=library_path()))
            if "no CUDA device" in wick.get("error", ""):
                print("no CUDA device on this machine: nothing measured (--smoke runs the tiny model on the CPU)")
                return 0
            if "model_flops" in wick and abs(wick["model_flops"] - flops["model"]) > 1e-6 * flops["model"]:
                print(f"warning: model FLOPs differ: wick {wick['model_flops']:.6g}, this script {flops['model']:.6g}")
            if "step_ms" not in wick and "error" not in wick:
                wick["error"] = "no step measured"
    peer_cmd = [sys.executable, os.path.abspath(__file__)] + (["--smoke"] if args.smoke else [])
    peer_cmd += ["--rank", str(args.rank), "--steps", str(s["steps"]), "--warmup", str(s["warmup"]),
                 "--tokens-side", str(s["side"]), "--text-len", str(s["text_len"]), "--depth", str(s["depth"]),
                 "--depth-single", str(s["depth_single"])] + ([] if args.checkpointing else ["--no-checkpointing"])
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    eager = {"error": "not run (--skip-eager)"}
    if not args.skip_eager:
        eager = run_child("diffusers eager", peer_cmd + ["--peer", "eager"], limit(args.timeout), env)
    rows = [("wick", wick), ("diffusers + PEFT, eager", eager)]
    if args.compile:
        compiled = run_child("diffusers compile", peer_cmd + ["--peer", "compile"], limit(int(args.timeout * 1.5)),
                             env)
        rows.append(("diffusers + PEFT, compile_repeated_blocks", compiled))

    text = table(rows, flops, wick)
    notes = [
        "",
        f"Model FLOPs per step {flops['model']:.4g}, hardware FLOPs {flops['hardware']:.4g} (with the recomputed "
        f"forward: {flops['recompute']:.4g}); MFU and HFU against {PEAK_FLOPS / 1e12:.0f} TFLOP/s. "
        "diffusers/wick = diffusers ms / wick ms (> 1: wick is faster).",
    ]
    peer = next((r for _, r in rows[1:] if "torch" in r), None)
    if peer is not None:
        notes.append(f"Peer: torch {peer['torch']}, diffusers {peer['diffusers']}, peft {peer['peft']}"
                     + (f", on {peer['gpu']}" if "gpu" in peer else "") + ".")
    for label, r in rows:
        if "matmul_tflops" in r and "median_ms" in r:
            floor_ms = flops["hardware"] / (r["matmul_tflops"] * 1e12) * 1e3
            notes.append(f"{label}: {s['dtype']} matmul {'8192' if s['device'] == 'cuda' else '512'}³ {r['matmul_tflops']:.1f} "
                         f"TFLOP/s; floor (hardware FLOPs / that rate) {floor_ms:.1f} ms, the step is "
                         f"{r['median_ms'] / floor_ms:.2f}x the floor; {r.get('n_adapters', '?')} adapters, "
                         f"{r.get('n_parameters', 0) / 1e9:.3f}B parameters; losses "
                         + " ".join(f"{v:.4f}" for v in r.get("losses", [])))
        if "optimizer_note" in r:
            notes.append(f"{label}: {r['optimizer_note']}")
    text += "\n" + "\n".join(notes)
    print()
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    # Only wick's own failure fails the run: the peer's (out of memory, no diffusers) is in the table.
    return 1 if "error" in wick and not args.skip_wick else 0


if __name__ == "__main__":
    sys.exit(main())
