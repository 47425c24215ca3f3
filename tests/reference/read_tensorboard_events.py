#!/usr/bin/env python3
"""Loads an event file written by wick with TensorBoard's own reader and prints what it finds.

    python3 -m venv /tmp/tb && /tmp/tb/bin/pip install tensorboard      # no TensorFlow needed
    mkdir -p /tmp/wick_logging
    WICK_LOGGING_EXPORT=/tmp/wick_logging ./build/tests/wick_engine_tests --gtest_filter='TensorBoard.*'
    /tmp/tb/bin/python tests/reference/read_tensorboard_events.py --expect-wick-test /tmp/wick_logging/events.out.tfevents.*
    /tmp/tb/bin/python tests/reference/read_tensorboard_events.py --expect-resumed /tmp/wick_logging/resumed_run

Prints every scalar (tag, step, value) and every image (tag, step, width x height, PNG size), and
exits non-zero when the file holds no scalars, when an image is not a PNG, or, with --expect-wick-test,
when the values differ from those TensorBoard.EventFileParsesBackWithFramingCrcsAndFields writes, or,
with --expect-resumed on the directory TensorBoard.ResumeWritesASessionStartAtTheFirstNewStep writes,
when TensorBoard did not drop the interrupted run's steps 4 and 5 on the resumed run's SessionLog START.
"""
import argparse
import sys

from tensorboard.backend.event_processing import event_accumulator

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# What the wick test writes: {tag: [(step, value), ...]} and one 13x9 image.
WICK_TEST_SCALARS = {"train/loss": [(10, 0.25), (20, 0.125), (-1, -3.5)], "train/lr": [(10, 1e-4)]}
# The resumed run: steps 1..5 (1/step), then a resume at step 4 and steps 4..6 (10*step).
WICK_RESUMED_SCALARS = {"train/loss": [(1, 1.0), (2, 0.5), (3, 1 / 3), (4, 40.0), (5, 50.0), (6, 60.0)]}


def same_scalars(got, want):
    got, want = sorted(got), sorted(want)
    return len(got) == len(want) and all(
        s == t and abs(v - w) <= 1e-6 * max(1.0, abs(w)) for (s, v), (t, w) in zip(got, want)
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("event_file", help="an event file, or a run directory (all its event files)")
    parser.add_argument("--expect-wick-test", action="store_true")
    parser.add_argument("--expect-resumed", action="store_true")
    args = parser.parse_args()

    accumulator = event_accumulator.EventAccumulator(
        args.event_file, size_guidance={event_accumulator.SCALARS: 0, event_accumulator.IMAGES: 0}
    )
    accumulator.Reload()
    tags = accumulator.Tags()
    print(f"file_version: {accumulator.file_version}")
    print(f"tags: scalars={tags['scalars']} images={tags['images']}")

    scalars = {}
    for tag in tags["scalars"]:
        for event in accumulator.Scalars(tag):
            print(f"scalar {tag} step={event.step} value={event.value:.6g} wall_time={event.wall_time:.3f}")
            scalars.setdefault(tag, []).append((event.step, event.value))
    ok = bool(scalars)
    for tag in tags["images"]:
        for event in accumulator.Images(tag):
            is_png = event.encoded_image_string.startswith(PNG_SIGNATURE)
            print(f"image {tag} step={event.step} {event.width}x{event.height} "
                  f"{len(event.encoded_image_string)} bytes png={is_png}")
            ok &= is_png

    if args.expect_wick_test:
        for tag, expected in WICK_TEST_SCALARS.items():
            got = scalars.get(tag, [])
            same = same_scalars(got, expected)
            print(f"check {tag}: {'ok' if same else f'MISMATCH got {sorted(got)} want {sorted(expected)}'}")
            ok &= same
        images = accumulator.Images("samples") if "samples" in tags["images"] else []
        image_ok = len(images) == 1 and (images[0].width, images[0].height, images[0].step) == (13, 9, 20)
        print(f"check image samples: {'ok' if image_ok else 'MISMATCH'}")
        ok &= image_ok
    if args.expect_resumed:
        for tag, expected in WICK_RESUMED_SCALARS.items():
            got = scalars.get(tag, [])
            same = same_scalars(got, expected)
            print(f"check resumed {tag}: {'ok' if same else f'MISMATCH got {sorted(got)} want {sorted(expected)}'}")
            ok &= same
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
