#!/usr/bin/env python3
"""Reads a cached-latent dataset written by wick with h5py and checks it against docs/dataset.md.

    python3 tests/reference/read_latents_h5py.py data/fashion.h5
    python3 tests/reference/read_latents_h5py.py data/fashion.h5 --fashion-mnist /usr/share/datasets/fashion-mnist

Checks the root attributes, /bucket_names, /sample_index (every (bucket, row) exactly once), each
bucket's datasets (shapes, dtypes, per-sample chunks of latents and text/embeds, UTF-8 captions,
labels), and /label_names. With --fashion-mnist DIR (a file from `wick dataset pack fashion-mnist
--split train`), also that sample i is image i of the IDX files: latents[c = 2*dy + dx, y, x] =
2 * pixel[2y + dy, 2x + dx] / 255 - 1 (to f16 rounding), its label, and its caption = the label's
name. Prints a summary; exits 1 on the first mismatch. Needs h5py and numpy (Debian: python3-h5py).
"""
import argparse
import gzip
import os
import struct
import sys

import h5py
import numpy as np


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def expect(condition, message):
    if not condition:
        fail(message)


def text(value):
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def check_schema(f):
    attrs = dict(f.attrs)
    for name in ("format", "format_version", "model_family", "latent_channels", "vae_scaling_factor",
                 "vae_shift_factor"):
        expect(name in attrs, f"root attribute '{name}' is missing (has {sorted(attrs)})")
    expect(text(attrs["format"]) == "wick-latents", f"format is {attrs['format']!r}")
    expect(int(attrs["format_version"]) == 1, f"format_version is {attrs['format_version']}")
    channels = int(attrs["latent_channels"])
    names = list(f["bucket_names"].asstr())
    index = f["sample_index"][...]
    expect(index.dtype == np.int64 and index.ndim == 2 and index.shape[1] == 2, f"sample_index is {index.dtype} {index.shape}")
    seen, widths = set(), None
    for number, name in enumerate(names):
        b = f["buckets"][name]
        h, w = (int(v) for v in name.split("x"))
        latents, embeds, pooled, mask = b["latents"], b["text/embeds"], b["text/pooled"], b["text/mask"]
        n = latents.shape[0]
        expect(latents.shape == (n, channels, h, w) and latents.dtype == np.float16, f"{name}/latents is {latents.dtype} {latents.shape}")
        expect(latents.chunks == (1, channels, h, w), f"{name}/latents chunks {latents.chunks}, not one sample each")
        expect(embeds.ndim == 3 and embeds.shape[0] == n and embeds.dtype == np.float16, f"{name}/text/embeds is {embeds.dtype} {embeds.shape}")
        expect(embeds.chunks == (1,) + embeds.shape[1:], f"{name}/text/embeds chunks {embeds.chunks}")
        expect(pooled.ndim == 2 and pooled.shape[0] == n and pooled.dtype == np.float16, f"{name}/text/pooled is {pooled.dtype} {pooled.shape}")
        expect(mask.shape == embeds.shape[:2] and mask.dtype == np.uint8, f"{name}/text/mask is {mask.dtype} {mask.shape}")
        this = (embeds.shape[1], embeds.shape[2], pooled.shape[1])
        expect(widths in (None, this), f"{name}: L, D, P {this} differ from another bucket's {widths}")
        widths = this
        captions = list(b["captions"].asstr())
        expect(len(captions) == n, f"{name}/captions has {len(captions)} entries for {n} samples")
        if "labels" in b:
            expect(b["labels"].shape == (n,) and b["labels"].dtype == np.int64, f"{name}/labels is {b['labels'].dtype}")
        rows = {int(r) for k, r in index if k == number}
        expect(rows == set(range(n)), f"sample_index does not cover the rows of bucket {name} exactly once")
        seen |= {(number, r) for r in rows}
    expect(len(seen) == len(index), "sample_index has a (bucket, row) pair twice")
    return names, index


def idx_array(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(f">{dims}I", data[4:4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def check_fashion_mnist(f, names, index, directory):
    images = idx_array(os.path.join(directory, "train-images-idx3-ubyte.gz"))
    labels = idx_array(os.path.join(directory, "train-labels-idx1-ubyte.gz"))
    label_names = list(f["label_names"].asstr())
    expect(len(label_names) == 10, f"label_names has {len(label_names)} entries")
    worst = 0.0
    for sample, (number, row) in enumerate(index):
        b = f["buckets"][names[number]]
        pixels = images[sample].astype(np.float32) * np.float32(1.0 / 255.0) * np.float32(2.0) - np.float32(1.0)
        packed = pixels.reshape(14, 2, 14, 2).transpose(1, 3, 0, 2).reshape(4, 14, 14)  # [dy*2+dx, y, x]
        stored = b["latents"][row].astype(np.float32)
        worst = max(worst, float(np.abs(stored - packed).max()))
        expect(int(b["labels"][row]) == int(labels[sample]), f"sample {sample}: label {b['labels'][row]}, IDX {labels[sample]}")
        caption = b["captions"].asstr()[row]
        expect(caption == label_names[labels[sample]], f"sample {sample}: caption {caption!r}")
    expect(worst <= 2.0 ** -11, f"latents differ from the IDX pixels by up to {worst} (more than f16 rounding)")
    print(f"{len(index)} samples equal Fashion-MNIST's first images (largest difference {worst:.2e}), labels and captions")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file")
    parser.add_argument("--fashion-mnist", metavar="DIR")
    args = parser.parse_args()
    with h5py.File(args.file, "r") as f:
        names, index = check_schema(f)
        attrs = {k: text(v) if isinstance(v, (bytes, str)) else v for k, v in f.attrs.items()}
        print(f"{args.file}: {len(index)} samples in buckets {names}, attributes {attrs}")
        if args.fashion_mnist:
            check_fashion_mnist(f, names, index, args.fashion_mnist)
    print("h5py reads the file as docs/dataset.md describes")


if __name__ == "__main__":
    main()
