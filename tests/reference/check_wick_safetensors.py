#!/usr/bin/env python3
"""Loads a file written by wick's save_safetensors with the Python safetensors package and checks it.

    mkdir -p /tmp/wick_export
    WICK_SAFETENSORS_EXPORT=/tmp/wick_export ./build/tests/wick_runtime_tests \
        --gtest_filter='Safetensors.WriterMatchesThePythonPackageByteForByte'
    /tmp/st/bin/python tests/reference/check_wick_safetensors.py /tmp/wick_export/wick_written.safetensors

Checks: the package loads every tensor; names, dtypes, shapes and values equal the fixture formulas
(make_safetensors_fixtures.py's WICK table); the metadata round-trips; and the package, given the
same tensors and a one-key metadata, writes the same bytes (wick's layout = the package's layout).
"""
import struct
import sys

from safetensors import safe_open
from safetensors.numpy import save

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from make_safetensors_fixtures import WICK, values  # noqa: E402
from reference_common import frame_header  # noqa: E402


def main(path):
    with safe_open(path, framework="numpy") as f:
        names = set(f.keys())
        assert names == set(WICK), f"names differ: {sorted(names ^ set(WICK))}"
        metadata = f.metadata()
        assert metadata == {"format": "pt", "writer": "wick"}, metadata
        loaded = {}
        for name, (kind, shape) in WICK.items():
            tensor = f.get_tensor(name)
            want = values(kind, shape)
            assert tensor.shape == tuple(shape), (name, tensor.shape, shape)
            assert tensor.dtype == want.dtype, (name, tensor.dtype, want.dtype)
            assert tensor.tobytes() == want.tobytes(), name
            loaded[name] = tensor
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    assert n % 8 == 0, n
    # Same tensors through the package with the metadata the wick file has: only the order of the
    # two metadata keys may differ (the package writes them in hash order), so compare with one key
    # by rebuilding wick's header without "writer".
    ours = save(loaded, metadata={"format": "pt"})
    header = raw[8 : 8 + n].rstrip(b" ").replace(b',"writer":"wick"', b"")
    rebuilt = frame_header(header) + raw[8 + n :]
    assert rebuilt == ours, "layout differs from the package's"
    print(f"OK: {path}: {len(WICK)} tensors load with the Python package, values and layout match")


if __name__ == "__main__":
    main(sys.argv[1])
