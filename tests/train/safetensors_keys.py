#!/usr/bin/env python3
"""The tensor names and shapes of a safetensors file, read from its header (standard library only).

    safetensors_keys.py FILE          prints "name [shape]" per tensor, sorted by name

As a module, for the LoRA-file checks of the architecture rows (tests/train/rows/*.sh, run as
`PYTHONPATH=tests/train python3 - OUT_DIR`, OUT_DIR a training_folder):

    from safetensors_keys import expect, lora_header, report
    meta, keys = lora_header("lora")                       # OUT_DIR/lora/lora/lora.safetensors: metadata, {name: shape}
    expect("kohya: alpha 0-d", keys.get("lora_unet_x.alpha") == [])
    report("kohya, PEFT")                                   # prints what is not as expected; exits 1 when anything is
"""
import json
import struct
import sys

_problems = []


def header(path):
    """(metadata, {name: shape}) of the safetensors file at `path`."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        h = json.loads(f.read(n))
    return h.pop("__metadata__", {}), {k: v["shape"] for k, v in h.items()}


def lora_header(run):
    """header() of run `run`'s LoRA file under the training folder sys.argv[1]."""
    return header(f"{sys.argv[1]}/{run}/lora/{run}.safetensors")


def expect(what, ok):
    if not ok:
        _problems.append(what)


def report(files):
    for problem in _problems:
        print(f"  not as expected: {problem}")
    print(f"LoRA files: {len(_problems)} problems ({files})")
    sys.exit(1 if _problems else 0)


if __name__ == "__main__":
    _, keys = header(sys.argv[1])
    for name, shape in sorted(keys.items()):
        print(name, shape)
