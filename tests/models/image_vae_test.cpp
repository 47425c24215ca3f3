// The image-VAE interface of `wick dataset encode` (models/vae/image_vae.h) on committed test images
// (tests/data/images, 64x48): open_kl_image_vae gives bit-identical moments to load_vae + AutoencoderKL::encode (the
// path `wick dataset encode` took before the interface) on the tiny diffusers VAEs of tests/data/vae, tiled and not;
// open_wan_image_vae gives bit-identical moments to load_wan_vae + WanVae::encode on the tiny AutoencoderKLQwenImage
// of tests/data/qwenimage_vae in both layouts, and its info() has the fixture's sizes and per-channel normalization.
#include "models/vae/image_vae.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/data/image_decode.h"
#include "models/vae/wan_vae_weights.h"
#include "runtime/ops/join.h"
#include "tests/error_of.h"
#include "tests/test_data.h"

namespace wick::vae {
namespace {

using ::testing::HasSubstr;
using wick::testing::error_of;

std::string data(const std::string& name) { return wick::testing::test_data_dir() + "/" + name; }

// The first n of four committed images, decoded as `wick dataset encode` decodes them: [n, 3, 48, 64] in [-1, 1].
Tensor test_images(size_t n) {
  const std::vector<std::string> names = {"rgb.png", "lossy.webp", "rgba.png", "gray.png"};
  std::vector<Tensor> rows;
  for (size_t i = 0; i < n; ++i) rows.push_back(image_to_tensor(load_image(data("images/" + names[i]))).unsqueeze(0));
  return concat(rows, 0).contiguous();
}

void expect_same(const Tensor& got, const Tensor& want, const char* what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  EXPECT_EQ(got.contiguous().to(DType::F32).to_vector<float>(), want.contiguous().to(DType::F32).to_vector<float>())
      << what;
}

TEST(ImageVae, KlMatchesLoadVaeBitForBit) {
  const Tensor images = test_images(2);
  struct Case {
    const char* path;
    VaeTiling tiling;
  };
  const ModelNormalization flux{{0.3611, 0.1159}, "flux"};
  for (const Case& c : {Case{"vae/flux_tiny", {}}, Case{"vae/flux_tiny", {.tile_size = 32, .overlap = 8}},
                        Case{"vae/sdxl_tiny", {}}, Case{"vae/sdxl_tiny", {.tile_size = 32, .overlap = -1}}}) {
    SCOPED_TRACE(std::string(c.path) + " tile " + std::to_string(c.tiling.tile_size));
    std::unique_ptr<ImageVae> image_vae = open_kl_image_vae(data(c.path), {.normalization = flux});
    LoadedVae loaded = load_vae(data(c.path), {.normalization = flux});
    const VaeConfig& config = loaded.model->config();
    const ImageVaeInfo& info = image_vae->info();
    EXPECT_EQ(info.z_channels, config.z_channels);
    EXPECT_EQ(info.downscale, config.downscale());
    EXPECT_EQ(info.scaling_factor, config.normalization.scaling_factor);
    EXPECT_EQ(info.shift_factor, config.normalization.shift_factor);
    EXPECT_TRUE(info.channel_mean.empty() && info.channel_std.empty());
    EXPECT_EQ(info.source, loaded.source_path);
    EXPECT_TRUE(info.tiling);
    const VaeMoments got = image_vae->encode(images, c.tiling);
    const VaeMoments want = loaded.model->encode(images, c.tiling);
    expect_same(got.mean, want.mean, "mean");
    expect_same(got.logvar, want.logvar, "logvar");
    if (c.tiling.tile_size > 0) continue;
    image_vae->unload();
    expect_same(image_vae->encode(images, c.tiling).mean, want.mean, "mean after unload");
  }
}

TEST(ImageVae, KlNormalizationComesFromConfigJsonElseTheModel) {
  // sdxl_tiny's config.json gives the scaling factor: the model's preset is not used.
  const ModelNormalization flux{{0.3611, 0.1159}, "flux"};
  const std::unique_ptr<ImageVae> sdxl = open_kl_image_vae(data("vae/sdxl_tiny"), {.normalization = flux});
  const LoadedVae loaded = load_vae(data("vae/sdxl_tiny"));
  EXPECT_EQ(sdxl->info().scaling_factor, loaded.model->config().normalization.scaling_factor);
  // A Wan VAE is not an AutoencoderKL: the Data error `wick dataset encode` gave before.
  const std::string message = error_of([] { open_kl_image_vae(data("qwenimage_vae/vae"), {}); });
  EXPECT_THAT(message, HasSubstr("qwenimage_vae"));
}

TEST(ImageVae, WanMatchesLoadWanVaeBitForBitAndReadsTheConfig) {
  const Tensor images = test_images(4);
  std::ifstream in(data("qwenimage_vae/vae/config.json"));
  const nlohmann::json config = nlohmann::json::parse(in);
  const auto mean = config.at("latents_mean").get<std::vector<double>>();
  const auto stdev = config.at("latents_std").get<std::vector<double>>();
  for (const char* path : {"qwenimage_vae/vae", "qwenimage_vae", "qwenimage_vae/qwen_image_vae.safetensors"}) {
    SCOPED_TRACE(path);
    std::unique_ptr<ImageVae> image_vae = open_wan_image_vae(data(path), {});
    const ImageVaeInfo& info = image_vae->info();
    EXPECT_EQ(info.z_channels, config.at("z_dim").get<int64_t>());
    EXPECT_EQ(info.downscale, 8);  // dim_mult (1, 2, 4, 4): three halvings
    EXPECT_EQ(info.scaling_factor, 1.0);
    EXPECT_EQ(info.shift_factor, 0.0);
    // The original layout has no config.json: Wan 2.1's values, which the fixture's config.json repeats.
    EXPECT_EQ(info.channel_mean, mean);
    EXPECT_EQ(info.channel_std, stdev);
    EXPECT_FALSE(info.tiling);
    LoadedWanVae loaded = load_wan_vae(data(path));
    EXPECT_EQ(info.source, loaded.source_path);
    const VaeMoments want = loaded.model->encode(images);
    const VaeMoments got = image_vae->encode(images, {});
    EXPECT_EQ(got.mean.shape(), Shape({4, 16, 6, 8}));
    expect_same(got.mean, want.mean, "mean");
    expect_same(got.logvar, want.logvar, "logvar");
    // No tiling: a tile smaller than the image still encodes it whole.
    expect_same(image_vae->encode(images, {.tile_size = 16, .overlap = 8}).mean, want.mean, "mean, tile 16");
  }
  // An AutoencoderKL is not a Wan VAE.
  const std::string message = error_of([] { open_wan_image_vae(data("vae/sdxl_tiny"), {}); });
  EXPECT_THAT(message, HasSubstr("is not a Wan 2.1 / Qwen-Image VAE"));
}

TEST(ImageVae, EncodeChecksTheImages) {
  std::unique_ptr<ImageVae> image_vae = open_wan_image_vae(data("qwenimage_vae/vae"), {});
  const Tensor images = test_images(1);
  EXPECT_THAT(error_of([&] { image_vae->encode(images.narrow(3, 0, 60), {}); }), HasSubstr("multiples of 8"));
  EXPECT_THAT(error_of([&] { image_vae->encode(images.narrow(1, 0, 1), {}); }), HasSubstr("[B, 3, H, W]"));
}

}  // namespace
}  // namespace wick::vae
