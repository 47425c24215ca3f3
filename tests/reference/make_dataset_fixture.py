#!/usr/bin/env python3
"""Writes the cached-latent dataset fixtures read by tests/engine/latent_dataset_test.cpp, with h5py
(independently of wick's writer). Values follow formulas the C++ test recomputes:
  latents[b][n, c, h, w] = (b * 100 + n * 10 + c + 0.25 * h + 0.125 * w) / 64   (exact in f16)
  embeds[b][n, l, d]     = (b - n + 0.5 * l - 0.25 * d) / 8
  pooled[b][n, p]        = (n + p) / 16
  mask[b][n, l]          = 1 if l <= n % L else 0
  labels[b][n]           = (b * 7 + n) % 3
Usage: python3 tests/reference/make_dataset_fixture.py tests/data/dataset   (needs h5py, numpy)
"""
import os

import h5py
import numpy as np

from reference_common import output_dir_argument

C, L, D, P = 4, 3, 5, 6
BUCKETS = [("4x4", 4, 4, 5), ("2x6", 2, 6, 3)]  # name, H, W, N
CAPTIONS = ["a shoe", "café ☕", "Ankle boot", "", "x y z w"]
LABEL_NAMES = ["zero", "one", "two"]


def bucket_arrays(b, h, w, n):
    N, Cc, H, W = np.meshgrid(np.arange(n), np.arange(C), np.arange(h), np.arange(w), indexing="ij")
    latents = ((b * 100 + N * 10 + Cc + 0.25 * H + 0.125 * W) / 64).astype(np.float16)
    N, Ll, Dd = np.meshgrid(np.arange(n), np.arange(L), np.arange(D), indexing="ij")
    embeds = ((b - N + 0.5 * Ll - 0.25 * Dd) / 8).astype(np.float16)
    N, Pp = np.meshgrid(np.arange(n), np.arange(P), indexing="ij")
    pooled = ((N + Pp) / 16).astype(np.float16)
    mask = np.array([[1 if l <= k % L else 0 for l in range(L)] for k in range(n)], dtype=np.uint8)
    labels = np.array([(b * 7 + k) % 3 for k in range(n)], dtype=np.int64)
    captions = [CAPTIONS[(b + k) % len(CAPTIONS)] for k in range(n)]
    return latents, embeds, pooled, mask, labels, captions


def write(path, mutate=None):
    # libver v108: compact groups (small files), readable by HDF5 1.8 and newer.
    with h5py.File(path, "w", libver=("v108", "v110")) as f:
        f.attrs["format"] = "wick-latents"
        f.attrs["format_version"] = 1
        f.attrs["model_family"] = "test-family"
        f.attrs["latent_channels"] = C
        f.attrs["vae_scaling_factor"] = 0.5
        f.attrs["vae_shift_factor"] = 0.25
        f.attrs["text_encoder"] = "fixture"
        str_type = h5py.string_dtype("utf-8")
        f.create_dataset("bucket_names", data=[name for name, *_ in BUCKETS], dtype=str_type)
        f.create_dataset("label_names", data=LABEL_NAMES, dtype=str_type)
        index = []
        for b, (name, h, w, n) in enumerate(BUCKETS):
            latents, embeds, pooled, mask, labels, captions = bucket_arrays(b, h, w, n)
            g = f.create_group(f"buckets/{name}")
            g.create_dataset("latents", data=latents, chunks=(1, C, h, w))
            g.create_dataset("text/embeds", data=embeds)
            g.create_dataset("text/pooled", data=pooled)
            g.create_dataset("text/mask", data=mask)
            g.create_dataset("captions", data=captions, dtype=str_type)
            g.create_dataset("labels", data=labels)
            index += [(b, r) for r in range(n)]
        # Interleave the buckets so ids do not follow bucket order: id i -> index[order[i]].
        order = [0, 5, 1, 6, 2, 7, 3, 4]
        f.create_dataset("sample_index", data=np.array([index[k] for k in order], dtype=np.int64))
        if mutate:
            mutate(f)


def main():
    out = output_dir_argument("tests/data/dataset")
    os.makedirs(out, exist_ok=True)
    write(os.path.join(out, "fixture.h5"))

    def wrong_format(f):
        f.attrs["format"] = "not-wick"

    def missing_dataset(f):
        del f["buckets/2x6/text/pooled"]

    def wrong_shape(f):
        del f["buckets/4x4/latents"]
        f["buckets/4x4"].create_dataset("latents", data=np.zeros((5, C, 4, 3), dtype=np.float16))

    def nan_latents(f):
        f["buckets/2x6/latents"][1, 2, 1, 3] = np.nan

    def wrong_version(f):
        f.attrs["format_version"] = 2

    for name, mutate in [("wrong_format", wrong_format), ("missing_dataset", missing_dataset),
                         ("wrong_shape", wrong_shape), ("nan_latents", nan_latents),
                         ("wrong_version", wrong_version)]:
        write(os.path.join(out, f"bad_{name}.h5"), mutate)


if __name__ == "__main__":
    main()
