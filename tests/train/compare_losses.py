#!/usr/bin/env python3
"""Compares the losses of two metrics.jsonl files step by step (the last line of each step wins, as
docs/outputs.md says readers must do). Exit 0 when both hold the same steps 1..N with equal losses.
  compare_losses.py A/metrics.jsonl B/metrics.jsonl N [--tolerance T | --relative T]
N may be a range F..N: B (a run resumed at F - 1) holds exactly steps F..N and A holds them among others.
--tolerance T: |a - b| <= T * max(1, |a|); --relative T: |a - b| <= T * |a| (the largest relative
difference is printed)."""
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
    a, b = losses(sys.argv[1]), losses(sys.argv[2])
    first, n = (int(x) for x in sys.argv[3].split("..")) if ".." in sys.argv[3] else (1, int(sys.argv[3]))
    mode = sys.argv[4] if len(sys.argv) > 5 else ""
    if mode not in ("", "--tolerance", "--relative"):
        sys.exit(f"compare_losses.py: unknown option {mode} (--tolerance T or --relative T)")
    tolerance = float(sys.argv[5]) if mode else 0.0
    scale = (lambda x: abs(x)) if mode == "--relative" else (lambda x: max(1.0, abs(x)))
    bad, worst = 0, 0.0
    for step in range(first, n + 1):
        if step not in a or step not in b:
            print(f"step {step}: missing in {'A' if step not in a else 'B'}")
            bad += 1
            continue
        difference = abs(a[step] - b[step])
        worst = max(worst, difference / abs(a[step]) if a[step] else difference)
        if difference > tolerance * scale(a[step]):
            print(f"step {step}: {a[step]!r} != {b[step]!r}")
            bad += 1
    extra = sorted((set(b) if first > 1 else set(a) | set(b)) - set(range(first, n + 1)))
    if extra:
        print(f"steps outside {first}..{n}: {extra[:5]}")
        bad += 1
    how = f" ({mode[2:]} tolerance {tolerance}, largest relative difference {worst:.2e})" if mode else " (bitwise)"
    print(f"compared {n - first + 1} steps: {'equal' if bad == 0 else str(bad) + ' differences'}{how}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
