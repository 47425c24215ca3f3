// The Wan 2.1 / Qwen-Image VAE (models/vae/wan_vae*) against diffusers 0.42.1 on the tiny random
// AutoencoderKLQwenImage of tests/data/qwenimage_vae (tests/reference/make_qwenimage_vae_fixtures.py):
// base_dim 3, dim_mult (1, 2, 4, 4), 2 residual blocks, temporal downsampling (F, T, T), z 16, RMS norm
// gammas away from 1, float16 weights in diffusers' layout (vae/ with config.json) and in the original
// Wan layout (qwen_image_vae.safetensors, which diffusers' own convert_wan_vae_to_diffusers maps back
// to the diffusers state dict exactly). Image [2, 3, 40, 56] in [-1, 1] -> latents [2, 16, 5, 7].
// Metric: max |wick - diffusers| over the tensor. Exactness is checked in float64 (wick's f64 model
// against diffusers' f64 outputs); in float32 both sides carry their own rounding: diffusers' f32
// outputs differ from its f64 ones by up to 3.4e-6 (mean, logvar) and 3.1e-5 (decoded) with these
// random weights, so the f32 comparison is bounded by that, not by 1e-5.
#include "models/vae/wan_vae.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "models/vae/wan_vae_weights.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/models/weights_test_util.h"
#include "tests/test_data.h"

namespace wick::vae {
namespace {

using ::testing::HasSubstr;

// f64 parity with diffusers' f64 outputs, absolute (outputs are of order 1); measured: below 1e-13.
constexpr double kTolerance = 1e-5;
// f32 parity with diffusers' f32 outputs; measured: 4.7e-6 (mean, logvar), 2.1e-5 (decoded), each below
// diffusers' own f32-vs-f64 error on the same tensor.
constexpr double kF32Tolerance = 1e-4;

std::string data(const std::string& name) { return wick::testing::test_data_dir() + "/" + name; }

const SafetensorsFile& cases() {
  static const SafetensorsFile file = SafetensorsFile::open(data("qwenimage_vae/cases.safetensors"));
  return file;
}
Tensor expected(const std::string& name, DType dtype = DType::F32) { return cases().get(name).to(dtype); }

double max_abs_error(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.shape() != want.shape()) return 1e9;
  std::vector<double> g = got.to(DType::F64).to_vector<double>(), w = want.to(DType::F64).to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::fabs(g[i] - w[i]));
  return worst;
}

struct Layout {
  const char* name;
  const char* path;  // under tests/data
  const char* format;
};
const Layout kLayouts[] = {{"diffusers vae/ folder", "qwenimage_vae", "diffusers"},
                           {"original Wan file", "qwenimage_vae/qwen_image_vae.safetensors", "wan"}};

TEST(QwenImageVae, BothLayoutsMatchDiffusers) {
  for (const Layout& layout : kLayouts) {
    for (DType dtype : {DType::F64, DType::F32}) {
      SCOPED_TRACE(std::string(layout.name) + " " + dtype_name(dtype));
      LoadedWanVae vae = load_wan_vae(data(layout.path), {.normalization = std::nullopt, .dtype = dtype});
      EXPECT_EQ(vae.format.format.name, layout.format);
      const WanVaeConfig& c = vae.model->config();
      EXPECT_EQ(c.base_dim, 3);
      EXPECT_EQ(c.dim_mult, (std::vector<int64_t>{1, 2, 4, 4}));
      EXPECT_EQ(c.num_res_blocks, 2);
      EXPECT_EQ(c.temporal_downsample, (std::vector<bool>{false, true, true}));
      EXPECT_EQ(c.z_dim, 16);
      EXPECT_EQ(c.downscale(), 8);
      EXPECT_EQ(vae.report.n_loaded, 194);
      EXPECT_EQ(vae.normalization_source,
                std::string(layout.format) == "diffusers" ? "config.json" : "Wan 2.1's (Qwen-Image's) defaults");

      const std::string ref = dtype == DType::F64 ? "f64." : "";
      VaeMoments m = vae.model->encode(expected("image", dtype));
      EXPECT_EQ(m.mean.dtype(), dtype);
      Tensor normalized = vae.model->normalize(m.mean);
      Tensor decoded = vae.model->decode(vae.model->denormalize(expected("latents", dtype)));
      const double errors[] = {max_abs_error(m.mean, expected(ref + "mean", DType::F64)),
                               max_abs_error(m.logvar, expected(ref + "logvar", DType::F64)),
                               max_abs_error(normalized, expected(ref + "normalized", DType::F64)),
                               max_abs_error(decoded, expected(ref + "decoded", DType::F64))};
      std::printf("  %s, %s: max abs error mean %.2e, logvar %.2e, normalized %.2e, decoded %.2e\n", layout.name,
                  dtype_name(dtype), errors[0], errors[1], errors[2], errors[3]);
      for (double e : errors) EXPECT_LE(e, dtype == DType::F64 ? kTolerance : kF32Tolerance);
    }
  }
}

TEST(QwenImageVae, FiveDimensionalSingleFramesAndNormalization) {
  LoadedWanVae vae = load_wan_vae(data("qwenimage_vae/qwen_image_vae.safetensors"));
  Tensor image = expected("image");
  VaeMoments m = vae.model->encode(image.reshape({2, 3, 1, 40, 56}));
  EXPECT_EQ(m.mean.shape(), (Shape{2, 16, 1, 5, 7}));
  EXPECT_LE(max_abs_error(m.mean.reshape({2, 16, 5, 7}), expected("mean")), kTolerance);
  Tensor decoded = vae.model->decode(m.mean);
  EXPECT_EQ(decoded.shape(), (Shape{2, 3, 1, 40, 56}));
  // The normalization's inverse, and the constants against config.json's.
  Tensor x0 = expected("latents");
  EXPECT_LE(max_abs_error(vae.model->normalize(vae.model->denormalize(x0)), x0), 1e-5);
  EXPECT_LE(max_abs_error(Tensor::from_vector(wan21_latent_normalization().mean, {16}), expected("latents_mean")),
            1e-7);
  EXPECT_LE(max_abs_error(Tensor::from_vector(wan21_latent_normalization().std, {16}), expected("latents_std")), 1e-6);
  // Videos are not implemented: a clear error, not a wrong answer.
  EXPECT_THAT(wick::testing::error_of([&] {
                vae.model->encode(Tensor::empty({1, 3, 5, 40, 56}, DType::F32));
              }),
              HasSubstr("only single images (T = 1)"));
}

TEST(QwenImageVae, Bf16ErrorsAreThoseOfDiffusersBf16) {
  // bf16 parameters and activations (the RMS norm's L2 normalization in f32, as diffusers). This tiny random
  // model amplifies bf16 rounding a lot: diffusers' own bf16 model is this far from its f32 outputs (max abs;
  // measured with diffusers 0.42.1 on the same image and latents), and wick's bf16 errors must be of that size.
  // A sanity check of the bf16 path (a wrong cast or a 16-bit norm shows), not a parity test.
  const double diffusers_bf16[] = {0.0988, 0.1186, 0.0676, 0.9092};  // mean, logvar, normalized, decoded
  LoadedWanVae vae = load_wan_vae(data("qwenimage_vae"), {.normalization = std::nullopt, .dtype = DType::BF16});
  VaeMoments m = vae.model->encode(expected("image"));
  EXPECT_EQ(m.mean.dtype(), DType::BF16);
  Tensor decoded = vae.model->decode(vae.model->denormalize(expected("latents").to(DType::BF16)));
  const double errors[] = {max_abs_error(m.mean, expected("mean")), max_abs_error(m.logvar, expected("logvar")),
                           max_abs_error(vae.model->normalize(m.mean), expected("normalized")),
                           max_abs_error(decoded, expected("decoded"))};
  std::printf("  bf16 vs f32 references: max abs error mean %.2e, logvar %.2e, normalized %.2e, decoded %.2e\n",
              errors[0], errors[1], errors[2], errors[3]);
  for (int i = 0; i < 4; ++i) EXPECT_LE(errors[i], 1.5 * diffusers_bf16[i]) << i;
}

TEST(QwenImageVae, RealSizes) {
  // Qwen-Image's VAE (diffusers' AutoencoderKLQwenImage() defaults): 126,892,531 parameters in 194 tensors.
  WanVaeConfig c = qwenimage_vae_config();
  WanVae model(c);
  EXPECT_EQ(model.n_parameters(), 126892531);
  EXPECT_EQ(model.named_parameters().size(), 194u);
  EXPECT_EQ(model.parameter("decoder.upsamples.4.shortcut.weight").shape(), (Shape{384, 192, 1, 1, 1}));
  EXPECT_EQ(model.parameter("decoder.upsamples.3.time_conv.weight").shape(), (Shape{768, 384, 3, 1, 1}));
  EXPECT_EQ(model.parameter("decoder.upsamples.3.resample.1.weight").shape(), (Shape{192, 384, 3, 3}));
  EXPECT_EQ(model.parameter("encoder.head.2.weight").shape(), (Shape{32, 384, 3, 3, 3}));
  EXPECT_EQ(model.parameter("encoder.middle.1.norm.gamma").shape(), (Shape{384, 1, 1}));
  EXPECT_EQ(c.downscale(), 8);
}

TEST(QwenImageVae, OtherFilesAreRefusedAsConfigErrors) {
  auto error_kind = [](const std::string& path) {
    try {
      load_wan_vae(path);
    } catch (const WickError& error) {
      return std::make_pair(error.kind(), std::string(error.what()));
    }
    return std::make_pair(ErrorKind::Usage, std::string("(no error thrown)"));
  };
  {  // Flux's AutoencoderKL (BFL / LDM names)
    auto [kind, message] = error_kind(data("vae/flux_tiny_ae.safetensors"));
    EXPECT_EQ(kind, ErrorKind::Config);
    EXPECT_THAT(message, HasSubstr("is not a Wan 2.1 / Qwen-Image VAE"));
    EXPECT_THAT(message, HasSubstr("AutoencoderKL's"));
    EXPECT_THAT(message, HasSubstr("encoder.downsamples.0.residual.0.gamma"));
    std::printf("  %s\n", message.c_str());
  }
  {  // the Wan file beside an AutoencoderKL's config.json
    const std::filesystem::path dir = wick::testing::scratch_dir("qwenimage_vae_other_config");
    std::filesystem::copy_file(data("qwenimage_vae/qwen_image_vae.safetensors"), dir / "vae.safetensors");
    std::filesystem::copy_file(data("vae/sdxl_tiny/vae/config.json"), dir / "config.json");
    auto [kind, message] = error_kind(dir.string());
    EXPECT_EQ(kind, ErrorKind::Config);
    EXPECT_THAT(message, HasSubstr("is for AutoencoderKL, not a Wan 2.1 / Qwen-Image VAE"));
  }
  {  // a config.json whose sizes differ from the weights': a Data error naming the field
    const std::filesystem::path dir = wick::testing::scratch_dir("qwenimage_vae_wrong_config");
    std::filesystem::copy_file(data("qwenimage_vae/vae/diffusion_pytorch_model.safetensors"),
                               dir / "diffusion_pytorch_model.safetensors");
    std::ifstream in(data("qwenimage_vae/vae/config.json"));
    std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    json.replace(json.find("\"base_dim\": 3"), 13, "\"base_dim\": 96");
    std::ofstream(dir / "config.json") << json;
    auto [kind, message] = error_kind(dir.string());
    EXPECT_EQ(kind, ErrorKind::Data);
    EXPECT_THAT(message, HasSubstr("says base_dim = 96 but the weights have 3"));
  }
  {  // an AutoencoderKL pipeline folder (diffusers names, config.json)
    auto [kind, message] = error_kind(data("vae/sdxl_tiny"));
    EXPECT_EQ(kind, ErrorKind::Config);
    EXPECT_THAT(message, HasSubstr("is not a Wan 2.1 / Qwen-Image VAE"));
  }
}

}  // namespace
}  // namespace wick::vae
