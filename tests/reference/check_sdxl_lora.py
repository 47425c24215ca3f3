#!/usr/bin/env python3
"""Checks that a kohya-format SDXL LoRA file (lora_unet_<sgm path>, LoCon on convolutions included) loads in diffusers
and reproduces an expected output; without --lora, that the diffusers UNet folder --weights (a full fine-tune wick
wrote) loads in diffusers and reproduces it.

    /tmp/venv/bin/python tests/reference/check_sdxl_lora.py --weights tests/data/sdxl/tiny_diffusers \\
        --case CASEFILE [--lora LORAFILE] [--tolerance 1e-5]

1. Builds UNet2DConditionModel from the diffusers folder --weights (float32, CPU, one thread).
2. Loads --lora through diffusers' SDXL path, what StableDiffusionXLPipeline.load_lora_weights does:
   StableDiffusionXLLoraLoaderMixin.lora_state_dict(file, unet_config=...) (kohya -> diffusers names, alphas to
   network_alphas), then load_lora_into_unet. Every kohya down / up tensor must land on its PEFT parameter (found by
   tensor identity through diffusers' conversion, as tests/reference/make_sdxl_fixtures.py does) and diffusers must
   warn of no missing or unexpected keys; otherwise exit 1.
3. Runs the model on CASEFILE's latents, timesteps, context, pooled and time_ids and compares the output with its
   expected_output: max |out - expected| / max |expected| <= tolerance -> exit 0, else exit 1.
Exit 77 when torch / diffusers / peft / safetensors cannot be imported; 2 on a usage error.
"""
import argparse
import os
import sys

try:
    import torch
    from safetensors.torch import load_file
    import peft  # noqa: F401  (diffusers' LoRA loading needs it)
    from diffusers import UNet2DConditionModel
    from diffusers.loaders import StableDiffusionXLLoraLoaderMixin
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import make_sdxl_fixtures as fixtures
    from reference_torch import captured_warnings, deterministic_torch, lora_key_warnings, rel_err
except Exception as e:  # noqa: BLE001
    print(f"check_sdxl_lora: skipped, cannot import torch/diffusers/peft/safetensors ({e})")
    sys.exit(77)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--weights", required=True)
    parser.add_argument("--case", required=True)
    parser.add_argument("--lora")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    args = parser.parse_args()
    for path in (args.weights, args.case, args.lora or args.case):
        if not os.path.exists(path):
            print(f"check_sdxl_lora: {path} does not exist")
            return 2
    deterministic_torch()
    model = UNet2DConditionModel.from_pretrained(args.weights, torch_dtype=torch.float32).eval()
    # Fresh (aligned) copies: torch's kernels may round differently for tensors at another offset of the file.
    case = {name: tensor.clone() for name, tensor in load_file(args.case).items()}
    inputs = {k: case[k] for k in ("timesteps", "context", "pooled", "time_ids")}
    if not args.lora:
        with torch.no_grad():
            err = rel_err(fixtures.diffusers_forward(model, inputs, case["latents"]), case["expected_output"])
        print(f"check_sdxl_lora: UNet2DConditionModel.from_pretrained({args.weights}): output vs wick's max rel err "
              f"{err:.3e} (tolerance {args.tolerance:g})")
        return 0 if err <= args.tolerance else 1
    with captured_warnings() as messages:
        names, state_dict, alphas = fixtures.diffusers_kohya_names(args.lora, model.config)
        StableDiffusionXLLoraLoaderMixin.load_lora_into_unet(state_dict, alphas, model, adapter_name="wick")
    params = {n: p for n, p in model.named_parameters() if ".wick." in n}
    raw = load_file(args.lora)
    missing, unexpected = [], []
    for kohya, peft_name in names.items():  # "down_blocks...to_q.lora_A.weight" -> "...to_q.lora_A.wick.weight"
        module, _, tail = peft_name.rpartition(".lora_")
        kind, _, rest = tail.partition(".")
        target = f"{module}.lora_{kind}.wick.{rest}"
        if target not in params or params[target].shape != raw[kohya].shape:
            unexpected.append(kohya)
    covered = {f"{m}.lora_{t.partition('.')[0]}.wick.{t.partition('.')[2]}"
               for m, _, t in (n.rpartition(".lora_") for n in names.values())}
    missing = sorted(set(params) - covered)
    warned = lora_key_warnings(messages)
    with torch.no_grad():
        out = fixtures.diffusers_forward(model, inputs, case["latents"])
    err = rel_err(out, case["expected_output"])
    n_down = sum(1 for k in raw if k.endswith(".lora_down.weight"))
    print(f"check_sdxl_lora: {n_down} kohya modules -> {len(params)} LoRA parameters in diffusers; missing "
          f"{len(missing)}, unexpected {len(unexpected)}, diffusers warnings {len(warned)}; output vs wick's "
          f"merged output max rel err {err:.3e} (tolerance {args.tolerance:g})")
    for k in missing[:5] + unexpected[:5] + warned[:3]:
        print(f"  {k}")
    ok = not missing and not unexpected and not warned and len(params) == 2 * n_down and err <= args.tolerance
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
