// Aspect-ratio buckets: the lists and placements kohya sd-scripts computes (make_bucket_resolutions and
// BucketManager.select_bucket at commit 48d368f, run on these sizes), crops, flips and option checks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "engine/data/buckets.h"

namespace wick {
namespace {

using ::testing::HasSubstr;

std::vector<Bucket> from_kohya(const std::vector<std::pair<int64_t, int64_t>>& width_height) {
  std::vector<Bucket> buckets;
  for (auto [width, height] : width_height) buckets.push_back({height, width});
  return buckets;
}

TEST(Buckets, ListsAreKohyas) {
  // kohya's defaults at 512 (min 256, max 1024), and the usual SDXL setting at 1024 (min 512, max 2048):
  // wick's defaults min = resolution / 2, max = 2 x resolution give the same.
  EXPECT_EQ(BucketPlanner({.resolution = 512}).buckets(),
            from_kohya({{256, 832}, {256, 896}, {256, 960}, {256, 1024}, {320, 704}, {320, 768}, {384, 640},
                        {448, 576}, {512, 512}, {576, 448}, {640, 384}, {704, 320}, {768, 320}, {832, 256},
                        {896, 256}, {960, 256}, {1024, 256}}));
  const BucketPlanner sdxl({.resolution = 1024});
  EXPECT_EQ(sdxl.options().min_side, 512);
  EXPECT_EQ(sdxl.options().max_side, 2048);
  EXPECT_EQ(sdxl.buckets(),
            from_kohya({{512, 1856},  {512, 1920},  {512, 1984},  {512, 2048},  {576, 1664}, {576, 1728}, {576, 1792},
                        {640, 1536},  {640, 1600},  {704, 1408},  {704, 1472},  {768, 1280}, {768, 1344}, {832, 1216},
                        {896, 1152},  {960, 1088},  {1024, 1024}, {1088, 960},  {1152, 896}, {1216, 832}, {1280, 768},
                        {1344, 768},  {1408, 704},  {1472, 704},  {1536, 640},  {1600, 640}, {1664, 576}, {1728, 576},
                        {1792, 576},  {1856, 512},  {1920, 512},  {1984, 512},  {2048, 512}}));
  for (const Bucket& bucket : sdxl.buckets()) {
    EXPECT_EQ(bucket.height % 16, 0);
    EXPECT_EQ(bucket.width % 16, 0);
    EXPECT_LE(bucket.height * bucket.width, 1024 * 1024);
  }
  EXPECT_EQ(Bucket({832, 1216}).name(), "832x1216");
}

TEST(Buckets, AspectLimitDropsTheLongBuckets) {
  EXPECT_EQ(BucketPlanner({.resolution = 512, .max_aspect = 2.0}).buckets(),
            from_kohya({{384, 640}, {448, 576}, {512, 512}, {576, 448}, {640, 384}}));
  EXPECT_EQ(BucketPlanner({.resolution = 512, .max_aspect = 0.0}).buckets().size(), 17u);
}

struct PlacementCase {
  int64_t resolution;
  bool no_upscale;
  int64_t height, width;                  // the image
  int64_t bucket_height, bucket_width;
  int64_t resized_height, resized_width;
};

// kohya's select_bucket(width, height) for each size, turned into (height, width).
const PlacementCase placement_cases[] = {
    {512, false, 600, 512, 576, 448, 576, 492},      // portrait photo: nearest aspect 448/576
    {512, false, 1024, 2048, 320, 704, 352, 704},    // 2:1
    {512, false, 3024, 4032, 448, 576, 448, 597},    // 4:3 phone photo
    {512, false, 4032, 3024, 576, 448, 597, 448},    // 3:4
    {512, false, 480, 640, 448, 576, 448, 597},      // 4:3, enlarged
    {512, false, 1000, 1000, 512, 512, 512, 512},
    {512, false, 100, 100, 512, 512, 512, 512},      // small: enlarged to the bucket
    {512, false, 512, 512, 512, 512, 512, 512},
    {512, false, 2000, 300, 1024, 256, 1707, 256},   // 1:6.7: the narrowest bucket, cropped hard
    {512, false, 1080, 1920, 384, 640, 384, 683},    // 16:9
    {512, false, 500, 5000, 256, 1024, 256, 2560},   // 10:1
    {1024, false, 600, 512, 1088, 960, 1125, 960},
    {1024, false, 1024, 2048, 704, 1408, 704, 1408},
    {1024, false, 3024, 4032, 896, 1152, 896, 1195},
    {1024, false, 1080, 1920, 768, 1344, 768, 1365},
    {1024, false, 2000, 300, 2048, 512, 3413, 512},
    {512, true, 600, 512, 512, 448, 525, 448},       // bucket_no_upscale
    {512, true, 1024, 2048, 320, 640, 320, 640},
    {512, true, 3024, 4032, 384, 512, 384, 512},
    {512, true, 1080, 1920, 384, 640, 384, 683},
    {512, true, 100, 100, 64, 64, 100, 100},         // smaller than the area: kept, floored to the step
    {512, true, 2000, 300, 1280, 192, 1280, 192},
    {512, true, 500, 5000, 128, 1280, 128, 1280},
};

TEST(Buckets, PlacementsAreKohyas) {
  for (const PlacementCase& c : placement_cases) {
    SCOPED_TRACE(std::to_string(c.height) + "x" + std::to_string(c.width) + " at " + std::to_string(c.resolution) +
                 (c.no_upscale ? " no_upscale" : ""));
    const BucketPlanner planner({.resolution = c.resolution, .no_upscale = c.no_upscale});
    const BucketPlacement p = planner.place(c.height, c.width);
    EXPECT_EQ(p.bucket, (Bucket{c.bucket_height, c.bucket_width}));
    EXPECT_EQ(p.resized_height, c.resized_height);
    EXPECT_EQ(p.resized_width, c.resized_width);
    EXPECT_EQ(p.original_height, c.height);
    EXPECT_EQ(p.original_width, c.width);
    // Centred crop: kohya's trim_size // 2.
    EXPECT_EQ(p.crop_top, (c.resized_height - c.bucket_height) / 2);
    EXPECT_EQ(p.crop_left, (c.resized_width - c.bucket_width) / 2);
    EXPECT_FALSE(p.flipped);
  }
}

TEST(Buckets, RandomCropIsDeterministicAndCoversTheRange) {
  const BucketPlanner planner({.resolution = 512});
  std::set<int64_t> lefts;
  for (uint64_t key = 0; key < 400; ++key) {
    const BucketPlacement p = planner.place(1080, 1920, {.random = true, .seed = 7, .sample_key = key});
    EXPECT_EQ(p.crop_top, 0);
    ASSERT_GE(p.crop_left, 0);
    ASSERT_LE(p.crop_left, 683 - 640);
    lefts.insert(p.crop_left);
    const BucketPlacement again = planner.place(1080, 1920, {.random = true, .seed = 7, .sample_key = key});
    EXPECT_EQ(again.crop_left, p.crop_left);
  }
  EXPECT_EQ(lefts.size(), 44u);  // every offset 0-43 drawn
  const auto left_for = [&](uint64_t seed, uint64_t epoch) {
    return planner.place(1080, 1920, {.random = true, .seed = seed, .sample_key = 3, .epoch = epoch}).crop_left;
  };
  int n_same = 0;
  for (uint64_t seed = 0; seed < 20; ++seed) n_same += left_for(seed, 0) == left_for(seed, 1);
  EXPECT_LT(n_same, 5);
}

TEST(Buckets, FitCropsTheRecordedWindowAndFlipMirrorsIt) {
  // A 30 x 40 image whose pixels encode their coordinates, fitted to 32 x 32 (covered by 32 x 43).
  Image image(30, 40, 3);
  for (int64_t y = 0; y < 30; ++y)
    for (int64_t x = 0; x < 40; ++x) image.set(y, x, {static_cast<uint8_t>(y * 8), static_cast<uint8_t>(x * 6), 77});
  const BucketPlanner planner({.resolution = 32, .step = 16, .min_side = 16, .max_side = 64, .max_aspect = 2.0});
  const BucketPlacement plain = planner.place(30, 40, {.random = true, .seed = 1, .sample_key = 9});
  EXPECT_EQ(plain.bucket, (Bucket{32, 32}));  // the only bucket within aspect 2
  const Image fitted = fit_to_bucket(image, plain, {.filter = ResizeFilter::Area});
  ASSERT_EQ(fitted.height, 32);
  ASSERT_EQ(fitted.width, 32);
  const Image resized = resize_image(image, plain.resized_height, plain.resized_width, {.filter = ResizeFilter::Area});
  const Image window = crop_image(resized, plain.crop_top, plain.crop_left, 32, 32);
  EXPECT_EQ(fitted.pixels, window.pixels);

  const BucketPlacement flipped = planner.place(30, 40, {.random = true, .seed = 1, .sample_key = 9, .flip = true});
  EXPECT_TRUE(flipped.flipped);
  EXPECT_EQ(flipped.crop_left, plain.resized_width - 32 - plain.crop_left);  // the window in the mirrored image
  EXPECT_EQ(fit_to_bucket(image, flipped, {.filter = ResizeFilter::Area}).pixels, flip_horizontal(fitted).pixels);
  EXPECT_THROW(fit_to_bucket(flip_horizontal(crop_image(image, 0, 0, 30, 30)), plain), WickError);
}

TEST(Buckets, OptionsAreChecked) {
  const auto config_error = [](const BucketOptions& options) {
    try {
      BucketPlanner planner(options);
    } catch (const WickError& error) {
      EXPECT_EQ(error.kind(), ErrorKind::Config);
      return std::string(error.what());
    }
    return std::string("(no error)");
  };
  EXPECT_THAT(config_error({.step = 40, .divisor = 16}), HasSubstr("not a multiple of the model's divisor 16"));
  EXPECT_THAT(config_error({.resolution = 512, .min_side = 100}), HasSubstr("multiples of step 64"));
  EXPECT_THAT(config_error({.resolution = 512, .min_side = 1024, .max_side = 512}), HasSubstr("exceeds max_side"));
  EXPECT_THAT(config_error({.resolution = 0}), HasSubstr("must be positive"));
  EXPECT_THAT(config_error({.max_aspect = 0.5}), HasSubstr("max_aspect"));
  EXPECT_EQ(BucketPlanner({.step = 48, .divisor = 16}).options().step, 48);
  try {
    BucketPlanner({.resolution = 512, .no_upscale = true}).place(40, 600);
    FAIL() << "no error";
  } catch (const WickError& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Data);
    EXPECT_THAT(error.what(), HasSubstr("too small or too narrow"));
  }
}

}  // namespace
}  // namespace wick
