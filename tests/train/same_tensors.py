#!/usr/bin/env python3
"""Exit 0 when two safetensors files hold the same tensors (names, dtypes, shapes, bytes), whatever
their metadata (run names and config hashes differ between runs).

    same_tensors.py A.safetensors B.safetensors
"""
import json
import struct
import sys


def tensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    body = data[8 + n:]
    return {name: (e["dtype"], e["shape"], body[e["data_offsets"][0]:e["data_offsets"][1]]) for name, e in header.items()}


a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
if a.keys() != b.keys():
    print(f"different tensor names: {sorted(a.keys() ^ b.keys())[:5]}")
    sys.exit(1)
bad = [name for name in a if a[name] != b[name]]
print(f"{len(a)} tensors: {'bitwise equal' if not bad else str(len(bad)) + ' differ, e.g. ' + bad[0]}")
sys.exit(1 if bad else 0)
