#!/usr/bin/env python3
"""Compares two PNGs of the same size (8-bit gray or RGB, as wick writes them; standard library only): prints the
largest difference of a channel value in 8-bit levels and how many values differ; exits 1 when the sizes differ or
the largest difference is above MAX_LEVELS.

    png_difference.py A.png B.png MAX_LEVELS
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from png_cells import read_png  # noqa: E402

a, b = read_png(sys.argv[1]), read_png(sys.argv[2])
if a[:3] != b[:3]:
    print(f"different sizes: {a[:3]} and {b[:3]}")
    sys.exit(1)
largest, differing, total = 0, 0, 0
for row_a, row_b in zip(a[3], b[3]):
    for x, y in zip(row_a, row_b):
        total += 1
        if x != y:
            differing += 1
            largest = max(largest, abs(x - y))
print(f"{sys.argv[1]} vs {sys.argv[2]}: {differing} of {total} values differ, by at most {largest} levels "
      f"(bound {sys.argv[3]})")
sys.exit(0 if largest <= int(sys.argv[3]) else 1)
