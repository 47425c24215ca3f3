// The VAE (models/vae) against diffusers 0.42.1 on the tiny random AutoencoderKL models of
// tests/data/vae (tests/reference/make_vae_fixtures.py; its README lists every tensor):
// sdxl_tiny (block_out_channels (8, 16, 16), 2 ResBlocks per encoder level and 3 per decoder level,
// z 4, quant convs, 4 groups) and flux_tiny ((8, 16), z 16, no quant convs, 8 groups), float16 files,
// in diffusers' layout (vae/ folders with config.json) and in LDM names (an SDXL-style single file
// under "first_stage_model." and a Flux-style ae.safetensors); the LDM files were read back by
// diffusers' own convert_ldm_vae_checkpoint (bit-identical outputs), and the converter was checked
// against BFL's AutoEncoder. Image [2, 3, 24, 40] in [-1, 1]; two logvar channels are pushed past the
// clamp. Metric per tensor: max_i |wick_i - ref_i| / max_i |ref_i|.
#include "models/vae/vae.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "engine/autograd/node.h"
#include "engine/autograd/ops_elementwise.h"
#include "models/registry.h"
#include "models/vae/vae_memory.h"
#include "models/vae/vae_weights.h"
#include "runtime/memory.h"
#include "runtime/ops/random.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/models/weights_test_util.h"
#include "tests/test_data.h"

namespace wick::vae {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using wick::testing::error_of;
using wick::testing::scratch_dir;

// f32 parity: every output from every weight format within this of diffusers (relative to the max).
constexpr double kF32Tolerance = 1e-5;
// bf16: wick's bf16 model (weights float16 -> bfloat16, convs and matmuls in bf16 with f32
// accumulation, GroupNorm, softmax and the blend in f32) against diffusers' bf16 model on the same
// image cast to bf16, and against the f32 references. diffusers' bf16 itself is 1.9e-3 .. 7.2e-2 from
// f32 on these models (the decoder's 8 to 11 ResBlocks of random weights amplify the rounding); wick's
// worst is 5.1e-2 against diffusers' bf16 and 5.8e-2 against f32.
constexpr double kBf16Tolerance = 1e-1;

std::string data(const std::string& name) { return wick::testing::test_data_dir() + "/vae/" + name; }

const SafetensorsFile& cases() {
  static const SafetensorsFile file = SafetensorsFile::open(data("cases.safetensors"));
  return file;
}
Tensor expected(const std::string& name) { return cases().get(name).to(DType::F32); }
Tensor image() { return expected("image"); }

double relative_to_max(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.shape() != want.shape()) return 1e9;
  std::vector<double> g = got.to(DType::F32).to_vector<double>(), w = want.to_vector<double>();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    worst = std::max(worst, std::fabs(g[i] - w[i]));
    scale = std::max(scale, std::fabs(w[i]));
  }
  return scale > 0 ? worst / scale : worst;
}

using Named = std::vector<std::pair<std::string, Tensor>>;

Named tensors_of(const std::string& path) {
  WeightSource source = WeightSource::open(path);
  Named out;
  for (const std::string& name : source.names()) out.emplace_back(name, source.get(name));
  return out;
}

std::string write(const std::string& folder, const std::string& file, const Named& tensors,
                  const std::string& config_json = "") {
  fs::path dir = scratch_dir(folder);
  save_safetensors((dir / file).string(), tensors, {{"format", "pt"}});
  if (!config_json.empty()) fs::copy_file(config_json, dir / "config.json");
  return (dir / file).string();
}

// Files this test writes from the committed ones by renaming, reshaping or casting only.
struct Written {
  std::string sdxl_ldm_standalone, sdxl_ldm_linear_attention, flux_sd3_single_file, sdxl_diffusers_f32,
      flux_diffusers_no_config, flux_snapshot;
};
const Written& written() {
  static const Written files = [] {
    Written w;
    const std::string prefix = "first_stage_model.";
    // SDXL's VAE alone in LDM names (as stabilityai's sdxl_vae.safetensors): no prefix, no UNet.
    Named standalone, linear;
    for (auto [name, t] : tensors_of(data("sdxl_tiny_ldm.safetensors"))) {
      if (name.rfind(prefix, 0) != 0) continue;
      name = name.substr(prefix.size());
      standalone.emplace_back(name, t);
      // Some conversions keep diffusers' Linear [C, C] attention weights under LDM names.
      const bool projection = name.find(".attn_1.") != std::string::npos && t.dim() == 4;
      linear.emplace_back(name, projection ? t.reshape({t.size(0), t.size(1)}) : t);
    }
    w.sdxl_ldm_standalone = write("vae_sdxl_ldm", "sdxl_vae.safetensors", standalone);
    w.sdxl_ldm_linear_attention = write("vae_sdxl_ldm_linear", "vae.safetensors", linear);
    // The 16-channel model inside an SD3-style single file: the prefix, beside the MMDiT.
    Named sd3;
    for (const auto& [name, t] : tensors_of(data("flux_tiny_ae.safetensors"))) sd3.emplace_back(prefix + name, t);
    sd3.emplace_back("model.diffusion_model.x_embedder.proj.weight", wick::testing::dyadic({4, 4, 2, 2}, 3));
    w.flux_sd3_single_file = write("vae_sd3_single", "sd3_tiny.safetensors", sd3);
    // f32 copies of the diffusers folder (zero-copy loads), and the diffusers file without config.json.
    Named f32;
    for (const auto& [name, t] : tensors_of(data("sdxl_tiny/vae"))) f32.emplace_back(name, t.to(DType::F32));
    w.sdxl_diffusers_f32 =
        write("vae_sdxl_f32", "diffusion_pytorch_model.safetensors", f32, data("sdxl_tiny/vae/config.json"));
    w.flux_diffusers_no_config =
        write("vae_flux_no_config", "diffusion_pytorch_model.safetensors", tensors_of(data("flux_tiny/vae")));
    // A Hugging Face snapshot of FLUX.1-dev: ae.safetensors and the transformer's single file beside vae/.
    fs::path snapshot = scratch_dir("vae_flux_snapshot");
    fs::create_directory_symlink(fs::absolute(data("flux_tiny/vae")), snapshot / "vae");
    fs::create_symlink(fs::absolute(data("flux_tiny_ae.safetensors")), snapshot / "ae.safetensors");
    save_safetensors((snapshot / "flux1-dev.safetensors").string(),
                     {{"double_blocks.0.img_attn.qkv.weight", wick::testing::dyadic({6, 2}, 1)}}, {});
    w.flux_snapshot = snapshot.string();
    return w;
  }();
  return files;
}

// One way to get a model: where from, what must be detected, what normalization results.
struct Source {
  std::string name;
  std::function<std::string()> path;
  std::string model;  // "sdxl_tiny" | "flux_tiny"
  std::string format, prefix;
  VaeLoadOptions options;
  LatentNormalization normalization;
  std::string normalization_source;
};

// The architectures' normalizations (DatasetSpec::normalization): what a VAE without config.json is given.
LatentNormalization normalization_of(const char* model) {
  return find_architecture(model).dataset_spec()->normalization;
}
const LatentNormalization kSdxl = normalization_of("sdxl"), kSd3 = normalization_of("sd3"),
                          kFlux = normalization_of("flux");
VaeLoadOptions for_model(const char* model, int64_t norm_groups) {
  return {.normalization = ModelNormalization{normalization_of(model), model}, .norm_groups = norm_groups};
}

std::vector<Source> sources() {
  std::vector<Source> out;
  auto add = [&](const char* name, std::function<std::string()> path, const char* model, const char* format,
                 const char* prefix, VaeLoadOptions options, LatentNormalization n, const char* n_source) {
    out.push_back(Source{name, std::move(path), model, format, prefix, options, n, n_source});
  };
  const VaeLoadOptions sdxl4 = for_model("sdxl", 4), flux8 = for_model("flux", 8), sd3_8 = for_model("sd3", 8);
  add(
      "sdxl_pipeline_folder", [] { return data("sdxl_tiny"); }, "sdxl_tiny", "diffusers", "", {}, kSdxl, "config.json");
  add(
      "sdxl_vae_folder", [] { return data("sdxl_tiny/vae"); }, "sdxl_tiny", "diffusers", "", {}, kSdxl, "config.json");
  add(
      "sdxl_diffusers_f32", [] { return written().sdxl_diffusers_f32; }, "sdxl_tiny", "diffusers", "", {}, kSdxl,
      "config.json");
  add(
      "sdxl_single_file_ldm", [] { return data("sdxl_tiny_ldm.safetensors"); }, "sdxl_tiny", "ldm",
      "first_stage_model.", sdxl4, kSdxl, "the sdxl model's");
  add(
      "sdxl_standalone_ldm", [] { return written().sdxl_ldm_standalone; }, "sdxl_tiny", "ldm", "", sdxl4, kSdxl,
      "the sdxl model's");
  add(
      "sdxl_ldm_linear_attention", [] { return written().sdxl_ldm_linear_attention; }, "sdxl_tiny", "ldm", "", sdxl4,
      kSdxl, "the sdxl model's");
  add(
      "flux_pipeline_folder", [] { return data("flux_tiny"); }, "flux_tiny", "diffusers", "", {}, kFlux, "config.json");
  add(
      "flux_hf_snapshot", [] { return written().flux_snapshot; }, "flux_tiny", "diffusers", "", {}, kFlux,
      "config.json");
  add(
      "flux_ae_bfl", [] { return data("flux_tiny_ae.safetensors"); }, "flux_tiny", "ldm", "", flux8, kFlux,
      "the flux model's");
  add(
      "flux_in_sd3_single_file", [] { return written().flux_sd3_single_file; }, "flux_tiny", "ldm",
      "first_stage_model.", sd3_8, kSd3, "the sd3 model's");
  add(
      "flux_diffusers_no_config", [] { return written().flux_diffusers_no_config; }, "flux_tiny", "diffusers", "",
      flux8, kFlux, "the flux model's");
  return out;
}

struct Errors {
  double mean = 0, logvar = 0, decoded = 0;
  double worst() const { return std::max({mean, logvar, decoded}); }
};

Errors errors_of(AutoencoderKL& model, const std::string& key, const std::string& reference = "") {
  VaeMoments m = model.encode(image());
  Tensor decoded = model.decode(m.mean);
  const std::string k = key + reference;
  return Errors{relative_to_max(m.mean, expected(k + ".mean")), relative_to_max(m.logvar, expected(k + ".logvar")),
                relative_to_max(decoded, expected(k + ".decoded"))};
}

TEST(VaeWeights, EveryFormatLoadsAndMatchesDiffusersInF32) {
  for (const Source& s : sources()) {
    SCOPED_TRACE(s.name);
    LoadedVae loaded = load_vae(s.path(), s.options);
    EXPECT_EQ(loaded.format.format.name, s.format);
    EXPECT_EQ(loaded.format.prefix, s.prefix);
    EXPECT_EQ(loaded.config_json.empty(), s.normalization_source != "config.json");
    EXPECT_THAT(loaded.normalization_source, HasSubstr(s.normalization_source));
    const VaeConfig& c = loaded.model->config();
    const bool sdxl = s.model == "sdxl_tiny";
    EXPECT_EQ(c.block_channels, sdxl ? (std::vector<int64_t>{8, 16, 16}) : (std::vector<int64_t>{8, 16}));
    EXPECT_EQ(c.encoder_blocks, 2);
    EXPECT_EQ(c.decoder_blocks, 3);
    EXPECT_EQ(c.z_channels, sdxl ? 4 : 16);
    EXPECT_EQ(c.quant_conv, sdxl);
    EXPECT_EQ(c.post_quant_conv, sdxl);
    EXPECT_TRUE(c.mid_attention);
    EXPECT_EQ(c.norm_groups, sdxl ? 4 : 8);
    EXPECT_EQ(c.downscale(), sdxl ? 4 : 2);
    EXPECT_DOUBLE_EQ(c.normalization.scaling_factor, s.normalization.scaling_factor);
    EXPECT_DOUBLE_EQ(c.normalization.shift_factor, s.normalization.shift_factor);
    EXPECT_EQ(loaded.report.n_loaded, sdxl ? 200 : 152);
    for (const auto& [name, tensor] : loaded.model->named_parameters()) {
      EXPECT_EQ(tensor.dtype(), DType::F32) << name;
      EXPECT_FALSE(autograd::requires_grad(tensor)) << name;
    }
    const Errors e = errors_of(*loaded.model, s.model);
    EXPECT_LE(e.mean, kF32Tolerance);
    EXPECT_LE(e.logvar, kF32Tolerance);
    EXPECT_LE(e.decoded, kF32Tolerance);
    std::printf("  [vae %-26s] format %-9s mean %.2e logvar %.2e decoded %.2e\n", s.name.c_str(), s.format.c_str(),
                e.mean, e.logvar, e.decoded);
  }
}

TEST(VaeWeights, SameDtypeLoadsViewTheFile) {
  LoadedVae f32 = load_vae(written().sdxl_diffusers_f32);
  // Every tensor is a view of the mapping; the attention's Linear weights are reshaped views.
  EXPECT_EQ(f32.report.n_zero_copy, 200);
  EXPECT_EQ(f32.report.n_materialized, 0);
  LoadedVae f16 = load_vae(data("sdxl_tiny"));
  EXPECT_EQ(f16.report.n_zero_copy, 0);
  EXPECT_EQ(f16.report.n_materialized, 200);
  // The SDXL-style single file: the UNet tensor beside the VAE is outside the prefix, not an error.
  LoadedVae single = load_vae(data("sdxl_tiny_ldm.safetensors"), for_model("sdxl", 4));
  EXPECT_EQ(single.report.n_outside_prefix, 1);
  // diffusers' up_blocks.0 is LDM's up.2 (the coarsest level, run first); attention Linear -> 1x1 conv.
  WeightSource diffusers = WeightSource::open(data("sdxl_tiny/vae"));
  EXPECT_EQ(f32.model->parameter("decoder.up.2.block.0.conv1.weight").to_vector<float>(),
            diffusers.get("decoder.up_blocks.0.resnets.0.conv1.weight").to(DType::F32).to_vector<float>());
  EXPECT_EQ(f32.model->parameter("decoder.up.0.block.0.nin_shortcut.weight").shape(), (Shape{8, 16, 1, 1}));
  EXPECT_EQ(f32.model->parameter("encoder.mid.attn_1.proj_out.weight").shape(), (Shape{16, 16, 1, 1}));
  EXPECT_EQ(f32.model->parameter("encoder.mid.attn_1.proj_out.weight").to_vector<float>(),
            diffusers.get("encoder.mid_block.attentions.0.to_out.0.weight").to(DType::F32).to_vector<float>());
}

TEST(VaeForward, Bf16WithinToleranceOfDiffusersBf16) {
  for (const char* key : {"sdxl_tiny", "flux_tiny"}) {
    SCOPED_TRACE(key);
    LoadedVae loaded = load_vae(data(key), {.dtype = DType::BF16});
    EXPECT_EQ(loaded.model->parameter("encoder.conv_in.weight").dtype(), DType::BF16);
    VaeMoments m = loaded.model->encode(image().to(DType::BF16));
    Tensor decoded = loaded.model->decode(m.mean);
    EXPECT_EQ(decoded.dtype(), DType::BF16);
    const std::string k = key;
    for (const auto& [name, got] :
         std::vector<std::pair<std::string, Tensor>>{{"mean", m.mean}, {"logvar", m.logvar}, {"decoded", decoded}}) {
      const double vs_bf16 = relative_to_max(got, expected(k + ".bf16." + name));
      const double vs_f32 = relative_to_max(got, expected(k + "." + name));
      EXPECT_LE(vs_bf16, kBf16Tolerance) << name;
      EXPECT_LE(vs_f32, kBf16Tolerance) << name;
      std::printf("  [vae %s bf16 %-7s] vs diffusers bf16 %.2e, vs f32 %.2e (diffusers bf16 vs f32 %.2e)\n", key,
                  name.c_str(), vs_bf16, vs_f32,
                  relative_to_max(expected(k + ".bf16." + name), expected(k + "." + name)));
    }
  }
}

TEST(VaeForward, LogvarIsClampedAndSamplingIsReproducible) {
  LoadedVae loaded = load_vae(data("flux_tiny"));
  VaeMoments m = loaded.model->encode(image());
  // Channels 0 and 1 of logvar were pushed to +25 / -35 by the fixture: clamped to 20 / -30.
  std::vector<float> logvar = m.logvar.to_vector<float>();
  EXPECT_EQ(*std::max_element(logvar.begin(), logvar.end()), 20.0f);
  EXPECT_EQ(*std::min_element(logvar.begin(), logvar.end()), -30.0f);

  const RngStream stream = derive_stream(7, 3, 0, RngPurpose::Noise);
  Tensor a = sample_latents(m, stream), b = sample_latents(m, stream);
  EXPECT_TRUE(wick::testing::same_bits(a, b));
  // mean + exp(logvar / 2) * randn(stream), element by element.
  std::vector<float> mean = m.mean.to_vector<float>(), noise = randn(m.mean.shape(), stream).to_vector<float>();
  std::vector<float> got = a.to_vector<float>();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = mean[i] + std::exp(0.5 * static_cast<double>(logvar[i])) * noise[i];
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want));
    scale = std::max(scale, std::fabs(want));
  }
  EXPECT_LE(worst / scale, 1e-6);  // the +20 logvar channel has std e^10: values up to ~1e5
  EXPECT_FALSE(wick::testing::same_bits(a, sample_latents(m, derive_stream(8, 3, 0, RngPurpose::Noise))));
  // Per-sample streams: row b is what a batch of that row alone draws from its stream.
  const std::vector<RngStream> rows = {derive_stream(7, 10, 0, RngPurpose::Noise),
                                       derive_stream(7, 11, 0, RngPurpose::Noise)};
  Tensor batch = sample_latents(m, rows);
  for (int64_t r = 0; r < 2; ++r) {
    VaeMoments one{.mean = m.mean.narrow(0, r, 1), .logvar = m.logvar.narrow(0, r, 1)};
    EXPECT_TRUE(wick::testing::same_bits(batch.narrow(0, r, 1).contiguous(),
                                         sample_latents(one, rows[static_cast<size_t>(r)])));
  }
}

TEST(VaeForward, AttentionInQueryChunksMatchesOneChunk) {
  Tensor q = wick::testing::dyadic({2, 8, 5, 7}, 1), k = wick::testing::dyadic({2, 8, 5, 7}, 2),
         v = wick::testing::dyadic({2, 8, 5, 7}, 3);
  Tensor whole = spatial_attention(q, k, v, 0);
  for (int64_t chunk : {1, 4, 34, 35, 100})
    EXPECT_LE(relative_to_max(spatial_attention(q, k, v, chunk), whole), 1e-6) << chunk;
  // The model with small chunks still matches diffusers.
  LoadedVae loaded = load_vae(data("sdxl_tiny"), {.attention_query_chunk = 5});
  EXPECT_LE(errors_of(*loaded.model, "sdxl_tiny").worst(), kF32Tolerance);
}

TEST(VaeConfigs, NormalizationPresetsAndOverrides) {
  EXPECT_DOUBLE_EQ(kSdxl.scaling_factor, 0.13025);
  EXPECT_DOUBLE_EQ(kSdxl.shift_factor, 0.0);
  EXPECT_DOUBLE_EQ(kSd3.scaling_factor, 1.5305);
  EXPECT_DOUBLE_EQ(kSd3.shift_factor, 0.0609);
  EXPECT_DOUBLE_EQ(kFlux.scaling_factor, 0.3611);
  EXPECT_DOUBLE_EQ(kFlux.shift_factor, 0.1159);
  // (z - shift) * scale and back.
  Tensor z = wick::testing::dyadic({1, 16, 2, 3}, 5);
  Tensor latents = normalize_latents(z, kFlux);
  std::vector<float> zv = z.to_vector<float>(), lv = latents.to_vector<float>();
  for (size_t i = 0; i < zv.size(); ++i) EXPECT_NEAR(lv[i], (zv[i] - 0.1159) * 0.3611, 1e-6);
  EXPECT_LE(relative_to_max(denormalize_latents(latents, kFlux), z), 1e-6);
  // The real configs: SDXL's has the quant convs and 4 channels, SD3's and Flux's 16 and none.
  EXPECT_EQ(find_architecture("sdxl").dataset_spec()->latent_channels, 4);
  EXPECT_EQ(find_architecture("sd3").dataset_spec()->latent_channels, 16);
  EXPECT_EQ(find_architecture("flux").dataset_spec()->latent_channels, 16);
  EXPECT_EQ(ldm_vae_config(4, true).z_channels, 4);
  EXPECT_TRUE(ldm_vae_config(4, true).quant_conv);
  EXPECT_FALSE(ldm_vae_config(16, false).post_quant_conv);
  EXPECT_EQ(ldm_vae_config(16, false).downscale(), 8);

  // config.json wins over the model's, options over both, each of scaling and shift on its own.
  LoadedVae folder = load_vae(data("flux_tiny"), for_model("sd3", 0));
  EXPECT_DOUBLE_EQ(folder.model->config().normalization.scaling_factor, 0.3611);
  EXPECT_EQ(folder.normalization_source, "config.json");
  LoadedVae scaled = load_vae(data("flux_tiny"), {.scaling_factor = 2.0});
  EXPECT_DOUBLE_EQ(scaled.model->config().normalization.scaling_factor, 2.0);
  EXPECT_DOUBLE_EQ(scaled.model->config().normalization.shift_factor, 0.1159);
  EXPECT_EQ(scaled.normalization_source, "scaling_factor from options, shift_factor from config.json");
  EXPECT_DOUBLE_EQ(load_vae(data("flux_tiny_ae.safetensors"), for_model("sd3", 8))
                       .model->config()
                       .normalization.shift_factor,
                   0.0609);
  // SDXL's config.json has shift_factor null: no shift.
  EXPECT_DOUBLE_EQ(load_vae(data("sdxl_tiny")).model->config().normalization.shift_factor, 0.0);
  // A 16-channel diffusers file without config.json could be SD3's or Flux's.
  const std::string message = error_of([] { load_vae(written().flux_diffusers_no_config, {.norm_groups = 8}); });
  EXPECT_THAT(message, HasSubstr("give the model it is for"));
}

TEST(VaeConfigs, RealSizesAndParameterNames) {
  // Real sizes: 83,653,863 parameters in 248 tensors (SDXL: diffusers' AutoencoderKL of
  // stabilityai/sdxl-vae), 83,819,683 in 244 (Flux / SD3: no quant convs, 16 latent channels).
  for (const auto& [z_channels, quant_convs, n_parameters, n_tensors] :
       std::vector<std::tuple<int64_t, bool, int64_t, size_t>>{{4, true, 83653863, 248}, {16, false, 83819683, 244}}) {
    std::map<std::string, Shape> shapes = parameter_shapes(ldm_vae_config(z_channels, quant_convs));
    int64_t total = 0;
    for (const auto& [name, shape] : shapes) total += numel(shape);
    EXPECT_EQ(total, n_parameters) << z_channels;
    EXPECT_EQ(shapes.size(), n_tensors) << z_channels;
  }
  // The built model has exactly those names and shapes (tiny sizes, so it builds quickly).
  VaeConfig tiny = config_from_shapes(mapped_shapes(WeightSource::open(data("sdxl_tiny/vae")),
                                                    detect_vae_format(WeightSource::open(data("sdxl_tiny/vae")))));
  tiny.norm_groups = 4;
  AutoencoderKL model(tiny);
  std::map<std::string, Shape> built;
  for (const auto& [name, tensor] : model.named_parameters()) built[name] = tensor.shape();
  EXPECT_EQ(built, parameter_shapes(tiny));
}

// ---- tiling ----

TEST(VaeTiling, SpansAreFullSizeAndEvenlySpread) {
  struct Case {
    int64_t extent, tile, overlap, align;
    std::vector<int64_t> starts;
    int64_t size;
  };
  const std::vector<Case> table = {
      {2048, 512, 128, 8, {0, 384, 768, 1152, 1536}, 512},  // 2048 px, tiles of 512 sharing 128
      {256, 64, 16, 1, {0, 48, 96, 144, 192}, 64},          // the same in latents (decode)
      {1024, 512, 128, 8, {0, 256, 512}, 512},
      {1000, 512, 128, 8, {0, 240, 488}, 512},  // starts on multiples of 8, overlaps >= 128
      {512, 512, 128, 8, {0}, 512},             // fits: one tile
      {40, 512, 128, 8, {0}, 40},               // smaller than a tile: one tile of the extent
      {96, 32, 0, 4, {0, 32, 64}, 32},          // no overlap: tiles abut
  };
  for (const Case& c : table) {
    SCOPED_TRACE(c.extent);
    std::vector<TileSpan> spans = tile_spans(c.extent, c.tile, c.overlap, c.align);
    std::vector<int64_t> starts;
    for (const TileSpan& s : spans) {
      starts.push_back(s.start);
      EXPECT_EQ(s.size, c.size);
    }
    EXPECT_EQ(starts, c.starts);
    for (size_t i = 1; i < spans.size(); ++i)
      EXPECT_GE(spans[i - 1].start + spans[i - 1].size - spans[i].start, c.overlap);
  }
  EXPECT_THAT(error_of([] { tile_spans(100, 40, 40, 4); }), HasSubstr("overlap"));
  EXPECT_THAT(error_of([] { tile_spans(100, 42, 8, 4); }), HasSubstr("multiples of 4"));
}

TEST(VaeTiling, BlendWeightsSumToOneAndRampLinearly) {
  for (double ramp : {0.0, 4.0, 16.0, 30.0}) {
    SCOPED_TRACE(ramp);
    std::vector<TileSpan> spans = tile_spans(200, 64, 16, 1);
    std::vector<std::vector<float>> weights = blend_weights(spans, ramp);
    std::vector<double> total(200, 0.0);
    for (size_t i = 0; i < spans.size(); ++i)
      for (int64_t u = 0; u < spans[i].size; ++u) {
        EXPECT_GT(weights[i][static_cast<size_t>(u)], 0.0f);
        total[static_cast<size_t>(spans[i].start + u)] += weights[i][static_cast<size_t>(u)];
      }
    for (double t : total) EXPECT_NEAR(t, 1.0, 1e-6);
  }
  // Two tiles sharing exactly the ramp: a linear cross-fade (k + 0.5) / 8 over the 8 shared positions.
  std::vector<std::vector<float>> w = blend_weights({{0, 16}, {8, 16}}, 8.0);
  for (int64_t k = 0; k < 8; ++k) {
    EXPECT_NEAR(w[1][static_cast<size_t>(k)], (k + 0.5) / 8.0, 1e-7);
    EXPECT_NEAR(w[0][static_cast<size_t>(8 + k)], 1.0 - (k + 0.5) / 8.0, 1e-7);
  }
  EXPECT_EQ(w[0][0], 1.0f);
  EXPECT_EQ(w[1][15], 1.0f);
}

// A function that sees each pixel alone gives the same result tiled: the tiles and the blend are exact.
TEST(VaeTiling, PixelwiseFunctionsAreExactWhenTiled) {
  Tensor x = wick::testing::dyadic({2, 3, 24, 40}, 9);
  // Decoding direction (x 4): nearest upsampling, then a pixelwise map.
  auto up = [](const Tensor& t) {
    return autograd::add(autograd::mul(upsample_nearest2x(upsample_nearest2x(t)), 3.0), 1.0);
  };
  Tensor whole = up(x);
  for (const TileGrid& grid : {TileGrid{.tile = 8, .overlap = 2, .align = 1, .scale_num = 4, .scale_den = 1},
                               TileGrid{.tile = 16, .overlap = 5, .align = 1, .scale_num = 4, .scale_den = 1},
                               TileGrid{.tile = 7, .overlap = 0, .align = 1, .scale_num = 4, .scale_den = 1}}) {
    Tensor tiled = tiled_apply(x, grid, up);
    EXPECT_LE(relative_to_max(tiled, whole), 2e-7) << grid.tile;
  }
  // Encoding direction (/ 4): every 4th pixel.
  auto down = [](const Tensor& t) { return t.slice(2, 0, t.size(2), 4).slice(3, 0, t.size(3), 4).contiguous(); };
  Tensor big = wick::testing::dyadic({1, 2, 64, 96}, 4);
  Tensor tiled = tiled_apply(big, {.tile = 32, .overlap = 8, .align = 4, .scale_num = 1, .scale_den = 4}, down);
  EXPECT_LE(relative_to_max(tiled, down(big)), 2e-7);
}

// Tiled against untiled encode / decode on the fixture's [1, 3, 64, 96] images, against diffusers'
// own tiled_encode / tiled_decode at the same tile size and overlap (its errors are in the fixture).
// The periodic image repeats every 16 pixels, so a 48-pixel tile has the whole image's statistics and
// what remains is the error of the tile borders (the seams); on the smooth image GroupNorm's per-tile
// statistics dominate (tiles of 8 latent pixels) and neither tiling controls them.
TEST(VaeTiling, TiledVaeSeamsStayBelowDiffusers) {
  struct Case {
    const char* image;
    VaeTiling tiling;
    double bound_vs_diffusers;  // wick's error <= this x diffusers'
  };
  const std::vector<std::pair<std::string, Case>> table = {
      {"periodic", {"tiling.periodic_image", {.tile_size = 48, .overlap = 16}, 1.0}},
      {"smooth", {"tiling.image", {.tile_size = 32, .overlap = 8}, 1.25}},
  };
  for (const char* key : {"sdxl_tiny", "flux_tiny"}) {
    LoadedVae loaded = load_vae(data(key));
    AutoencoderKL& vae = *loaded.model;
    for (const auto& [kind, c] : table) {
      SCOPED_TRACE(std::string(key) + " " + kind);
      const Tensor picture = expected(c.image);
      VaeMoments whole = vae.encode(picture);
      Tensor decoded = vae.decode(whole.mean);
      // A tile at least as large as the image: the untiled path, bit for bit.
      EXPECT_TRUE(wick::testing::same_bits(vae.encode(picture, {.tile_size = 96}).mean, whole.mean));
      EXPECT_TRUE(wick::testing::same_bits(vae.decode(whole.mean, {.tile_size = 96}), decoded));
      const double encode_error = relative_to_max(vae.encode(picture, c.tiling).mean, whole.mean);
      const double decode_error = relative_to_max(vae.decode(whole.mean, c.tiling), decoded);
      const std::string k = std::string(key) + ".tiling." + kind;
      const double diffusers_encode = expected(k + ".encode_error").to_vector<double>()[0];
      const double diffusers_decode = expected(k + ".decode_error").to_vector<double>()[0];
      // Without overlap the seams show: the blend over the shared pixels is what keeps them down.
      VaeTiling abutting = c.tiling;
      abutting.overlap = 0;
      const double encode_abutting = relative_to_max(vae.encode(picture, abutting).mean, whole.mean);
      const double decode_abutting = relative_to_max(vae.decode(whole.mean, abutting), decoded);
      std::printf(
          "  [vae %s %-8s tile %lld px, overlap %lld] tiled vs untiled: encode %.3f (diffusers %.3f, no "
          "overlap %.3f), decode %.3f (diffusers %.3f, no overlap %.3f)\n",
          key, kind.c_str(), static_cast<long long>(c.tiling.tile_size), static_cast<long long>(c.tiling.overlap),
          encode_error, diffusers_encode, encode_abutting, decode_error, diffusers_decode, decode_abutting);
      EXPECT_LE(encode_error, c.bound_vs_diffusers * diffusers_encode);
      EXPECT_LE(decode_error, c.bound_vs_diffusers * diffusers_decode);
      if (kind == "periodic") {
        EXPECT_LT(encode_error, encode_abutting);
        EXPECT_LT(decode_error, decode_abutting);
      }
    }
  }
}

// ---- bad files ----

TEST(VaeWeights, BadFilesAreDataErrorsNamingTensors) {
  const Named good = tensors_of(data("flux_tiny_ae.safetensors"));
  auto load_kind = [](const std::string& path, const VaeLoadOptions& options) {
    try {
      load_vae(path, options);
    } catch (const WickError& error) {
      return std::make_pair(error.kind(), std::string(error.what()));
    }
    return std::make_pair(ErrorKind::Usage, std::string("(no error thrown)"));
  };
  const VaeLoadOptions groups8 = for_model("flux", 8);
  {  // a tensor missing
    Named t;
    for (const auto& [name, tensor] : good)
      if (name != "decoder.up.0.block.2.conv2.weight") t.emplace_back(name, tensor);
    auto [kind, message] = load_kind(write("vae_bad_missing", "ae.safetensors", t), groups8);
    EXPECT_EQ(kind, ErrorKind::Data);
    EXPECT_THAT(message, HasSubstr("decoder.up.0.block.2.conv2.weight"));
    EXPECT_THAT(message, HasSubstr("format 'ldm'"));
  }
  {  // a tensor of the wrong shape, and one no parameter uses
    Named t;
    for (const auto& [name, tensor] : good)
      t.emplace_back(name, name == "encoder.mid.attn_1.k.bias" ? wick::testing::dyadic({15}, 1) : tensor);
    t.emplace_back("encoder.mid.attn_1.extra.weight", wick::testing::dyadic({4}, 2));
    auto [kind, message] = load_kind(write("vae_bad_shape", "ae.safetensors", t), groups8);
    EXPECT_EQ(kind, ErrorKind::Data);
    EXPECT_THAT(message, HasSubstr("encoder.mid.attn_1.k.bias: the model expects [16], the source has [15]"));
    EXPECT_THAT(message, HasSubstr("encoder.mid.attn_1.extra.weight"));
  }
  {  // many problems: ten named, then a count
    Named t;
    for (const auto& [name, tensor] : good)
      if (name.rfind("decoder.up.1.block.1.", 0) != 0 && name.rfind("decoder.up.1.block.2.", 0) != 0)
        t.emplace_back(name, tensor);
    auto [kind, message] = load_kind(write("vae_bad_many", "ae.safetensors", t), groups8);
    EXPECT_EQ(kind, ErrorKind::Data);
    EXPECT_THAT(message, HasSubstr("16 parameters missing"));
    EXPECT_THAT(message, HasSubstr("... and 6 more"));
  }
  {  // not a VAE
    auto [kind, message] = load_kind(
        write("vae_bad_format", "x.safetensors", {{"model.diffusion_model.x.weight", wick::testing::dyadic({2}, 1)}}),
        {});
    EXPECT_EQ(kind, ErrorKind::Data);
    EXPECT_THAT(message, HasSubstr("'ldm' looks for"));
    EXPECT_THAT(message, HasSubstr("'diffusers' looks for"));
  }
  {  // the encoder's moments do not match the decoder's latent channels
    Named t;
    for (const auto& [name, tensor] : good)
      t.emplace_back(name, name == "decoder.conv_in.weight" ? wick::testing::dyadic({16, 8, 3, 3}, 1) : tensor);
    auto [kind, message] = load_kind(write("vae_bad_z", "ae.safetensors", t), groups8);
    EXPECT_EQ(kind, ErrorKind::Data);
    EXPECT_THAT(message, HasSubstr("encoder.conv_out makes 32 channels"));
  }
  {  // config.json disagreeing with the weights
    fs::path dir = scratch_dir("vae_bad_config");
    fs::copy_file(data("flux_tiny/vae/diffusion_pytorch_model.safetensors"),
                  dir / "diffusion_pytorch_model.safetensors");
    std::ifstream in(data("flux_tiny/vae/config.json"));
    std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    json.replace(json.find("\"latent_channels\": 16"), 21, "\"latent_channels\": 4");
    std::ofstream(dir / "config.json") << json;
    auto [kind, message] = load_kind(dir.string(), {});
    EXPECT_EQ(kind, ErrorKind::Data);
    EXPECT_THAT(message, HasSubstr("latent_channels = 4 but the weights have 16"));
  }
  {  // an LDM file's group count is not in it: the default 32 does not divide 8 channels
    auto [kind, message] = load_kind(data("flux_tiny_ae.safetensors"), for_model("flux", 0));
    EXPECT_EQ(kind, ErrorKind::Config);
    EXPECT_THAT(message, HasSubstr("norm_groups = 32"));
  }
}

// ---- memory ----

// What memory_stats' peak rises by during one call, the input made and the output kept beforehand.
template <typename Fn>
int64_t measured_peak(Fn&& fn) {
  const int64_t before = memory_stats(Device::cpu()).current_bytes;
  reset_peak_memory(Device::cpu());
  auto result = fn();  // kept alive: the output is part of the peak
  return memory_stats(Device::cpu()).peak_bytes - before;
}

// The replay of estimate_vae_memory against the CPU allocator, byte for byte, for both models, f32
// and bf16 (the CPU convolution's casts included), untiled and tiled.
TEST(VaeMemory, EstimateMatchesTheAllocator) {
  for (const char* key : {"sdxl_tiny", "flux_tiny"}) {
    for (DType dtype : {DType::F32, DType::BF16}) {
      LoadedVae loaded = load_vae(data(key), {.dtype = dtype});
      AutoencoderKL& vae = *loaded.model;
      const int64_t f = vae.config().downscale();
      for (const auto& [height, width, tiling] : std::vector<std::tuple<int64_t, int64_t, VaeTiling>>{
               {24, 40, {}}, {64, 96, {}}, {64, 96, {.tile_size = 32, .overlap = 8}}, {64, 96, {.tile_size = 48}}}) {
        SCOPED_TRACE(std::string(key) + " " + dtype_name(dtype) + " " + std::to_string(height) + "x" +
                     std::to_string(width) + " tile " + std::to_string(tiling.tile_size));
        const Tensor images = wick::testing::dyadic({1, 3, height, width}, 1, dtype);
        const Tensor z = wick::testing::dyadic({1, vae.config().z_channels, height / f, width / f}, 2, dtype);
        const int64_t encode = measured_peak([&] { return vae.encode(images, tiling); });
        const int64_t decode = measured_peak([&] { return vae.decode(z, tiling); });
        const VaeMemoryEstimate e = estimate_vae_memory(vae.config(), VaePass::Encode, 1, height, width, tiling);
        const VaeMemoryEstimate d = estimate_vae_memory(vae.config(), VaePass::Decode, 1, height, width, tiling);
        EXPECT_EQ(e.peak, encode) << e.peak_at;
        EXPECT_EQ(d.peak, decode) << d.peak_at;
        EXPECT_EQ(e.input, images.nbytes());
        EXPECT_EQ(d.input, z.nbytes());
      }
    }
  }
}

// The real VAEs (84M parameters) at 1024² and 2048², untiled and in tiles of 512 pixels sharing 128:
// the numbers of docs/vae.md "Memory". Tiled, the peak does not grow with the image beyond the
// output and the f32 blend buffer.
TEST(VaeMemory, RealSizesAndTilingBoundsThePeak) {
  for (const auto& [family, z_channels, quant_convs] :
       std::vector<std::tuple<const char*, int64_t, bool>>{{"sdxl", 4, true}, {"flux", 16, false}}) {
    for (DType dtype : {DType::F32, DType::BF16}) {
      for (Device device : {Device::cuda(0), Device::cpu()}) {
        VaeConfig c = ldm_vae_config(z_channels, quant_convs);
        c.dtype = dtype;
        c.device = device;
        for (VaePass pass : {VaePass::Encode, VaePass::Decode}) {
          std::map<std::pair<int64_t, int64_t>, VaeMemoryEstimate> peaks;  // (size, tile) -> estimate
          std::string line;
          for (int64_t size : {1024, 2048})
            for (int64_t tile : {0, 512}) {
              VaeMemoryEstimate m = estimate_vae_memory(c, pass, 1, size, size, {.tile_size = tile, .overlap = 128});
              char text[96];
              std::snprintf(text, sizeof text, "  %lld² %s %.2f GiB", static_cast<long long>(size),
                            tile ? "tiled" : "whole", static_cast<double>(m.total()) / (1 << 30));
              line += text;
              peaks[{size, tile}] = m;
            }
          std::printf("  [vae %-4s %-4s %-4s %s] weights + input + peak:%s; im2col (cpu) %.2f / %.2f GiB\n",
                      family, dtype_name(dtype), device.is_cpu() ? "cpu" : "cuda",
                      pass == VaePass::Encode ? "encode" : "decode", line.c_str(),
                      static_cast<double>(peaks[{2048, 0}].cpu_conv_columns) / (1 << 30),
                      static_cast<double>(peaks[{2048, 512}].cpu_conv_columns) / (1 << 30));
          // Untiled, the activations grow with the pixels (x4 from 1024² to 2048², the attention's
          // chunked scores aside); tiled, only the output and the blend buffer do.
          const VaeMemoryEstimate& small = peaks[{1024, 512}];
          const VaeMemoryEstimate& large = peaks[{2048, 512}];
          const VaeMemoryEstimate& whole_small = peaks[{1024, 0}];
          const VaeMemoryEstimate& whole_large = peaks[{2048, 0}];
          const DType accumulate = DType::F32;
          const int64_t growth =
              (large.output - small.output) +
              (pass == VaePass::Decode ? (large.output - small.output) / dtype_size(dtype) * dtype_size(accumulate)
                                       : 0);
          EXPECT_LE(large.peak - small.peak, growth + (int64_t{64} << 20));
          EXPECT_GT(whole_large.peak, 3 * whole_small.peak);
          EXPECT_LT(large.peak, whole_small.peak);
        }
      }
    }
  }
}

}  // namespace
}  // namespace wick::vae
