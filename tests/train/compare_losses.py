#!/usr/bin/env python3
"""Compares the losses of two metrics.jsonl files step by step (the last line of each step wins, as
docs/outputs.md says readers must do). Exit 0 when both hold the same steps 1..N with equal losses.
  compare_losses.py A/metrics.jsonl B/metrics.jsonl N [--tolerance T]"""
import json
import sys


def losses(path):
    rows = {}
    for line in open(path):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            rows[row["step"]] = row.get("loss")
    return rows


def main():
    a, b, n = losses(sys.argv[1]), losses(sys.argv[2]), int(sys.argv[3])
    tolerance = float(sys.argv[5]) if len(sys.argv) > 5 and sys.argv[4] == "--tolerance" else 0.0
    bad = 0
    worst = 0.0
    for step in range(1, n + 1):
        if step not in a or step not in b:
            print(f"step {step}: missing in {'A' if step not in a else 'B'}")
            bad += 1
            continue
        worst = max(worst, abs(a[step] - b[step]) / max(1.0, abs(a[step])))
        if abs(a[step] - b[step]) > tolerance * max(1.0, abs(a[step])):
            print(f"step {step}: {a[step]!r} != {b[step]!r}")
            bad += 1
    extra = sorted((set(a) | set(b)) - set(range(1, n + 1)))
    if extra:
        print(f"steps outside 1..{n}: {extra[:5]}")
        bad += 1
    print(f"compared {n} steps: {'equal' if bad == 0 else str(bad) + ' differences'}"
          f"{' (tolerance ' + str(tolerance) + ', largest relative difference ' + format(worst, '.2e') + ')' if tolerance else ' (bitwise)'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
