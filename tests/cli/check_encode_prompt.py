#!/usr/bin/env python3
"""Checks a file written by `wick encode-prompt` against diffusers' encode_prompt outputs in
tests/data/prompts/encode_prompt_cases.safetensors (python3 standard library only).

    check_encode_prompt.py prompts FIXTURE                 # prints the fixture's prompts, NUL-separated
    check_encode_prompt.py check OUT FIXTURE CONTEXT_KEY POOLED_KEY [--zero-rows 1] [--tokens NAME=KEY ...]
                           [--meta KEY=VALUE ...]

`check` compares OUT's context and pooled with the fixture's tensors (max |a - b| / max |b| <= 1e-5, rows listed in
--zero-rows must be exactly zero instead), its token tensors with the fixture's ids, its mask with T5's (t5_mask) or
the CLIP windows, and its metadata entries; it prints one line per check and exits 1 on a failure.
"""
import json
import struct
import sys
from array import array

TOLERANCE = 1e-5
FORMATS = {"F32": "f", "F64": "d", "I64": "q", "I32": "i"}


def read(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        if info["dtype"] not in FORMATS:
            sys.exit(f"{path}: {name} has dtype {info['dtype']}, which this checker does not read")
        values = array(FORMATS[info["dtype"]])
        values.frombytes(raw[8 + n + begin:8 + n + end])
        if sys.byteorder != "little":
            values.byteswap()
        tensors[name] = (info["shape"], list(values))
    return tensors, metadata


def rows(shape, values):
    size = len(values) // shape[0] if shape[0] else 0
    return [values[i * size:(i + 1) * size] for i in range(shape[0])]


def relative(got, want):
    scale = max((abs(w) for w in want), default=0.0)
    worst = max((abs(g - w) for g, w in zip(got, want)), default=0.0)
    return worst / scale if scale > 0 else worst


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "prompts":
        _, metadata = read(sys.argv[2])
        sys.stdout.write("".join(p + "\0" for p in json.loads(metadata["prompts"])))
        return 0
    if len(sys.argv) < 6 or sys.argv[1] != "check":
        sys.exit(__doc__)
    out_path, fixture_path, context_key, pooled_key = sys.argv[2:6]
    zero_rows, tokens, meta = set(), {}, {}
    args = sys.argv[6:]
    while args:
        flag, value = args[0], args[1]
        if flag == "--zero-rows":
            zero_rows = {int(r) for r in value.split(",")}
        elif flag == "--tokens":
            name, key = value.split("=", 1)
            tokens[name] = key
        elif flag == "--meta":
            key, expected = value.split("=", 1)
            meta[key] = expected
        else:
            sys.exit(f"unknown option {flag}")
        args = args[2:]

    out, metadata = read(out_path)
    fixture, fixture_metadata = read(fixture_path)
    failures = 0

    def report(ok, text):
        nonlocal failures
        print(("ok: " if ok else "FAIL: ") + text)
        failures += not ok

    report(json.loads(metadata.get("prompts", "[]")) == json.loads(fixture_metadata["prompts"]),
           "the file's prompts are the fixture's")
    for name, key in (("context", context_key), ("pooled", pooled_key)):
        shape, values = out[name]
        want_shape, want = fixture[key]
        if shape != want_shape:
            report(False, f"{name} shape {shape}, expected {want_shape} ({key})")
            continue
        got_rows, want_rows = rows(shape, values), rows(shape, want)
        for r, (g, w) in enumerate(zip(got_rows, want_rows)):
            if r in zero_rows:
                report(not any(g), f"{name} row {r} is zero")
            else:
                err = relative(g, w)
                report(err <= TOLERANCE, f"{name} row {r} vs {key}: {err:.2e} (bound {TOLERANCE:g})")
    for name, key in tokens.items():
        report(out[name][0] == fixture[key][0] and out[name][1] == fixture[key][1], f"{name} == {key}")
    mask_shape, mask = out["mask"]
    report(mask_shape == out["context"][0][:2], f"mask shape {mask_shape}")
    if "t5_mask" in out:
        report(out["t5_mask"][1] == [int(i != 0) for i in out["t5_ids"][1]], "t5_mask is 1 on pieces and EOS")
    for key, expected in meta.items():
        report(metadata.get(key) == expected, f"metadata {key} = {metadata.get(key)!r} (expected {expected!r})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
