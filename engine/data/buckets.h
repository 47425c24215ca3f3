// Aspect-ratio buckets, kohya sd-scripts' algorithm (docs/dataset.md "Buckets"): a list of (H, W) sizes of
// about resolution^2 pixels in `step`-pixel steps; each image goes to the bucket whose aspect ratio is
// nearest its own, is scaled to cover it and is cropped to it. The placement records what SDXL's
// micro-conditioning needs: the original size and the crop's top-left corner.
//
//   BucketPlanner planner({.resolution = 1024, .divisor = 16});       // Flux / SD3: sides divisible by 16
//   for (const Bucket& b : planner.buckets()) ...                       // (height, width) in pixels
//   BucketPlacement p = planner.place(3024, 4032, {.random = true, .seed = 42, .sample_key = 7});
//   Image x = fit_to_bucket(rgb, p);              // p.bucket.height x p.bucket.width, ready for the VAE
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/image_resize.h"
#include "engine/logging/image.h"

namespace wick {

struct Bucket {
  int64_t height = 0, width = 0;  // pixels
  std::string name() const;       // "<H>x<W>", e.g. "832x1216"
  bool operator==(const Bucket&) const = default;
};

struct BucketOptions {
  int64_t resolution = 1024;  // target area: resolution^2 pixels
  int64_t step = 64;          // every side a multiple of step (kohya's bucket_reso_steps)
  int64_t min_side = 0;       // shortest side; 0: resolution / 2, down to a multiple of step (kohya: 256 at 512)
  int64_t max_side = 0;       // longest side; 0: 2 * resolution, down to a multiple of step (kohya: 1024 at 512)
  double max_aspect = 4.0;    // drop buckets whose long side / short side exceeds it; 0: no limit
  int64_t divisor = 8;        // the model's factor (8: VAE; 16: Flux and SD3, whose latents must be even);
                              // step must be a multiple of it
  bool no_upscale = false;    // kohya's bucket_no_upscale: no predefined list; an image larger than the area
                              // is shrunk to it, a smaller one keeps its size; sides floored to the step
};

// How an image is cropped into its bucket.
struct CropOptions {
  bool random = false;       // a random window (Philox stream (seed, sample_key, epoch, Augment)), else centred
  uint64_t seed = 0;
  uint64_t sample_key = 0;   // e.g. the image's index in the sorted folder
  uint64_t epoch = 0;
  bool flip = false;         // mirror left-right
};

struct BucketPlacement {
  Bucket bucket;
  int64_t original_height = 0, original_width = 0;  // the image as decoded (EXIF orientation applied)
  int64_t resized_height = 0, resized_width = 0;    // scaled to cover the bucket (one side equals it)
  int64_t crop_top = 0, crop_left = 0;              // the bucket's window in the resized (and, when flipped,
                                                    // mirrored) image: SDXL's crop_coords_top_left
  bool flipped = false;
};

class BucketPlanner {
 public:
  // Checks the options (WickError Config: step a multiple of divisor, min/max sides multiples of step, ...).
  explicit BucketPlanner(const BucketOptions& options = {});

  // The options with min_side and max_side resolved.
  const BucketOptions& options() const { return options_; }
  // The predefined buckets sorted by (width, height), as kohya sorts its (W, H) list; empty with no_upscale.
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Where an image of height x width goes and how it is scaled and cropped. WickError (Data) when the image
  // is too small for any bucket (no_upscale and a side below the step).
  BucketPlacement place(int64_t height, int64_t width, const CropOptions& crop = {}) const;

 private:
  Bucket nearest_bucket(int64_t height, int64_t width) const;
  BucketOptions options_;
  std::vector<Bucket> buckets_;
};

// The image (original_height x original_width) resized, cropped and flipped as `placement` says.
Image fit_to_bucket(const Image& image, const BucketPlacement& placement, const ResizeOptions& resize = {});

}  // namespace wick
