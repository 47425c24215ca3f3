#!/usr/bin/env python3
"""Writes the image fixtures read by tests/engine/image_io_test.cpp into tests/data/images/:
small generated JPEG / PNG / WebP files (every colour type, Adam7 interlacing, EXIF orientations 1-8, CMYK and YCCK, 16-bit,
palettes, alpha) with the pixels Pillow decodes from them (as PNG files, `expected/`), broken files, the
resampling references of OpenCV (INTER_AREA, what kohya uses to shrink) and Pillow (BICUBIC, what
ai-toolkit uses), and what Pillow reads from the Debian photographs (real_photos.json).

Usage: python3 tests/reference/make_image_fixtures.py tests/data/images
Needs from pip: pillow, numpy, opencv-python-headless (made with Pillow 13.0.0 / libjpeg-turbo 3.2.0 /
libwebp 1.6.0, numpy 2.4.6, OpenCV 5.0.0); from Debian: libturbojpeg0 (Pillow cannot write a YCCK JPEG,
TurboJPEG writes one from CMYK pixels), python-matplotlib-data and xplanet-images (the photographs).

Where Pillow itself is not the reference (documented in docs/dataset.md):
  gray16.png   Pillow turns a 16-bit gray PNG into RGB by clipping each value to 255 (nearly white);
               wick keeps the high byte, as Pillow does for 16-bit RGB and RGBA: expected = value >> 8.
  composite    the *_over_white.png references are Pillow's paste(image, mask=alpha) on a white image,
               which kohya and ai-toolkit do not do (they drop the alpha channel: the *_discard.png).
"""
import ctypes
import json
import os
import struct
import sys
import zlib

import cv2
import numpy as np
from PIL import Image, ImageOps

from reference_common import output_dir_argument

OUT = output_dir_argument("tests/data/images")
EXPECTED = os.path.join(OUT, "expected")
ORIENTATION_TAG = 0x0112


def path(name):
    return os.path.join(OUT, name)


def save_expected(name, image):
    image.convert("RGB").save(os.path.join(EXPECTED, name), optimize=True)


def pattern(height, width, seed=0):
    """A photo-like RGB test image: smooth waves, a ramp and some noise."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    rng = np.random.default_rng(seed)
    r = 128 + 100 * np.sin(x / 5.0) * np.cos(y / 7.0)
    g = 255 * x / max(width - 1, 1)
    b = 60 + 120 * (y / max(height - 1, 1)) + rng.normal(0, 18, (height, width))
    return np.clip(np.stack([r, g, b], axis=-1), 0, 255).round().astype(np.uint8)


def png_chunk(tag, data):
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)


def write_png(name, width, height, bit_depth, color_type, rows, chunks=(), late_chunks=()):
    """A PNG written by hand (Pillow cannot write 16-bit RGB, 16-bit RGBA or 2-bit gray), with `chunks`
    before the image data and `late_chunks` after it."""
    header = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    data = zlib.compress(b"".join(b"\x00" + row for row in rows), 9)
    blob = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header)
    blob += b"".join(png_chunk(tag, payload) for tag, payload in chunks)
    blob += png_chunk(b"IDAT", data)
    blob += b"".join(png_chunk(tag, payload) for tag, payload in late_chunks) + png_chunk(b"IEND", b"")
    with open(path(name), "wb") as f:
        f.write(blob)


def exif_bytes(orientation):
    exif = Image.Exif()
    exif[ORIENTATION_TAG] = orientation
    return exif.tobytes()


def over_white(image):
    rgba = image.convert("RGBA")
    canvas = Image.new("RGB", rgba.size, (255, 255, 255))
    canvas.paste(rgba, mask=rgba.getchannel("A"))
    return canvas


def turbojpeg_ycck(cmyk, name):
    """A YCCK JPEG from CMYK pixels through Debian's libturbojpeg0 (TurboJPEG writes CMYK as YCCK)."""
    tj = ctypes.CDLL("libturbojpeg.so.0")
    tj.tjInitCompress.restype = ctypes.c_void_p
    handle = ctypes.c_void_p(tj.tjInitCompress())
    height, width, _ = cmyk.shape
    buffer = np.ascontiguousarray(cmyk)
    out = ctypes.POINTER(ctypes.c_ubyte)()
    size = ctypes.c_ulong(0)
    TJPF_CMYK, TJSAMP_444 = 11, 0
    status = tj.tjCompress2(handle, buffer.ctypes.data_as(ctypes.c_void_p), width, width * 4, height, TJPF_CMYK,
                            ctypes.byref(out), ctypes.byref(size), TJSAMP_444, 92, 0)
    assert status == 0, "tjCompress2 failed"
    with open(path(name), "wb") as f:
        f.write(ctypes.string_at(out, size.value))
    tj.tjFree(out)
    tj.tjDestroy(handle)


def make_orientations():
    # The displayed image: four quadrants of distinct colours, 24 x 32 (whole 16x16 JPEG blocks).
    displayed = np.zeros((24, 32, 3), np.uint8)
    displayed[:12, :16] = (230, 30, 30)
    displayed[:12, 16:] = (30, 200, 30)
    displayed[12:, :16] = (30, 30, 220)
    displayed[12:, 16:] = (230, 220, 30)
    canonical = Image.fromarray(displayed)
    canonical.save(os.path.join(EXPECTED, "orientation_displayed.png"))
    T = Image.Transpose
    # Stored = the inverse of what exif_transpose applies, so every file displays `canonical`.
    inverse = {1: None, 2: T.FLIP_LEFT_RIGHT, 3: T.ROTATE_180, 4: T.FLIP_TOP_BOTTOM, 5: T.TRANSPOSE,
               6: T.ROTATE_90, 7: T.TRANSVERSE, 8: T.ROTATE_270}
    for orientation, method in inverse.items():
        stored = canonical if method is None else canonical.transpose(method)
        name = f"orientation_{orientation}.jpg"
        stored.save(path(name), quality=95, exif=exif_bytes(orientation))
        shown = ImageOps.exif_transpose(Image.open(path(name))).convert("RGB")
        assert shown.size == canonical.size
        for y, x in [(5, 7), (5, 24), (18, 7), (18, 24)]:  # quadrant centres (edges bleed: 4:2:0 chroma)
            assert np.abs(np.asarray(shown, np.int16)[y, x] - displayed[y, x]).max() <= 12, (orientation, y, x)
        save_expected(f"orientation_{orientation}.png", shown)
    # The same tag in a PNG eXIf chunk and a WebP EXIF chunk.
    canonical.transpose(T.ROTATE_90).save(path("orientation_6.png"), exif=exif_bytes(6))
    canonical.transpose(T.ROTATE_270).save(path("orientation_8.webp"), lossless=True, exif=exif_bytes(8))
    # An eXIf chunk after the image data (allowed, and read by Pillow after decoding).
    stored = np.asarray(canonical.transpose(T.ROTATE_90))
    write_png("orientation_6_late.png", stored.shape[1], stored.shape[0], 8, 2, [row.tobytes() for row in stored],
              late_chunks=[(b"eXIf", exif_bytes(6)[6:])])  # the TIFF block, without "Exif\0\0"
    for name in ["orientation_6.png", "orientation_6_late.png", "orientation_8.webp"]:
        shown = ImageOps.exif_transpose(Image.open(path(name))).convert("RGB")
        assert np.array_equal(np.asarray(shown), displayed), name


def make_jpegs(rgb):
    image = Image.fromarray(rgb)
    image.save(path("rgb.jpg"), quality=90)
    image.save(path("progressive.jpg"), quality=90, progressive=True)
    image.convert("L").save(path("gray.jpg"), quality=90)
    image.convert("CMYK").save(path("cmyk.jpg"), quality=92)
    turbojpeg_ycck(np.asarray(image.convert("CMYK")), "ycck.jpg")
    for name in ["rgb.jpg", "progressive.jpg", "gray.jpg", "cmyk.jpg", "ycck.jpg"]:
        decoded = Image.open(path(name))
        assert name != "ycck.jpg" or decoded.mode == "CMYK"
        save_expected(name.replace(".jpg", "_jpg.png"), decoded)


def make_pngs(rgb):
    height, width, _ = rgb.shape
    image = Image.fromarray(rgb)
    image.save(path("rgb.png"))
    image.convert("L").save(path("gray.png"))
    save_expected("gray.png", Image.open(path("gray.png")))
    image.convert("P", palette=Image.Palette.ADAPTIVE, colors=16).save(path("palette.png"))
    save_expected("palette.png", Image.open(path("palette.png")))

    # Alpha: RGBA, gray + alpha and a palette with a tRNS table.
    alpha = np.tile(np.linspace(0, 255, width).round().astype(np.uint8), (height, 1))
    rgba = Image.fromarray(np.dstack([rgb, alpha]))
    rgba.save(path("rgba.png"))
    Image.fromarray(np.dstack([np.asarray(image.convert("L")), alpha[::-1, ::-1]]), "LA").save(path("gray_alpha.png"))
    palette = image.convert("P", palette=Image.Palette.ADAPTIVE, colors=8)
    palette.save(path("palette_trns.png"), transparency=bytes([0, 64, 128, 255, 255, 200, 30, 255]))
    for name in ["rgba.png", "gray_alpha.png", "palette_trns.png"]:
        decoded = Image.open(path(name))
        save_expected(name.replace(".png", "_over_white.png"), over_white(decoded))
        save_expected(name.replace(".png", "_discard.png"), decoded.convert("RGB"))

    # 16 bits: gray (Pillow "I;16"), RGB and RGBA (written by hand).
    rng = np.random.default_rng(1)
    gray16 = rng.integers(0, 65536, (height, width), dtype=np.uint16)
    write_png("gray16.png", width, height, 16, 0, [row.astype(">u2").tobytes() for row in gray16])
    save_expected("gray16.png", Image.fromarray((gray16 >> 8).astype(np.uint8)))
    rgb16 = rng.integers(0, 65536, (height, width, 3), dtype=np.uint16)
    write_png("rgb16.png", width, height, 16, 2, [row.astype(">u2").tobytes() for row in rgb16])
    decoded = Image.open(path("rgb16.png"))
    assert np.array_equal(np.asarray(decoded.convert("RGB")), (rgb16 >> 8).astype(np.uint8))
    save_expected("rgb16.png", decoded)
    rgba16 = rng.integers(0, 65536, (height, width, 4), dtype=np.uint16)
    write_png("rgba16.png", width, height, 16, 6, [row.astype(">u2").tobytes() for row in rgba16])
    decoded = Image.open(path("rgba16.png"))
    save_expected("rgba16_over_white.png", over_white(decoded))
    save_expected("rgba16_discard.png", decoded.convert("RGB"))

    # Adam7 interlacing (Pillow cannot write it): the seven passes' sub-images, each row with filter 0.
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
    stream = b"".join(b"\x00" + rgb[y, x0::dx].tobytes()
                      for x0, y0, dx, dy in passes if x0 < width for y in range(y0, height, dy))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 1)
    with open(path("interlaced.png"), "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", zlib.compress(stream, 9)) +
                png_chunk(b"IEND", b""))
    assert np.array_equal(np.asarray(Image.open(path("interlaced.png"))), rgb)

    # 2-bit gray: values 0-3 scale to 0, 85, 170, 255.
    gray2 = (np.arange(height * width).reshape(height, width) % 4).astype(np.uint8)
    rows = []
    for row in gray2:
        packed = bytearray()
        for i in range(0, width, 4):
            quad = list(row[i:i + 4]) + [0] * (4 - len(row[i:i + 4]))
            packed.append(quad[0] << 6 | quad[1] << 4 | quad[2] << 2 | quad[3])
        rows.append(bytes(packed))
    write_png("gray2.png", width, height, 2, 0, rows)
    save_expected("gray2.png", Image.open(path("gray2.png")))


def make_webps(rgb):
    height, width, _ = rgb.shape
    image = Image.fromarray(rgb)
    image.save(path("lossless.webp"), lossless=True)
    assert np.array_equal(np.asarray(Image.open(path("lossless.webp")).convert("RGB")), rgb)
    image.save(path("lossy.webp"), quality=80)
    save_expected("lossy.png", Image.open(path("lossy.webp")))
    alpha = np.tile(np.linspace(255, 0, height).round().astype(np.uint8)[:, None], (1, width))
    Image.fromarray(np.dstack([rgb, alpha])).save(path("alpha.webp"), lossless=True)
    decoded = Image.open(path("alpha.webp"))
    save_expected("alpha_webp_over_white.png", over_white(decoded))
    save_expected("alpha_webp_discard.png", decoded.convert("RGB"))


def make_broken():
    with open(path("rgb.jpg"), "rb") as f:
        jpeg = f.read()
    with open(path("rgb.png"), "rb") as f:
        png = f.read()
    with open(path("lossy.webp"), "rb") as f:
        webp = f.read()
    files = {
        "truncated.jpg": jpeg[: len(jpeg) * 6 // 10],
        "truncated_header.jpg": jpeg[:100],
        "truncated.png": png[: len(png) * 6 // 10],
        "truncated.webp": webp[: len(webp) * 6 // 10],
        "empty.jpg": b"",
        "text.jpg": b"this is a text file, not a JPEG\n",
        "garbage.jpg": b"\xff\xd8\xff\xe0" + bytes(np.random.default_rng(2).integers(0, 256, 400, dtype=np.uint8)),
    }
    # The image data intact but its chunk's CRC wrong.
    idat = png.index(b"IDAT")
    crc_at = idat + 4 + struct.unpack(">I", png[idat - 4:idat])[0]
    files["bad_crc.png"] = png[:crc_at] + bytes([png[crc_at] ^ 0xFF]) + png[crc_at + 1:]
    # Decompression bombs: headers that claim 100000 x 100000 (PNG) and 60000 x 60000 (JPEG) pixels.
    header = struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0)
    files["bomb.png"] = (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) +
                         png_chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + png_chunk(b"IEND", b""))
    sof = jpeg.index(b"\xff\xc0")
    files["bomb.jpg"] = jpeg[: sof + 5] + struct.pack(">HH", 60000, 60000) + jpeg[sof + 9:]
    for name, blob in files.items():
        with open(path(name), "wb") as f:
            f.write(blob)
    # A GIF named .png: refused by its content, not its name.
    Image.fromarray(pattern(8, 8)).save(path("gif_named.png"), format="GIF")


def make_resize_references(rgb):
    image = Image.fromarray(rgb)
    image.save(os.path.join(EXPECTED, "resize_source.png"))
    # cv2.resize takes (width, height).
    Image.fromarray(cv2.resize(rgb, (32, 24), interpolation=cv2.INTER_AREA)).save(
        os.path.join(EXPECTED, "resize_area_24x32.png"))
    Image.fromarray(cv2.resize(rgb, (27, 20), interpolation=cv2.INTER_AREA)).save(
        os.path.join(EXPECTED, "resize_area_20x27.png"))
    image.resize((27, 20), Image.Resampling.BICUBIC).save(os.path.join(EXPECTED, "resize_bicubic_20x27.png"))
    image.resize((100, 80), Image.Resampling.BICUBIC).save(os.path.join(EXPECTED, "resize_bicubic_80x100.png"))


def summary_of(pixels):
    """Channel means and the pixels at a 5 x 5 grid of points."""
    h, w, _ = pixels.shape
    points = [(y * (h - 1) // 4, x * (w - 1) // 4) for y in range(5) for x in range(5)]
    return {"height": h, "width": w, "mean": [float(pixels[..., c].mean()) for c in range(3)],
            "samples": [[y, x] + [int(v) for v in pixels[y, x]] for y, x in points]}


# kohya sd-scripts' placements for these photos (BucketManager.select_bucket with make_bucket_resolutions,
# checked in buckets_test.cpp): (resolution, bucket H x W, resized H x W, crop top, crop left, filter).
# kohya shrinks with cv2.INTER_AREA and enlarges with Pillow's LANCZOS (library/utils.py resize_image).
KOHYA_FITS = {
    "grace_hopper.jpg": [(512, (576, 448), (576, 492), 0, 22, "area"),
                         (1024, (1088, 960), (1125, 960), 18, 0, "lanczos")],
    "earth.jpg": [(512, (320, 704), (352, 704), 16, 0, "area")],
    "night.jpg": [(512, (320, 704), (352, 704), 16, 0, "area")],
    "sun.jpg": [(512, (320, 704), (352, 704), 16, 0, "area")],
}


def make_real_photo_summary():
    photos = ["/usr/share/matplotlib/mpl-data/sample_data/grace_hopper.jpg", "/usr/share/xplanet/images/earth.jpg",
              "/usr/share/xplanet/images/night.jpg", "/usr/share/xplanet/images/sun.jpg"]
    summary = []
    for photo in photos:
        if not os.path.exists(photo):
            sys.exit(f"{photo} is missing: apt-get install python-matplotlib-data xplanet-images")
        pixels = np.asarray(Image.open(photo).convert("RGB"))
        entry = {"path": photo, "decoded": summary_of(pixels), "kohya": []}
        for resolution, bucket, resized, top, left, kind in KOHYA_FITS[os.path.basename(photo)]:
            if kind == "area":
                scaled = cv2.resize(pixels, (resized[1], resized[0]), interpolation=cv2.INTER_AREA)
            else:
                scaled = np.asarray(Image.fromarray(pixels).resize((resized[1], resized[0]), Image.Resampling.LANCZOS))
            fitted = scaled[top:top + bucket[0], left:left + bucket[1]]
            entry["kohya"].append({"resolution": resolution, "bucket": list(bucket), "resized": list(resized),
                                   "crop": [top, left], "filter": kind, "fitted": summary_of(fitted)})
        summary.append(entry)
    with open(path("real_photos.json"), "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")


def main():
    os.makedirs(EXPECTED, exist_ok=True)
    rgb = pattern(48, 64)
    make_orientations()
    make_jpegs(rgb)
    make_pngs(rgb)
    make_webps(rgb)
    make_broken()
    make_resize_references(rgb)
    make_real_photo_summary()


if __name__ == "__main__":
    main()
