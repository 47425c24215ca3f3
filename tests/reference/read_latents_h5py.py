#!/usr/bin/env python3
"""Reads a cached-latent dataset written by wick with h5py and checks it against docs/dataset.md.

    python3 tests/reference/read_latents_h5py.py data/fashion.h5
    python3 tests/reference/read_latents_h5py.py data/fashion.h5 --fashion-mnist /usr/share/datasets/fashion-mnist
    python3 tests/reference/read_latents_h5py.py data/photos.h5 --encoded

Checks the root attributes, /bucket_names, /sample_index (every (bucket, row) exactly once), each
bucket's datasets (shapes, dtypes, per-sample chunks of latents and text/embeds, UTF-8 captions,
labels), the optional per-sample members where present (latents_logvar [N, C, H, W] f16 chunked per
sample, original_size and crop [N, 2] i64, flipped [N] u8, source [N] strings; in every bucket or in
none), /sample_prompts where present (captions [K], embeds [K, L, D] f16 with the samples' L and D,
pooled [K, P] f16, mask [K, L] u8), and /label_names. With --fashion-mnist DIR (a file from `wick
dataset pack fashion-mnist --split train`), also that sample i is image i of the IDX files:
latents[c = 2*dy + dx, y, x] = 2 * pixel[2y + dy, 2x + dx] / 255 - 1 (to f16 rounding), its label, and
its caption = the label's name. With --encoded (a file from `wick dataset encode`), also that every
optional member and the sample prompts are there, the logvars are finite, the text attributes are set,
and a flipped sample has the source, size and caption of the sample before it. Prints a summary; exits 1
on the first mismatch. Needs h5py and numpy (Debian: python3-h5py).
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
    seen, widths, optional = set(), None, {}
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
        for member, shape, dtype in (("latents_logvar", (n, channels, h, w), np.float16),
                                     ("original_size", (n, 2), np.int64), ("crop", (n, 2), np.int64),
                                     ("flipped", (n,), np.uint8)):
            present = member in b
            expect(optional.setdefault(member, present) == present, f"{name}/{member}: in some buckets only")
            if present:
                expect(b[member].shape == shape and b[member].dtype == dtype,
                       f"{name}/{member} is {b[member].dtype} {b[member].shape}, expected {np.dtype(dtype)} {shape}")
        if optional["latents_logvar"]:
            expect(b["latents_logvar"].chunks == (1, channels, h, w), f"{name}/latents_logvar chunks {b['latents_logvar'].chunks}")
        present = "source" in b
        expect(optional.setdefault("source", present) == present, f"{name}/source: in some buckets only")
        if present:
            expect(len(list(b["source"].asstr())) == n, f"{name}/source has {b['source'].shape} entries for {n}")
        rows = {int(r) for k, r in index if k == number}
        expect(rows == set(range(n)), f"sample_index does not cover the rows of bucket {name} exactly once")
        seen |= {(number, r) for r in rows}
    expect(len(seen) == len(index), "sample_index has a (bucket, row) pair twice")
    if "sample_prompts" in f:
        p = f["sample_prompts"]
        captions = list(p["captions"].asstr())
        k = len(captions)
        expect(p["embeds"].dtype == np.float16 and p["embeds"].shape[0] == k and p["embeds"].ndim == 3,
               f"sample_prompts/embeds is {p['embeds'].dtype} {p['embeds'].shape} for {k} captions")
        expect(widths is None or p["embeds"].shape[1:] == widths[:2], f"sample_prompts/embeds {p['embeds'].shape} vs L, D {widths}")
        expect(p["pooled"].dtype == np.float16 and p["pooled"].shape == (k, p["pooled"].shape[1])
               and (widths is None or p["pooled"].shape[1] == widths[2]), f"sample_prompts/pooled is {p['pooled'].shape}")
        expect(p["mask"].dtype == np.uint8 and p["mask"].shape == p["embeds"].shape[:2], f"sample_prompts/mask is {p['mask'].shape}")
    return names, index, optional


def check_encoded(f, names, index, optional):
    for member in ("latents_logvar", "original_size", "crop", "flipped", "source"):
        expect(optional.get(member), f"a file from wick dataset encode lacks {member}")
    expect("sample_prompts" in f, "no /sample_prompts")
    for name in ("text_embeds_encoder", "text_pooled_encoder", "text_max_length"):
        expect(name in f.attrs, f"root attribute {name} is missing")
    samples = []
    for number, row in index:
        b = f["buckets"][names[number]]
        expect(np.isfinite(b["latents_logvar"][row].astype(np.float32)).all(), f"sample {len(samples)}: logvar not finite")
        samples.append((b["source"].asstr()[row], tuple(b["original_size"][row]), int(b["flipped"][row]),
                        b["captions"].asstr()[row], names[number], tuple(b["crop"][row])))
    for i, (source, size, flipped, caption, bucket, crop) in enumerate(samples):
        expect(size[0] > 0 and size[1] > 0 and crop[0] >= 0 and crop[1] >= 0, f"sample {i}: size {size}, crop {crop}")
        if flipped:
            before = samples[i - 1]
            expect(i > 0 and before[2] == 0 and before[0] == source and before[1] == size and before[3] == caption
                   and before[4] == bucket, f"flipped sample {i} does not follow its image ({samples[i - 1]})")
    prompts = list(f["sample_prompts/captions"].asstr())
    print(f"{len(samples)} encoded samples ({sum(s[2] for s in samples)} flipped) from "
          f"{len({s[0] for s in samples})} images, sample prompts {prompts}")


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
    parser.add_argument("--encoded", action="store_true", help="a file from wick dataset encode")
    args = parser.parse_args()
    with h5py.File(args.file, "r") as f:
        names, index, optional = check_schema(f)
        attrs = {k: text(v) if isinstance(v, (bytes, str)) else v for k, v in f.attrs.items()}
        print(f"{args.file}: {len(index)} samples in buckets {names}, attributes {attrs}")
        if args.fashion_mnist:
            check_fashion_mnist(f, names, index, args.fashion_mnist)
        if args.encoded:
            check_encoded(f, names, index, optional)
    print("h5py reads the file as docs/dataset.md describes")


if __name__ == "__main__":
    main()
