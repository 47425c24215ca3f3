#!/usr/bin/env python3
"""Prints the highest step logged in a run's metrics.jsonl (0 when none; torn last lines are skipped).

    last_step.py output/run/metrics.jsonl
"""
import json
import sys

last = 0
try:
    with open(sys.argv[1]) as f:
        for line in f:
            try:
                last = max(last, json.loads(line)["step"])
            except (ValueError, KeyError):
                pass
except FileNotFoundError:
    pass
print(last)
