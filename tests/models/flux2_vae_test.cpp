// The FLUX.2 VAE (models/vae/flux2_vae.h over the AutoencoderKL of models/vae/vae.h) against diffusers 0.42.1's
// AutoencoderKLFlux2 and Flux2Pipeline on the tiny random model of tests/data/flux2_vae
// (tests/reference/make_flux2_vae_fixtures.py): block_out_channels (8, 8, 16, 16), 1 ResBlock per encoder level, z 4,
// both quant convs, 4 GroupNorm groups, random BatchNorm statistics over the 16 patchified channels; bfloat16 weights
// in diffusers' layout (vae/ with config.json) and in BFL's (flux2-vae.safetensors, which BFL's own AutoEncoder loads
// strict and matches within 1.1e-6). Image [2, 3, 32, 48] -> mean [2, 4, 4, 6] -> latents [2, 16, 2, 3].
// Metric: max |wick - reference| / max |reference| over the tensor, computed in f64; wick runs in f32.
#include "models/vae/flux2_vae.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/data/latent_dataset.h"
#include "models/diffusion/objective.h"
#include "models/vae/vae_weights.h"
#include "models/vae/wan_vae_config.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/layout.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/models/weights_test_util.h"
#include "tests/test_data.h"

namespace wick::vae {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

// f32 against diffusers' f32 (relative to the tensor's largest value). Measured: see the printed errors and
// docs/vae.md "FLUX.2 VAE".
constexpr double kTolerance = 1e-5;
constexpr int64_t kGroups = 4;  // the committed model's GroupNorm groups: config.json says so, BFL's file does not

std::string data(const std::string& name = "") {
  return wick::testing::test_data_dir() + "/flux2_vae" + (name.empty() ? "" : "/" + name);
}

const SafetensorsFile& cases() {
  static const SafetensorsFile file = SafetensorsFile::open(data("cases.safetensors"));
  return file;
}
Tensor expected(const std::string& name) { return cases().get(name).to(DType::F32); }
std::vector<double> expected_values(const std::string& name) {
  return cases().get(name).to(DType::F64).to_vector<double>();
}

double relative_error(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.shape() != want.shape()) return 1e9;
  const std::vector<double> g = got.contiguous().to(DType::F64).to_vector<double>(),
                            w = want.contiguous().to(DType::F64).to_vector<double>();
  double worst = 0, largest = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    worst = std::max(worst, std::fabs(g[i] - w[i]));
    largest = std::max(largest, std::fabs(w[i]));
  }
  return worst / largest;
}

struct Layout {
  const char* name;
  std::string path;
  int64_t norm_groups;  // 0: config.json's
  const char* format;
  const char* normalization_source;
};
std::vector<Layout> layouts() {
  return {{"diffusers pipeline folder", data(), 0, "diffusers", "config.json"},
          {"diffusers vae/ folder", data("vae"), 0, "diffusers", "config.json"},
          {"BFL / ComfyUI flux2-vae.safetensors", data("flux2-vae.safetensors"), kGroups, "ldm",
           "none (the latent BatchNorm normalizes)"}};
}

TEST(Flux2Vae, BothLayoutsLoadWithTheSameConfig) {
  for (const Layout& layout : layouts()) {
    SCOPED_TRACE(layout.name);
    const LoadedVae vae = load_vae(layout.path, {.norm_groups = layout.norm_groups});
    EXPECT_EQ(vae.format.format.name, layout.format);
    EXPECT_EQ(vae.normalization_source, layout.normalization_source);
    const VaeConfig& c = vae.model->config();
    EXPECT_EQ(c.block_channels, (std::vector<int64_t>{8, 8, 16, 16}));
    EXPECT_EQ(c.encoder_blocks, 1);
    EXPECT_EQ(c.decoder_blocks, 2);
    EXPECT_EQ(c.z_channels, 4);
    EXPECT_TRUE(c.quant_conv && c.post_quant_conv && c.mid_attention);
    EXPECT_EQ(c.norm_groups, kGroups);
    EXPECT_EQ(c.latent_patch, 2);
    EXPECT_EQ(c.batch_norm_eps, 1e-4);
    EXPECT_EQ(c.downscale(), 8);
    EXPECT_EQ(c.normalization.scaling_factor, 1.0);
    EXPECT_EQ(c.normalization.shift_factor, 0.0);
    // 182 tensors loaded (the two statistics among them), bn.num_batches_tracked ignored; 67,231 weights + 32.
    EXPECT_EQ(vae.report.n_loaded, 182);
    EXPECT_EQ(vae.report.n_ignored, 1);
    EXPECT_EQ(parameter_shapes(c).size(), 182u);
    EXPECT_EQ(vae.model->n_parameters(), 67263);
    Tensor& running_mean = vae.model->parameter("bn.running_mean");
    EXPECT_EQ(running_mean.dtype(), DType::F32);
    EXPECT_EQ(running_mean.to_vector<float>(), cases().get("bn_mean").to_vector<float>());
  }
}

TEST(Flux2Vae, SizesAndStatisticsComeFromTheHeadersAndTwoTensors) {
  // A copy of BFL's file with every tensor but the BatchNorm statistics overwritten with NaN: it opens with the same
  // sizes and normalization, so opening reads nothing else (its encode, which loads the weights, is NaN).
  const fs::path nan_file = wick::testing::scratch_dir("flux2_vae_headers") / "flux2-vae.safetensors";
  fs::copy_file(data("flux2-vae.safetensors"), nan_file);
  {
    const SafetensorsFile original = SafetensorsFile::open(data("flux2-vae.safetensors"));
    std::fstream out(nan_file, std::ios::in | std::ios::out | std::ios::binary);
    for (const std::string& name : original.names()) {
      if (name.rfind("bn.", 0) == 0) continue;
      const SafetensorsInfo& info = original.info(name);
      const std::string nan_bytes(info.end - info.begin, '\xff');  // bf16 0xffff: NaN
      out.seekp(static_cast<std::streamoff>(info.file_offset));
      out.write(nan_bytes.data(), static_cast<std::streamsize>(nan_bytes.size()));
    }
  }
  const std::vector<double> bn_mean = expected_values("bn_mean");
  const Tensor bn_std = expected("bn_std");
  for (const auto& [path, groups] : std::vector<std::pair<std::string, int64_t>>{
           {data(), 0}, {data("vae"), 0}, {data("flux2-vae.safetensors"), kGroups}, {nan_file.string(), kGroups}}) {
    SCOPED_TRACE(path);
    const VaeHeader header = read_vae_header(path, groups);
    EXPECT_EQ(header.config.z_channels, 4);
    EXPECT_EQ(header.config.latent_patch, 2);
    const LatentBatchNorm bn = read_latent_batch_norm(path);
    EXPECT_EQ(bn.patch, 2);
    EXPECT_EQ(bn.eps, 1e-4);
    EXPECT_EQ(bn.running_mean, bn_mean);
    const std::unique_ptr<ImageVae> vae = open_flux2_image_vae(path, {.norm_groups = groups});
    const ImageVaeInfo& info = vae->info();
    EXPECT_EQ(info.z_channels, 16);  // 2 x 2 x 4
    EXPECT_EQ(info.downscale, 16);   // x8, then the 2 x 2 patch
    EXPECT_EQ(info.scaling_factor, 1.0);
    EXPECT_EQ(info.shift_factor, 0.0);
    EXPECT_EQ(info.channel_mean, bn_mean);
    // sqrt(running_var + 1e-4) in f64 here, in f32 in the pipeline.
    EXPECT_LE(relative_error(Tensor::from_vector(info.channel_std, {16}), bn_std), 1e-7);
    EXPECT_TRUE(info.tiling);
    EXPECT_EQ(info.source, header.source_path);
    if (path != nan_file.string()) continue;
    const std::vector<float> mean = vae->encode(expected("image"), {}).mean.to(DType::F32).to_vector<float>();
    EXPECT_TRUE(std::all_of(mean.begin(), mean.end(), [](float v) { return std::isnan(v); }));
  }
}

TEST(Flux2Vae, EncodeGivesThePipelinesLatents) {
  const Tensor image = expected("image");
  for (const Layout& layout : layouts()) {
    SCOPED_TRACE(layout.name);
    const std::unique_ptr<ImageVae> vae = open_flux2_image_vae(layout.path, {.norm_groups = layout.norm_groups});
    const VaeMoments m = vae->encode(image, {});
    EXPECT_EQ(m.mean.shape(), (Shape{2, 16, 2, 3}));
    EXPECT_EQ(m.mean.dtype(), DType::F32);
    // What training makes of the stored mean: the dataset's vae_latents_mean / vae_latents_std are info()'s lists.
    LatentDatasetAttributes attributes;
    attributes.latent_channels = 16;
    attributes.vae_latents_mean = vae->info().channel_mean;
    attributes.vae_latents_std = vae->info().channel_std;
    const Tensor x0 = Objective::scale_latents(m.mean, attributes);
    const LoadedVae loaded = load_vae(layout.path, {.norm_groups = layout.norm_groups});
    const double errors[] = {relative_error(loaded.model->encode(image).mean, expected("mean")),
                             relative_error(m.mean, expected("patchified_mean")),
                             relative_error(m.logvar, expected("patchified_logvar")),
                             relative_error(x0, expected("latents"))};
    std::printf("  %s: relative error mean %.2e, patchified mean %.2e, patchified logvar %.2e, latents %.2e\n",
                layout.name, errors[0], errors[1], errors[2], errors[3]);
    for (double e : errors) EXPECT_LE(e, kTolerance);
  }
}

TEST(Flux2Vae, DecodeToImagesGivesThePipelinesImages) {
  const Tensor latents = expected("decode_latents");
  // The image processor's (x + 1) / 2 clamped to [0, 1].
  const Tensor want = minimum(maximum(mul(add(expected("decoded"), 1.0), 0.5), 0.0), 1.0);
  for (const Layout& layout : layouts()) {
    SCOPED_TRACE(layout.name);
    const std::unique_ptr<ImageVae> vae = open_flux2_image_vae(layout.path, {.norm_groups = layout.norm_groups});
    const Tensor images = vae->decode_to_images(latents, {});
    // A dataset with scalar factors besides (x0 = ((z - shift) · scale - mean_c) / std_c, Objective::scale_latents):
    // the same z, so the same images.
    const WanLatentNormalization per_channel{.mean = vae->info().channel_mean, .std = vae->info().channel_std};
    const Tensor z = denormalize_wan_latents(latents, per_channel);
    const Tensor scaled = normalize_wan_latents(mul(sub(z, 0.5), 2.0), per_channel);
    const Tensor images_scaled = vae->decode_to_images(scaled, {.scaling_factor = 2.0, .shift_factor = 0.5});
    const double errors[] = {relative_error(images, want), relative_error(images_scaled, want)};
    std::printf("  %s: relative error decoded %.2e, with scale 2 / shift 0.5 %.2e\n", layout.name, errors[0],
                errors[1]);
    for (double e : errors) EXPECT_LE(e, kTolerance);
  }
}

TEST(Flux2Vae, TilingGoesThroughTheAutoencoderKL) {
  const std::string path = data("flux2-vae.safetensors");
  const Tensor image = expected("image");
  const VaeTiling tiling{.tile_size = 32, .overlap = 8};  // the 48-pixel width takes two tiles
  const std::unique_ptr<ImageVae> vae = open_flux2_image_vae(path, {.norm_groups = kGroups});
  const LoadedVae loaded = load_vae(path, {.norm_groups = kGroups});
  const VaeMoments got = vae->encode(image, tiling);
  const VaeMoments want = loaded.model->encode(image, tiling);
  EXPECT_TRUE(wick::testing::same_bits(got.mean, pixel_unshuffle(want.mean, 2)));
  EXPECT_TRUE(wick::testing::same_bits(got.logvar, pixel_unshuffle(want.logvar, 2)));
  // The tiles' own GroupNorm statistics change the result: the tiled path ran.
  EXPECT_GT(relative_error(got.mean, expected("patchified_mean")), 1e-3);
  EXPECT_THAT(wick::testing::error_of([&] { vae->encode(image.narrow(3, 0, 40), {}); }), HasSubstr("multiples of 16"));
}

TEST(Flux2Vae, RealSizes) {
  // diffusers' AutoencoderKLFlux2() defaults: 84,046,115 parameters in 248 tensors, and the BatchNorm's 2 x 128
  // statistics (its num_batches_tracked is not kept).
  const VaeConfig c = flux2_vae_config();
  AutoencoderKL model(c);
  EXPECT_EQ(model.n_parameters(), 84046115 + 256);
  EXPECT_EQ(model.named_parameters().size(), 250u);
  EXPECT_EQ(parameter_shapes(c).size(), 250u);
  EXPECT_EQ(model.parameter("quant_conv.weight").shape(), (Shape{64, 64, 1, 1}));
  EXPECT_EQ(model.parameter("post_quant_conv.weight").shape(), (Shape{32, 32, 1, 1}));
  EXPECT_EQ(model.parameter("bn.running_var").shape(), (Shape{128}));
  EXPECT_EQ(c.downscale() * c.latent_patch, 16);
}

std::pair<ErrorKind, std::string> error_kind(const std::function<void()>& call) {
  try {
    call();
  } catch (const WickError& error) {
    return {error.kind(), error.what()};
  }
  return {ErrorKind::Usage, "(no error thrown)"};
}

TEST(Flux2Vae, BadFilesAreRefusedNamingTheTensor) {
  const fs::path dir = wick::testing::scratch_dir("flux2_vae_bad");
  const SafetensorsFile bfl = SafetensorsFile::open(data("flux2-vae.safetensors"));
  {  // no bn.running_var
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const std::string& name : bfl.names())
      if (name != "bn.running_var") tensors.emplace_back(name, bfl.get(name));
    const std::string path = (dir / "no_running_var.safetensors").string();
    save_safetensors(path, tensors);
    for (const auto& call : std::vector<std::function<void()>>{
             [&] { open_flux2_image_vae(path, {.norm_groups = kGroups}); }, [&] { read_vae_header(path, kGroups); },
             [&] { load_vae(path, {.norm_groups = kGroups}); }}) {
      const auto [kind, message] = error_kind(call);
      EXPECT_EQ(kind, ErrorKind::Data);
      EXPECT_THAT(message, HasSubstr("'bn.running_var' is missing"));
    }
    std::printf("  %s\n", error_kind([&] { open_flux2_image_vae(path, {.norm_groups = kGroups}); }).second.c_str());
  }
  {  // truncated: the last tensor's bytes cut short
    const fs::path path = dir / "truncated.safetensors";
    fs::copy_file(data("flux2-vae.safetensors"), path);
    fs::resize_file(path, fs::file_size(path) - 2);
    const auto [kind, message] = error_kind([&] { open_flux2_image_vae(path.string(), {.norm_groups = kGroups}); });
    EXPECT_EQ(kind, ErrorKind::Data);
    EXPECT_THAT(message, HasSubstr("\"" + bfl.names().back() + "\""));
    EXPECT_THAT(message, HasSubstr("run past the end"));
    std::printf("  %s\n", message.c_str());
  }
  {  // FLUX.1's VAE: no BatchNorm
    const auto [kind, message] = error_kind([] {
      open_flux2_image_vae(wick::testing::test_data_dir() + "/vae/flux_tiny_ae.safetensors", {.norm_groups = 8});
    });
    EXPECT_EQ(kind, ErrorKind::Data);
    EXPECT_THAT(message, HasSubstr("has no latent BatchNorm"));
  }
  {  // a config.json whose patch disagrees with the statistics' length
    const fs::path folder = dir / "vae";
    fs::create_directories(folder);
    fs::copy_file(data("vae/diffusion_pytorch_model.safetensors"), folder / "diffusion_pytorch_model.safetensors");
    std::ifstream in(data("vae/config.json"));
    nlohmann::json config = nlohmann::json::parse(in);
    config["patch_size"] = {1, 1};
    std::ofstream(folder / "config.json") << config.dump(2);
    const auto [kind, message] = error_kind([&] { open_flux2_image_vae(folder.string(), {}); });
    EXPECT_EQ(kind, ErrorKind::Data);
    EXPECT_THAT(message, HasSubstr("says patch_size = [1, 1] but the weights have [2, 2]"));
  }
}

}  // namespace
}  // namespace wick::vae
