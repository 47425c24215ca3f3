#include "engine/data/buckets.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "runtime/error.h"
#include "runtime/philox.h"

namespace wick {
namespace {

// A uniform integer in [0, n) from a 32-bit word (multiply-shift; integer arithmetic only).
int64_t uniform_below(uint32_t word, int64_t n) {
  return static_cast<int64_t>((static_cast<uint64_t>(word) * static_cast<uint64_t>(n)) >> 32);
}

// kohya's round_to_steps: round to the nearest integer, then down to a multiple of step.
int64_t round_to_steps(double x, int64_t step) {
  const auto rounded = static_cast<int64_t>(x + 0.5);
  return rounded - rounded % step;
}

// The size that covers `bucket` with the image's aspect ratio, one side equal to the bucket's: the other
// rounded to nearest (kohya: int(side * scale + 0.5)), computed in integers so it is exact.
std::pair<int64_t, int64_t> cover_size(int64_t height, int64_t width, const Bucket& bucket) {
  if (width * bucket.height >= bucket.width * height)  // at least as wide as the bucket: match heights
    return {bucket.height, (2 * width * bucket.height + height) / (2 * height)};
  return {(2 * height * bucket.width + width) / (2 * width), bucket.width};
}

}  // namespace

std::string Bucket::name() const { return std::to_string(height) + "x" + std::to_string(width); }

BucketPlanner::BucketPlanner(const BucketOptions& options) : options_(options) {
  BucketOptions& o = options_;
  WICK_CHECK_KIND(Config, o.resolution > 0 && o.step > 0 && o.divisor > 0,
                  "buckets: resolution, step and divisor must be positive (got ", o.resolution, ", ", o.step, ", ",
                  o.divisor, ")");
  WICK_CHECK_KIND(Config, o.step % o.divisor == 0, "buckets: step ", o.step,
                  " is not a multiple of the model's divisor ", o.divisor,
                  " (bucket sides must be divisible by it: use a step of ", o.divisor, " x k)");
  WICK_CHECK_KIND(Config, o.max_aspect == 0.0 || o.max_aspect >= 1.0,
                  "buckets: max_aspect must be >= 1 or 0 (no limit), got ", o.max_aspect);
  if (o.min_side == 0) o.min_side = std::max(o.step, (o.resolution / 2) / o.step * o.step);
  if (o.max_side == 0) o.max_side = (2 * o.resolution) / o.step * o.step;
  WICK_CHECK_KIND(Config, o.min_side > 0 && o.min_side % o.step == 0 && o.max_side % o.step == 0,
                  "buckets: min_side ", o.min_side, " and max_side ", o.max_side, " must be multiples of step ",
                  o.step);
  WICK_CHECK_KIND(Config, o.min_side <= o.max_side, "buckets: min_side ", o.min_side, " exceeds max_side ",
                  o.max_side);
  if (o.no_upscale) return;

  // kohya's make_bucket_resolutions, in (W, H) pairs.
  const int64_t area = o.resolution * o.resolution;
  std::set<std::pair<int64_t, int64_t>> sizes;
  const auto square = static_cast<int64_t>(std::sqrt(static_cast<double>(area))) / o.step * o.step;
  sizes.insert({square, square});
  for (int64_t width = o.min_side; width <= o.max_side; width += o.step) {
    const int64_t height = std::min(o.max_side, area / width / o.step * o.step);
    if (height >= o.min_side) {
      sizes.insert({width, height});
      sizes.insert({height, width});
    }
  }
  for (const auto& [width, height] : sizes) {
    if (width <= 0 || height <= 0) continue;
    const double aspect = static_cast<double>(std::max(width, height)) / static_cast<double>(std::min(width, height));
    if (o.max_aspect != 0.0 && aspect > o.max_aspect * (1.0 + 1e-12)) continue;
    buckets_.push_back({height, width});
  }
  WICK_CHECK_KIND(Config, !buckets_.empty(), "buckets: no bucket fits resolution ", o.resolution, ", sides ",
                  o.min_side, "-", o.max_side, " and max_aspect ", o.max_aspect);
}

// kohya's select_bucket: the image's own size when it is a bucket, else the smallest |w/h - W/H|
// (the first in (W, H) order on a tie).
Bucket BucketPlanner::nearest_bucket(int64_t height, int64_t width) const {
  for (const Bucket& bucket : buckets_)
    if (bucket.height == height && bucket.width == width) return bucket;
  const double aspect = static_cast<double>(width) / static_cast<double>(height);
  const Bucket* best = &buckets_.front();
  double best_error = INFINITY;
  for (const Bucket& bucket : buckets_) {
    const double error = std::abs(static_cast<double>(bucket.width) / static_cast<double>(bucket.height) - aspect);
    if (error < best_error) {
      best_error = error;
      best = &bucket;
    }
  }
  return *best;
}

BucketPlacement BucketPlanner::place(int64_t height, int64_t width, const CropOptions& crop) const {
  WICK_CHECK(height > 0 && width > 0, "BucketPlanner::place: image size must be positive, got ", height, "x", width);
  const BucketOptions& o = options_;
  BucketPlacement p;
  p.original_height = height;
  p.original_width = width;
  if (!o.no_upscale) {
    p.bucket = nearest_bucket(height, width);
    std::tie(p.resized_height, p.resized_width) = cover_size(height, width, p.bucket);
  } else {
    // kohya's bucket_no_upscale branch of select_bucket.
    const double aspect = static_cast<double>(width) / static_cast<double>(height);
    const double area = static_cast<double>(o.resolution) * static_cast<double>(o.resolution);
    if (static_cast<double>(width) * static_cast<double>(height) > area) {
      const double resized_width = std::sqrt(area * aspect);
      const double resized_height = area / resized_width;
      // Round one side to the step and derive the other; keep the pair whose aspect error is smaller.
      const int64_t width_rounded = round_to_steps(resized_width, o.step);
      const int64_t height_for_width = round_to_steps(static_cast<double>(width_rounded) / aspect, o.step);
      const int64_t height_rounded = round_to_steps(resized_height, o.step);
      const int64_t width_for_height = round_to_steps(static_cast<double>(height_rounded) * aspect, o.step);
      const double error_w = height_for_width > 0
                                 ? std::abs(static_cast<double>(width_rounded) / height_for_width - aspect)
                                 : INFINITY;
      const double error_h = height_rounded > 0
                                 ? std::abs(static_cast<double>(width_for_height) / height_rounded - aspect)
                                 : INFINITY;
      if (error_w < error_h) {
        p.resized_width = width_rounded;
        p.resized_height = static_cast<int64_t>(static_cast<double>(width_rounded) / aspect + 0.5);
      } else {
        p.resized_width = static_cast<int64_t>(static_cast<double>(height_rounded) * aspect + 0.5);
        p.resized_height = height_rounded;
      }
    } else {
      p.resized_height = height;
      p.resized_width = width;
    }
    p.bucket = {p.resized_height - p.resized_height % o.step, p.resized_width - p.resized_width % o.step};
    WICK_CHECK_KIND(Data, p.bucket.height > 0 && p.bucket.width > 0, "buckets: a ", height, "x", width,
                    " image is too small or too narrow for ", o.step, "-pixel buckets (no_upscale)");
  }

  const int64_t slack_h = p.resized_height - p.bucket.height, slack_w = p.resized_width - p.bucket.width;
  WICK_CHECK_KIND(Runtime, slack_h >= 0 && slack_w >= 0, "buckets: internal error: ", p.resized_height, "x",
                  p.resized_width, " does not cover bucket ", p.bucket.name());
  if (crop.random) {
    const RngStream stream = derive_stream(crop.seed, crop.sample_key, crop.epoch, RngPurpose::Augment);
    const PhiloxBlock block = stream_block(stream, 0);
    p.crop_top = uniform_below(block.word[0], slack_h + 1);
    p.crop_left = uniform_below(block.word[1], slack_w + 1);
  } else {
    p.crop_top = slack_h / 2;  // kohya: trim_size // 2
    p.crop_left = slack_w / 2;
  }
  if (crop.flip) {
    p.flipped = true;
    p.crop_left = slack_w - p.crop_left;  // the same window, seen in the mirrored image
  }
  return p;
}

Image fit_to_bucket(const Image& image, const BucketPlacement& placement, const ResizeOptions& resize) {
  WICK_CHECK(image.height == placement.original_height && image.width == placement.original_width,
             "fit_to_bucket: the image is ", image.height, "x", image.width, " but the placement was made for ",
             placement.original_height, "x", placement.original_width);
  const Image resized = resize_image(image, placement.resized_height, placement.resized_width, resize);
  const int64_t left = placement.flipped ? placement.resized_width - placement.bucket.width - placement.crop_left
                                         : placement.crop_left;
  Image window = crop_image(resized, placement.crop_top, left, placement.bucket.height, placement.bucket.width);
  return placement.flipped ? flip_horizontal(window) : window;
}

}  // namespace wick
