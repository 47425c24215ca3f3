#!/usr/bin/env python3
"""Writes the seed inputs of the fuzz targets (tests/fuzz/*_fuzz.cpp) into a folder per target:
small valid files of each format, from which libFuzzer's mutations start. scripts/fuzz.sh runs it
when a target's committed corpus (tests/fuzz/corpus/<target>/) is empty. Standard library only.

  tests/fuzz/make_seeds.py OUT_DIR
"""
import gzip
import hashlib
import json
import pathlib
import struct
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def safetensors(tensors, metadata=None):
    """tensors: {name: (dtype, shape, bytes)} -> file bytes (offsets in the order given)."""
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def f32(n, value=0.25):
    return struct.pack("<%df" % n, *([value] * n))


def idx(type_code, dims, payload):
    return bytes([0, 0, type_code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + payload


def main(out):
    out = pathlib.Path(out)
    seeds = {name: {} for name in ("safetensors", "config", "latent_dataset", "manifest", "lora", "idx")}
    for path in sorted((ROOT / "tests/data/safetensors").glob("*.safetensors")):
        seeds["safetensors"][path.stem] = path.read_bytes()
    seeds["safetensors"]["f16_2x3"] = safetensors({"w": ("F16", [2, 3], bytes(12))}, {"format": "pt"})
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        seeds["config"][path.stem] = path.read_bytes()
    seeds["latent_dataset"]["fixture"] = (ROOT / "tests/data/dataset/fixture.h5").read_bytes()
    model = bytes([1, 2, 3, 4])  # the model.safetensors manifest_fuzz.cpp writes
    manifest = {"format": "wick.checkpoint", "format_version": 1, "step": 10, "world_size": 2,
                "config_hash": "0123456789abcdef", "created": "2026-11-25T00:00:00Z", "wick_version": "0.1.0",
                "files": [{"name": "model.safetensors", "bytes": 4, "sha256": hashlib.sha256(model).hexdigest()}]}
    seeds["manifest"]["valid"] = json.dumps(manifest, indent=2).encode() + b"\0step_00000010\n"
    seeds["manifest"]["no_latest"] = json.dumps(manifest).encode()
    # The fuzz model: conv_in Conv2d 3 -> 8 (3x3), proj Linear 8 -> 4; LoRA rank 2, alpha 16.
    seeds["lora"]["kohya"] = safetensors({
        "lora_unet_conv_in.alpha": ("F32", [], f32(1, 16.0)),
        "lora_unet_conv_in.lora_down.weight": ("F32", [2, 3, 3, 3], f32(54)),
        "lora_unet_conv_in.lora_up.weight": ("F32", [8, 2, 1, 1], f32(16)),
        "lora_unet_proj.alpha": ("F32", [], f32(1, 16.0)),
        "lora_unet_proj.lora_down.weight": ("F32", [2, 8], f32(16)),
        "lora_unet_proj.lora_up.weight": ("F32", [4, 2], f32(8)),
    }, {"ss_network_dim": "2", "ss_network_alpha": "16"})
    seeds["lora"]["kohya_dora"] = safetensors({
        "lora_unet_proj.alpha": ("F32", [], f32(1, 16.0)),
        "lora_unet_proj.dora_scale": ("F32", [1, 8], f32(8)),
        "lora_unet_proj.lora_down.weight": ("F32", [2, 8], f32(16)),
        "lora_unet_proj.lora_up.weight": ("BF16", [4, 2], bytes(16)),
    })
    seeds["lora"]["peft"] = safetensors({
        "transformer.proj.lora_A.weight": ("F32", [2, 8], f32(16)),
        "transformer.proj.lora_B.weight": ("F32", [4, 2], f32(8)),
    }, {"lora_adapter_metadata": json.dumps({"r": 2, "lora_alpha": 16, "alpha_pattern": {"proj": 8}})})
    seeds["lora"]["peft_dora"] = safetensors({
        "transformer.proj.lora_A.weight": ("F32", [2, 8], f32(16)),
        "transformer.proj.lora_B.weight": ("F32", [4, 2], f32(8)),
        "transformer.proj.lora_magnitude_vector": ("F32", [4], f32(4)),
    }, {"lora_adapter_metadata": json.dumps({"r": 2, "lora_alpha": 16, "use_dora": True})})
    u8 = idx(0x08, [3, 2, 2], bytes(range(12)))
    seeds["idx"]["u8"] = b"\0" + u8
    seeds["idx"]["u8_gz"] = b"\1" + gzip.compress(u8, mtime=0)
    seeds["idx"]["f32"] = b"\0" + idx(0x0D, [2], struct.pack(">2f", 1.5, -2.0))
    seeds["idx"]["i32_labels_gz"] = b"\1" + gzip.compress(idx(0x0C, [4], struct.pack(">4i", 0, 1, 2, 9)), mtime=0)
    for target, files in seeds.items():
        (out / target).mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (out / target / ("seed_" + name)).write_bytes(data)


if __name__ == "__main__":
    main(sys.argv[1])
