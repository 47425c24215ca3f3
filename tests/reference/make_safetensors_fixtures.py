#!/usr/bin/env python3
"""Writes the safetensors fixtures read by tests/runtime/safetensors_test.cpp.

    python -m venv /tmp/st && /tmp/st/bin/pip install safetensors numpy ml_dtypes
    /tmp/st/bin/python tests/reference/make_safetensors_fixtures.py tests/data/safetensors

Every value is a formula of the element's flat index i that the C++ test recomputes (see
`fixture_values` there; keep the two in sync). Files:
  all_dtypes.safetensors   every dtype of the format that numpy + ml_dtypes can express, a 0-d and an
                           empty tensor, and metadata; written by the safetensors package.
  wick_dtypes.safetensors  only wick's dtypes, one metadata key: wick's writer must reproduce it
                           byte for byte.
  misaligned.safetensors   hand-built (legal, never produced by the package): an F32 and an F64
                           tensor whose data are not aligned to their element size.
"""
from pathlib import Path

import ml_dtypes
import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from reference_common import encode_header, output_dir_argument, read_header


def index(shape):
    return np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64).reshape(shape)


def values(kind, shape):
    """The formulas (as arrays, also for 0-d shapes); mirrored in safetensors_test.cpp."""
    return np.asarray(formula(kind, shape))


def formula(kind, shape):
    i = index(shape)
    u = i.astype(np.uint64)
    if kind == "F64":
        return (i - 3) / 3.0
    if kind == "F32":
        return ((i - 3) / 3.0).astype(np.float32)
    if kind == "F16":
        return ((i % 17 - 8) * 0.25).astype(np.float16)
    if kind == "BF16":
        return ((i % 17 - 8) * 0.25).astype(ml_dtypes.bfloat16)
    if kind == "I64":
        return (i - 2) * 3_000_000_000
    if kind == "I32":
        return ((i - 5) * 100_000).astype(np.int32)
    if kind == "I16":
        return ((i - 5) * 1000).astype(np.int16)
    if kind == "I8":
        return ((i * 13) % 256 - 128).astype(np.int8)
    if kind == "U8":
        return ((i * 29) % 256).astype(np.uint8)
    if kind == "BOOL":
        return i % 3 == 0
    if kind == "U16":
        return ((i * 4099) % 65536).astype(np.uint16)
    if kind == "U32":
        return ((u * np.uint64(2654435761)) % np.uint64(1 << 32)).astype(np.uint32)
    if kind == "U64":
        with np.errstate(over="ignore"):
            return u * np.uint64(0x9E3779B97F4A7C15)
    if kind in ("F8_E4M3", "F8_E5M2"):
        raw = ((i * 37 + (11 if kind == "F8_E4M3" else 5)) % 256).astype(np.uint8)
        return raw.view(ml_dtypes.float8_e4m3fn if kind == "F8_E4M3" else ml_dtypes.float8_e5m2)
    raise ValueError(kind)


ALL = {
    "f64": ("F64", (5,)),
    "f32": ("F32", (2, 3, 4)),
    "f16": ("F16", (3, 3)),
    "bf16": ("BF16", (2, 5)),
    "i64": ("I64", (4,)),
    "i32": ("I32", (2, 2)),
    "i16": ("I16", (3,)),
    "i8": ("I8", (7,)),
    "u8": ("U8", (2, 3)),
    "bool": ("BOOL", (5,)),
    "u16": ("U16", (2, 2)),
    "u32": ("U32", (3,)),
    "u64": ("U64", (2,)),
    "f8_e4m3": ("F8_E4M3", (4, 4)),
    "f8_e5m2": ("F8_E5M2", (6,)),
    "scalar": ("F32", ()),
    "empty": ("F32", (0, 3)),
}

WICK = {
    "layer.weight": ("F32", (3, 4)),
    "layer.bias": ("F32", (4,)),
    "norm.scale": ("BF16", (6,)),
    "half": ("F16", (2, 3)),
    "double": ("F64", (3,)),
    "steps": ("I64", (2,)),
    "ids": ("I32", (5,)),
    "bytes": ("U8", (3,)),
    "signed": ("I8", (9,)),
}


def main(out_dir):
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    save_file({name: values(kind, shape) for name, (kind, shape) in ALL.items()}, str(out / "all_dtypes.safetensors"),
              metadata={"format": "pt", "wick_fixture": "all_dtypes"})
    save_file({name: values(kind, shape) for name, (kind, shape) in WICK.items()}, str(out / "wick_dtypes.safetensors"),
              metadata={"format": "pt"})

    # Misaligned: the data section starts 8-aligned, and "a" (3 bytes) pushes "b" and "c" off their
    # alignment (file offsets 3 mod 8).
    a = values("U8", (3,)).tobytes()
    b = values("F32", (2, 2)).tobytes()
    c = values("F64", (3,)).tobytes()
    header = {
        "a": {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]},
        "b": {"dtype": "F32", "shape": [2, 2], "data_offsets": [3, 19]},
        "c": {"dtype": "F64", "shape": [3], "data_offsets": [19, 43]},
    }
    (out / "misaligned.safetensors").write_bytes(encode_header(header) + a + b + c)

    # Check every file reads back with the intended values: through the package where its numpy
    # loader knows the dtype (not F8), else by reading the header and bytes directly.
    for file, table in (("all_dtypes", ALL), ("wick_dtypes", WICK)):
        path = out / f"{file}.safetensors"
        raw = path.read_bytes()
        header, data_start = read_header(str(path))
        with safe_open(str(path), framework="numpy") as f:
            for name, (kind, shape) in table.items():
                want = values(kind, shape)
                assert header[name]["dtype"] == kind and header[name]["shape"] == list(shape), (file, name)
                if kind.startswith("F8"):
                    begin, end = header[name]["data_offsets"]
                    got = raw[data_start + begin : data_start + end]
                else:
                    got = f.get_tensor(name).tobytes()
                assert got == want.tobytes(), (file, name)
    loaded = load_file(str(out / "misaligned.safetensors"))
    assert loaded["b"].tobytes() == b and loaded["c"].tobytes() == c
    total = sum(p.stat().st_size for p in out.glob("*.safetensors"))
    print(f"wrote {len(list(out.glob('*.safetensors')))} fixtures, {total} bytes, to {out}")


if __name__ == "__main__":
    main(output_dir_argument("tests/data/safetensors"))
