// The language-model text encoders (models/llm) against transformers 5.24.0 on tiny random models: fixtures from
// tests/reference/make_llm_fixtures.py in tests/data/llm. Qwen3 (6 layers of 32, 4 / 2 heads of 16: head_dim !=
// hidden / heads, q_norm / k_norm, tied embeddings), Qwen2.5-VL's language model (4 layers of 32, 4 / 2 heads of 8,
// q/k/v biases, M-RoPE on text) inside Qwen2_5_VLForConditionalGeneration with a vision tower, Mistral (31 layers
// of 16, 4 / 2 heads of 8) inside Mistral3ForConditionalGeneration with a Pixtral tower. Inputs: 3 prompts of 12,
// 7 and 3 random tokens, right- and left-padded to 12, and the first alone ("single").
// Weights come from the sharded transformers folders as published (model.* / language_model.model.*), a ComfyUI-
// style bf16 single file, a ComfyUI-style scaled float8 file, and variants this test writes (transformers 5's
// model.language_model.* names, a bare Qwen3Model state dict, broken files).
//
// Metric, per tensor: max_i |wick_i - ref_i| / max_i |ref_i|.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "models/llm/llm_blocks.h"
#include "models/llm/llm_encoder.h"
#include "models/llm/llm_memory.h"
#include "models/llm/llm_weights.h"
#include "models/nn/linear.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/test_data.h"

namespace wick::llm {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using wick::testing::error_of;

std::string data_path(const std::string& name) { return wick::testing::test_data_dir() + "/llm/" + name; }

const SafetensorsFile& cases() {
  static const SafetensorsFile file = SafetensorsFile::open(data_path("cases.safetensors"));
  return file;
}

double relative_to_max(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < w.size() && i < g.size(); ++i) {
    worst = std::max(worst, std::fabs(g[i] - w[i]));
    scale = std::max(scale, std::fabs(w[i]));
  }
  return scale > 0 ? worst / scale : worst;
}

fs::path scratch(const std::string& name) {
  fs::path dir = fs::path(::testing::TempDir()) / ("wick_llm_encoder_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

const char* const kCases[] = {"right", "left", "single"};

// The kind of the WickError `fn` throws.
std::optional<ErrorKind> kind_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const WickError& error) {
    return error.kind();
  }
  return std::nullopt;
}

// The f32 output of `encoder` on a case for `output`.
Tensor run_case(LlmEncoder& encoder, const std::string& name, const LlmOutput& output) {
  autograd::NoGradGuard no_grad;
  return encoder.forward(cases().get(name + ".ids"), cases().get(name + ".mask"), output)
      .to(DType::F32)
      .to(Device::cpu());
}

// transformers' hidden_states[k] of a family's case; k == n_layers is the final-normed last state.
Tensor reference(const std::string& family, const std::string& name, int64_t k, int64_t n_layers) {
  return cases().get(family + "." + name + (k == n_layers ? ".normed" : ".hs." + std::to_string(k)));
}

struct Family {
  const char* name;    // fixture prefix
  const char* folder;  // transformers folder
  int64_t n_layers;
  std::vector<int64_t> stored;  // hidden_states indices the fixture holds (besides the normed last one)
};

const Family kFamilies[] = {
    {"qwen3", "qwen3", 6, {0, 1, 2, 3, 4, 5}},
    {"qwen2vl", "qwen2vl", 4, {0, 1, 2, 3}},
    {"mistral", "mistral", 31, {0, 10, 20, 30}},
};

// Every stored hidden state and the last one, with the encoder built for all of them.
void expect_matches(LlmEncoder& encoder, const std::string& family, const std::vector<int64_t>& stored,
                    int64_t n_layers, double tolerance, const std::string& label) {
  for (const char* name : kCases) {
    std::vector<int64_t> all = stored;
    all.push_back(n_layers);
    for (int64_t k : all) {
      const double err =
          relative_to_max(run_case(encoder, name, LlmOutput::hidden_state(k)), reference(family, name, k, n_layers));
      EXPECT_LE(err, tolerance) << label << " " << name << " hidden_states[" << k << "]";
    }
  }
}

TEST(LlmConfig, FamiliesAndSizesFromTheWeights) {
  struct Want {
    const char* folder;
    LlmFamily family;
    int64_t hidden, intermediate, layers, heads, kv_heads, head_dim;
    double eps, theta;
  };
  const Want wants[] = {
      {"qwen3", LlmFamily::Qwen3, 32, 48, 6, 4, 2, 16, 1e-6, 1e6},
      {"qwen2vl", LlmFamily::Qwen2, 32, 48, 4, 4, 2, 8, 1e-6, 1e6},
      {"mistral", LlmFamily::Mistral, 16, 32, 31, 4, 2, 8, 1e-5, 1e9},
  };
  for (const Want& w : wants) {
    WeightSource source = WeightSource::open(data_path(w.folder));
    DetectedFormat format = detect_weight_format(source);
    LlmConfig c = config_from_shapes(mapped_shapes(source, format), source.path(), read_config_json(source.path()));
    EXPECT_EQ(c.family, w.family) << w.folder;
    EXPECT_EQ(c.vocab_size, 256) << w.folder;
    EXPECT_EQ(c.hidden_size, w.hidden) << w.folder;
    EXPECT_EQ(c.intermediate_size, w.intermediate) << w.folder;
    EXPECT_EQ(c.n_layers, w.layers) << w.folder;
    EXPECT_EQ(c.n_heads, w.heads) << w.folder;
    EXPECT_EQ(c.n_kv_heads, w.kv_heads) << w.folder;
    EXPECT_EQ(c.head_dim, w.head_dim) << w.folder;
    EXPECT_DOUBLE_EQ(c.eps, w.eps) << w.folder;
    EXPECT_DOUBLE_EQ(c.rope_theta, w.theta) << w.folder;
    // The model built from it has exactly the parameters parameter_shapes lists.
    c.dtype = DType::F32;
    LlmEncoder encoder(c);
    std::map<std::string, Shape> model_shapes;
    for (const auto& [name, tensor] : encoder.named_parameters()) {
      model_shapes[name] = tensor.shape();
      EXPECT_FALSE(autograd::requires_grad(tensor)) << name;
    }
    EXPECT_EQ(model_shapes, parameter_shapes(c, c.n_layers, true)) << w.folder;
  }
  // Without config.json, Qwen3's head width comes from q_norm; the others fall back to 128, which the tiny Mistral
  // (q width 32) cannot split into.
  WeightSource comfy = WeightSource::open(data_path("qwen3_comfy_bf16.safetensors"));
  EXPECT_EQ(config_from_shapes(mapped_shapes(comfy, detect_weight_format(comfy)), comfy.path()).head_dim, 16);
  WeightSource mistral = WeightSource::open(data_path("mistral"));
  EXPECT_THAT(error_of([&] { config_from_shapes(mapped_shapes(mistral, detect_weight_format(mistral)), "m.st"); }),
              AllOf(HasSubstr("m.st"), HasSubstr("do not split into heads of 128")));
}

TEST(LlmConfig, ConfigJsonOfAnotherModelIsNotUsed) {
  const fs::path dir = scratch("config_json");
  auto write = [&](const std::string& text) {
    std::ofstream(dir / "config.json") << text;
    return read_config_json((dir / "weights.safetensors").string());
  };
  LlmShapeHints own = write(R"({"model_type": "qwen3", "head_dim": 4, "rms_norm_eps": 1e-5,
                                "rope_parameters": {"rope_theta": 5e6}})");
  EXPECT_EQ(own.head_dim, 4);
  EXPECT_DOUBLE_EQ(*own.eps, 1e-5);
  EXPECT_DOUBLE_EQ(*own.rope_theta, 5e6);
  // transformers 4's Qwen2.5-VL: text settings at the top level, no head_dim (hidden / heads), rope_theta there.
  LlmShapeHints vl = write(R"({"model_type": "qwen2_5_vl", "hidden_size": 3584, "num_attention_heads": 28,
                               "rope_theta": 1000000.0})");
  EXPECT_EQ(vl.head_dim, 128);
  EXPECT_DOUBLE_EQ(*vl.rope_theta, 1e6);
  LlmShapeHints other = write(R"({"model_type": "t5", "head_dim": 4, "rms_norm_eps": 1e-5})");
  EXPECT_EQ(other.head_dim, 0);
  EXPECT_FALSE(other.eps.has_value());
  EXPECT_THAT(error_of([&] { write("{not json"); }), AllOf(HasSubstr("config.json"), HasSubstr("not valid JSON")));
}

TEST(LlmConfig, RealModelsParameterCountsAndBytes) {
  // transformers' Qwen3Model / Qwen2_5_VLTextModel / MistralModel built on the meta device from the real configs
  // (tests/data/llm/README.md): embedding, layers and final norm, no lm_head.
  EXPECT_EQ(parameter_count(qwen3_4b()), 4022468096);
  EXPECT_EQ(parameter_count(qwen3_8b()), 7568405504);
  EXPECT_EQ(parameter_count(qwen2_5_vl_7b()), 7070619136);
  EXPECT_EQ(parameter_count(mistral_small_3()), 22901314560);
  EXPECT_EQ(weight_bytes(qwen3_4b()), 2 * 4022468096);
  // Z-Image: 35 of 36 layers, no final norm; FLUX.2 dev: 30 of 40.
  const LlmConfig q = qwen3_4b(), m = mistral_small_3();
  const int64_t q_layer = 100930816;
  const int64_t m_layer = int64_t{5120} * 4096 * 2 + int64_t{5120} * 1024 * 2 + int64_t{3} * 5120 * 32768 + 2 * 5120;
  EXPECT_EQ(parameter_count(q, {.n_layers = 35, .final_norm = false}), 4022468096 - q_layer - 2560);
  EXPECT_EQ(parameter_count(m, {.n_layers = 30, .final_norm = false}), 22901314560 - 10 * m_layer - 5120);
  // float8 per row: each Linear weight 1 byte per element + 4 bytes per row; embedding and norms stay bf16.
  const int64_t linear_elements = int64_t{36} * (2560 * 4096 * 2 + 2560 * 1024 * 2 + 3 * 2560 * 9728);
  const int64_t linear_rows = 36 * (4096 + 1024 + 1024 + 2560 + 9728 * 2 + 2560);
  EXPECT_EQ(weight_bytes(q, {.float8 = true}), linear_elements + 4 * linear_rows + 2 * (4022468096 - linear_elements));
  EXPECT_EQ(weight_bytes(q, {.float8 = true, .scaling = Float8Scaling::PerTensor}),
            linear_elements + 4 * 36 * 7 + 2 * (4022468096 - linear_elements));
  EXPECT_THAT(error_of([&] { parameter_count(q, {.n_layers = 37}); }), HasSubstr("37 layers of 36"));
}

TEST(LlmEncoder, RotaryTablesAreTransformersHalfSplit) {
  // angle(l, i) = l / theta^(2i / D); apply_rotary_half_split rotates (x[i], x[i + D/2]) and lays pairs side by side.
  RotaryTables t = rotary_tables(3, 4, 100.0, Device::cpu());
  ASSERT_EQ(t.cos.shape(), (Shape{3, 2}));
  std::vector<float> cos = t.cos.to_vector<float>(), sin = t.sin.to_vector<float>();
  EXPECT_FLOAT_EQ(cos[0], 1.0f);
  EXPECT_FLOAT_EQ(sin[2], std::sin(1.0f));
  EXPECT_FLOAT_EQ(sin[3], std::sin(0.1f));
  EXPECT_FLOAT_EQ(cos[5], std::cos(0.2f));
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4}, {1, 1, 3, 4});
  std::vector<float> y = apply_rotary_half_split(x, t).to_vector<float>();
  // position 1, pair 0 = (x0, x2) = (1, 3) by angle 1; pair 1 = (x1, x3) = (2, 4) by angle 0.1.
  EXPECT_FLOAT_EQ(y[4], std::cos(1.0f) * 1 - std::sin(1.0f) * 3);
  EXPECT_FLOAT_EQ(y[5], std::sin(1.0f) * 1 + std::cos(1.0f) * 3);
  EXPECT_FLOAT_EQ(y[6], std::cos(0.1f) * 2 - std::sin(0.1f) * 4);
  EXPECT_FLOAT_EQ(y[7], std::sin(0.1f) * 2 + std::cos(0.1f) * 4);
}

TEST(LlmEncoder, MatchesTransformersInF32WithPadding) {
  for (const Family& f : kFamilies) {
    auto encoder =
        LlmEncoder::load(data_path(f.folder), {.output = LlmOutput::last_hidden_state(), .dtype = DType::F32});
    EXPECT_EQ(encoder->n_layers_built(), f.n_layers);
    expect_matches(*encoder, f.name, f.stored, f.n_layers, 1e-5, f.name);
  }
}

TEST(LlmEncoder, CudaMatchesTransformers) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  // The same cases on the GPU (causal SDPA with the key mask: wick's CUDA attention kernel; float8 Linears
  // dequantized on the device).
  for (const Family& f : kFamilies) {
    auto f32 = LlmEncoder::load(data_path(f.folder), {.dtype = DType::F32, .device = Device::cuda()});
    auto bf16 = LlmEncoder::load(data_path(f.folder), {.dtype = DType::BF16, .device = Device::cuda()});
    for (const char* name : kCases) {
      const double f32_error = relative_to_max(run_case(*f32, name, LlmOutput::last_hidden_state()),
                                               reference(f.name, name, f.n_layers, f.n_layers));
      const double bf16_error = relative_to_max(run_case(*bf16, name, LlmOutput::last_hidden_state()),
                                                reference(f.name, name, f.n_layers, f.n_layers));
      const float theirs = cases().get(std::string(f.name) + "." + name + ".bf16_rel_err").to_vector<float>().back();
      std::printf("[ llm cuda ] %-8s %-7s f32 %.2e bf16 %.2e (transformers bf16 %.2e)\n", f.name, name, f32_error,
                  bf16_error, theirs);
      EXPECT_LE(f32_error, 1e-5) << f.name << " " << name;
      EXPECT_LE(bf16_error, 1.25 * theirs) << f.name << " " << name;
    }
  }
  auto fp8 =
      LlmEncoder::load(data_path("qwen3_fp8_scaled.safetensors"), {.dtype = DType::F32, .device = Device::cuda()});
  EXPECT_LE(
      relative_to_max(run_case(*fp8, "left", LlmOutput::last_hidden_state()), reference("qwen3fp8", "left", 6, 6)),
      1e-5);
}

TEST(LlmEncoder, QwenVlTextMropeIsOneDimensionalRope) {
  // transformers' Qwen2.5-VL given explicit arange positions equals its own M-RoPE run bit for bit on text...
  for (const char* name : kCases)
    EXPECT_EQ(cases().get(std::string("qwen2vl.") + name + ".arange_rel_err").to_vector<float>(),
              std::vector<float>(5, 0.0f))
        << name;
  // ...and wick's 1-D RoPE matches that model (MatchesTransformersInF32WithPadding) with real tokens unaffected by
  // the padding side: the right- and left-padded rows of the first prompt (no padding) equal the single run.
  auto encoder = LlmEncoder::load(data_path("qwen2vl"), {.dtype = DType::F32});
  Tensor single = run_case(*encoder, "single", LlmOutput::last_hidden_state());
  Tensor right = run_case(*encoder, "right", LlmOutput::last_hidden_state()).narrow(0, 0, 1);
  EXPECT_LE(relative_to_max(right, single), 1e-6);
  // Prompt 2 (3 tokens): its real rows in the left-padded batch equal its right-padded rows.
  Tensor left = run_case(*encoder, "left", LlmOutput::last_hidden_state()).narrow(0, 2, 1).narrow(1, 9, 3);
  Tensor right2 = run_case(*encoder, "right", LlmOutput::last_hidden_state()).narrow(0, 2, 1).narrow(1, 0, 3);
  EXPECT_LE(relative_to_max(left.contiguous(), right2.contiguous()), 1e-5);
}

TEST(LlmEncoder, LeftPaddingRowsAttendToNothing) {
  // A left-padding query has no key: attention gives 0, so layer 1's output on such a row is the embedding plus the
  // MLP of the normed embedding (torch's SDPA, not transformers' eager uniform average). Checked against
  // transformers through the fixture: the whole left-padded tensors match (pad rows included).
  auto encoder = LlmEncoder::load(data_path("qwen3"), {.output = LlmOutput::hidden_state(1), .dtype = DType::F32});
  EXPECT_EQ(encoder->n_layers_built(), 1);
  EXPECT_FALSE(encoder->has_final_norm());
  EXPECT_LE(relative_to_max(run_case(*encoder, "left", LlmOutput::hidden_state(1)), reference("qwen3", "left", 1, 6)),
            1e-5);
}

TEST(LlmEncoder, StacksOfLayersAndPartialLoading) {
  // FLUX.2 dev: hidden_states[10], [20], [30] of Mistral concatenated per token; layer 30 (the 31st) and the final
  // norm are neither built nor read.
  auto mistral =
      LlmEncoder::load(data_path("mistral"), {.output = LlmOutput::stack({10, 20, 30}), .dtype = DType::F32});
  EXPECT_EQ(mistral->n_layers_built(), 30);
  EXPECT_FALSE(mistral->has_final_norm());
  for (const auto& [name, tensor] : mistral->named_parameters()) EXPECT_EQ(name.find("layers.30."), std::string::npos);
  for (const char* name : kCases) {
    autograd::NoGradGuard no_grad;
    Tensor got = mistral->forward(cases().get(std::string(name) + ".ids"), cases().get(std::string(name) + ".mask"))
                     .to(DType::F32);
    ASSERT_EQ(got.shape(), (Shape{cases().get(std::string(name) + ".ids").size(0), 12, 48}));
    for (int64_t part = 0; part < 3; ++part)
      EXPECT_LE(
          relative_to_max(got.narrow(2, 16 * part, 16).contiguous(), reference("mistral", name, 10 * (part + 1), 31)),
          1e-5)
          << name << " part " << part;
  }
  EXPECT_THAT(error_of([&] { run_case(*mistral, "single", LlmOutput::last_hidden_state()); }),
              AllOf(HasSubstr("needs 31 layers and the final norm"), HasSubstr("built with 30 of 31")));
  // Z-Image: hidden_states[-2] of Qwen3 = layer 5's raw output of 6; 5 layers, no norm.
  auto qwen3 = LlmEncoder::load(data_path("qwen3"), {.output = LlmOutput::hidden_state(-2), .dtype = DType::F32});
  EXPECT_EQ(qwen3->n_layers_built(), 5);
  EXPECT_FALSE(qwen3->has_final_norm());
  for (const char* name : kCases)
    EXPECT_LE(relative_to_max(run_case(*qwen3, name, qwen3->default_output()), reference("qwen3", name, 5, 6)), 1e-5);
  // FLUX.2 klein's stack scaled down: 2 | 4 | 5 of Qwen3.
  auto klein = LlmEncoder::load(data_path("qwen3"), {.output = LlmOutput::stack({2, 4, 5}), .dtype = DType::F32});
  Tensor got = run_case(*klein, "right", klein->default_output());
  const int64_t ks[] = {2, 4, 5};
  for (int64_t part = 0; part < 3; ++part)
    EXPECT_LE(relative_to_max(got.narrow(2, 32 * part, 32).contiguous(), reference("qwen3", "right", ks[part], 6)),
              1e-5);
  EXPECT_THAT(error_of([&] { LlmEncoder::load(data_path("qwen3"), {.output = LlmOutput::hidden_state(7)}); }),
              HasSubstr("hidden_states[7] does not exist in a model of 6 layers"));
  EXPECT_THAT(error_of([&] { LlmEncoder::load(data_path("qwen3"), {.output = LlmOutput::stack({})}); }),
              HasSubstr("no hidden state requested"));
}

// wick's bf16 model against transformers' f32 output, next to transformers' own bf16 model against it (both
// computed in the fixture's cases). wick keeps the residual stream in f32 and rotates in f32, transformers in bf16:
// over a case's hidden states wick's largest error is no larger than transformers' largest; a single hidden state
// may come out up to 25% worse (the two are differently rounded samples: 3 of 51 do, by at most 23%;
// docs/text_encoders.md has the table).
TEST(LlmEncoder, Bf16ErrorNoLargerThanTransformersOwn) {
  for (const Family& f : kFamilies) {
    auto encoder = LlmEncoder::load(data_path(f.folder), {.dtype = DType::BF16});
    for (const char* name : kCases) {
      std::vector<int64_t> all = f.stored;
      all.push_back(f.n_layers);
      const std::vector<float> theirs =
          cases().get(std::string(f.name) + "." + name + ".bf16_rel_err").to_vector<float>();
      ASSERT_EQ(theirs.size(), all.size());
      double worst_ours = 0, worst_theirs = 0;
      for (size_t i = 0; i < all.size(); ++i) {
        Tensor got = run_case(*encoder, name, LlmOutput::hidden_state(all[i]));
        const double ours = relative_to_max(got, reference(f.name, name, all[i], f.n_layers));
        EXPECT_LE(ours, 1.25 * theirs[i]) << f.name << " " << name << " hidden_states[" << all[i] << "]";
        if (all[i] == 0) {
          EXPECT_NEAR(ours, theirs[i], 1e-6) << "the embedding is the bf16 table in both";
        }
        worst_ours = std::max(worst_ours, ours);
        worst_theirs = std::max(worst_theirs, static_cast<double>(theirs[i]));
      }
      EXPECT_LE(worst_ours, worst_theirs) << f.name << " " << name;
    }
  }
}

TEST(LlmEncoder, ComfyUiSingleFilesInBf16AndFloat8) {
  // qwen_3_4b.safetensors layout in bf16, loaded into an f32 model: transformers on the bf16-rounded weights.
  auto comfy = LlmEncoder::load(data_path("qwen3_comfy_bf16.safetensors"), {.dtype = DType::F32});
  expect_matches(*comfy, "qwen3comfy", {0, 1, 2, 3, 4, 5}, 6, 1e-5, "comfy bf16");
  // Loaded as bf16: zero-copy views of the mapping.
  auto comfy16 = LlmEncoder::load(data_path("qwen3_comfy_bf16.safetensors"));
  EXPECT_EQ(comfy16->config().dtype, DType::BF16);
  // Scaled float8: the decoder Linears keep e4m3 codes and their per-tensor scales; f32 compute equals transformers
  // with the dequantized weights.
  auto fp8 = LlmEncoder::load(data_path("qwen3_fp8_scaled.safetensors"), {.dtype = DType::F32});
  int64_t n_float8 = 0;
  for (const auto& [path, module] : fp8->named_modules())
    if (auto* linear = dynamic_cast<nn::Linear*>(module.get()); linear && linear->is_float8()) ++n_float8;
  EXPECT_EQ(n_float8, 6 * 7);
  expect_matches(*fp8, "qwen3fp8", {0, 1, 2, 3, 4, 5}, 6, 1e-5, "float8");
  // Quantizing the f32 folder on load (per tensor, wick's quantizer, which the fixture's script mirrors) gives the
  // file's codes and scales, hence the same outputs.
  auto quantized =
      LlmEncoder::load(data_path("qwen3"), {.dtype = DType::F32, .quantize_float8 = Float8Scaling::PerTensor});
  int64_t n_quantized = 0;
  for (const auto& [path, module] : quantized->named_modules())
    if (auto* linear = dynamic_cast<nn::Linear*>(module.get()); linear && linear->is_float8()) ++n_quantized;
  EXPECT_EQ(n_quantized, 6 * 7);
  expect_matches(*quantized, "qwen3fp8", {0, 1, 2, 3, 4, 5}, 6, 1e-5, "quantized on load");
  // Partial loading skips the float8 layers (and their scales) past the deepest one needed.
  auto fp8_partial = LlmEncoder::load(data_path("qwen3_fp8_scaled.safetensors"),
                                      {.output = LlmOutput::hidden_state(3), .dtype = DType::F32});
  EXPECT_EQ(fp8_partial->n_layers_built(), 3);
  EXPECT_LE(
      relative_to_max(run_case(*fp8_partial, "left", LlmOutput::hidden_state(3)), reference("qwen3fp8", "left", 3, 6)),
      1e-5);
}

// The f32 tensors of a transformers folder, renamed by `rename` (an empty name drops the tensor).
std::vector<std::pair<std::string, Tensor>> renamed(const std::string& folder,
                                                    const std::function<std::string(const std::string&)>& rename) {
  WeightSource source = WeightSource::open(data_path(folder));
  std::vector<std::pair<std::string, Tensor>> out;
  for (const std::string& name : source.names()) {
    std::string to = rename(name);
    if (!to.empty()) out.push_back({to, source.get(name)});
  }
  return out;
}

std::string replace_prefix(const std::string& name, const std::string& from, const std::string& to) {
  return name.rfind(from, 0) == 0 ? to + name.substr(from.size()) : name;
}

TEST(LlmEncoder, LoadsEveryPublishedNaming) {
  const fs::path dir = scratch("namings");
  struct Variant {
    const char* file;
    const char* family;  // fixture folder and reference prefix
    const char* from;    // prefix as saved by transformers 5.24 (the published layout)
    const char* to;      // prefix of the variant
    const char* config;  // config.json to copy beside it ("" none)
  };
  const Variant variants[] = {
      // transformers 5 in memory: Qwen2.5-VL and Mistral3 put the text model under model.language_model.
      {"qwen2vl_v5.safetensors", "qwen2vl", "model.", "model.language_model.", "qwen2vl"},
      {"mistral_v5.safetensors", "mistral", "language_model.model.", "model.language_model.", "mistral"},
      // A bare Qwen3Model state dict.
      {"qwen3_bare.safetensors", "qwen3", "model.", "", ""},
  };
  for (const Variant& v : variants) {
    const fs::path folder = dir / v.file;
    fs::create_directories(folder.parent_path() / (std::string(v.file) + ".d"));
    const fs::path file = folder.parent_path() / (std::string(v.file) + ".d") / v.file;
    // Vision tensors move under model.* too in transformers 5 (model.visual.*, model.vision_tower.*).
    save_safetensors(file.string(), renamed(v.family, [&](const std::string& name) {
                       if (name.rfind(v.from, 0) == 0) return replace_prefix(name, v.from, v.to);
                       return std::string(v.to).empty() ? std::string() : "model." + name;
                     }));
    if (std::string(v.config).size())
      fs::copy_file(data_path(std::string(v.config) + "/config.json"), file.parent_path() / "config.json");
    auto encoder = LlmEncoder::load(file.string(), {.dtype = DType::F32});
    const Family& f = *std::find_if(std::begin(kFamilies), std::end(kFamilies),
                                    [&](const Family& x) { return std::string(x.name) == v.family; });
    expect_matches(*encoder, f.name, f.stored, f.n_layers, 1e-5, v.file);
  }
}

TEST(LlmEncoder, TruncatedFilesAreNumberedFromTheStart) {
  // ComfyUI's pruned FLUX.2 Mistral: layers 0-29 and no final norm. hidden_states[30] is then layer 30's raw output
  // (not a final-normed last state), and indices from the end are refused (the real depth is unknown).
  const fs::path file = scratch("truncated") / "mistral_pruned.safetensors";
  save_safetensors(file.string(), renamed("mistral", [](const std::string& name) {
                     if (name.rfind("language_model.model.", 0) != 0) return std::string();
                     std::string local = name.substr(21);
                     if (local == "norm.weight" || local.rfind("layers.30.", 0) == 0) return std::string();
                     return "model." + local;  // ComfyUI's single-file names
                   }));
  WeightSource source = WeightSource::open(file.string());
  LlmConfig c = config_from_shapes(mapped_shapes(source, detect_weight_format(source)), source.path(),
                                   {.family = std::nullopt, .head_dim = 8});
  EXPECT_TRUE(c.truncated);
  EXPECT_EQ(c.n_layers, 30);
  auto encoder = LlmEncoder::load(
      file.string(), {.output = LlmOutput::stack({10, 20, 30}), .dtype = DType::F32, .head_dim = 8, .rope_theta = 1e9});
  EXPECT_EQ(encoder->n_layers_built(), 30);
  EXPECT_FALSE(encoder->has_final_norm());
  Tensor got = run_case(*encoder, "left", encoder->default_output());
  for (int64_t part = 0; part < 3; ++part)
    EXPECT_LE(
        relative_to_max(got.narrow(2, 16 * part, 16).contiguous(), reference("mistral", "left", 10 * (part + 1), 31)),
        1e-5)
        << part;
  EXPECT_THAT(error_of([&] { run_case(*encoder, "left", LlmOutput::last_hidden_state()); }),
              AllOf(HasSubstr("hidden_states[-1] counts from the end"), HasSubstr("truncated")));
  EXPECT_THAT(
      error_of([&] { LlmEncoder::load(file.string(), {.output = LlmOutput::hidden_state(-2), .head_dim = 8}); }),
      HasSubstr("number the layers from the start (0 .. 30)"));
}

TEST(LlmEncoder, RefusesWrongFamiliesSizesAndFiles) {
  const std::string qwen3 = data_path("qwen3");
  EXPECT_THAT(error_of([&] { LlmEncoder::load(qwen3, {.family = LlmFamily::Mistral}); }),
              AllOf(HasSubstr("model.safetensors.index.json"), HasSubstr("are a qwen3 model"), HasSubstr("q_norm"),
                    HasSubstr("not the mistral model required")));
  EXPECT_THAT(error_of([&] { LlmEncoder::load(data_path("qwen2vl"), {.family = LlmFamily::Qwen3}); }),
              AllOf(HasSubstr("are a qwen2 model"), HasSubstr("q_proj.bias")));
  // Qwen3-8B where Z-Image's Qwen3-4B is required: the hidden size decides.
  EXPECT_THAT(
      error_of([&] { LlmEncoder::load(qwen3, {.required_hidden_size = 2560}); }),
      AllOf(HasSubstr("model.safetensors.index.json"), HasSubstr("hidden size 32"), HasSubstr("2560 is required")));
  EXPECT_EQ(kind_of([&] { LlmEncoder::load(qwen3, {.required_hidden_size = 2560}); }), ErrorKind::Data);
  EXPECT_EQ(kind_of([&] { LlmEncoder::load(qwen3, {.family = LlmFamily::Qwen2}); }), ErrorKind::Data);
  EXPECT_EQ(kind_of([&] { LlmEncoder::load(qwen3, {.dtype = DType::F16}); }), ErrorKind::Config);
  EXPECT_EQ(kind_of([&] { LlmEncoder::load(qwen3, {.output = LlmOutput::hidden_state(9)}); }), ErrorKind::Config);

  const fs::path dir = scratch("broken");
  auto write = [&](const std::string& file, const std::function<std::string(const std::string&)>& rename) {
    save_safetensors((dir / file).string(), renamed("qwen3", rename));
    return (dir / file).string();
  };
  const std::string missing = write("missing.safetensors", [](const std::string& n) {
    return n == "model.layers.3.self_attn.k_proj.weight" ? std::string() : n;
  });
  EXPECT_THAT(
      error_of([&] { LlmEncoder::load(missing); }),
      AllOf(HasSubstr("missing.safetensors"), HasSubstr("layers.3.self_attn.k_proj.weight"), HasSubstr("is missing")));
  const std::string extra = write("extra.safetensors", [](const std::string& n) {
    return n == "model.layers.2.mlp.up_proj.weight" ? std::string("model.layers.2.mlp.extra_proj.weight") : n;
  });
  EXPECT_THAT(error_of([&] { LlmEncoder::load(extra); }), HasSubstr("extra.safetensors"));
  EXPECT_THAT(error_of([&] { LlmEncoder::load((dir / "none.safetensors").string()); }), HasSubstr("none.safetensors"));
  const std::string vision_only = write("vision.safetensors", [](const std::string& n) {
    return n.rfind("model.layers.", 0) == 0 ? "visual." + n.substr(6) : n;
  });
  EXPECT_THAT(error_of([&] { LlmEncoder::load(vision_only); }),
              AllOf(HasSubstr("vision.safetensors"), HasSubstr("none of the known formats")));
}

TEST(LlmEncoder, RealSizesBuildWithoutWeights) {
  // The real configs validate and give the expected shapes (nothing allocated: shapes only).
  std::map<std::string, Shape> q = parameter_shapes(qwen3_4b(), 36, true);
  EXPECT_EQ(q.at("layers.35.self_attn.q_proj.weight"), (Shape{4096, 2560}));
  EXPECT_EQ(q.at("layers.35.self_attn.k_norm.weight"), (Shape{128}));
  std::map<std::string, Shape> vl = parameter_shapes(qwen2_5_vl_7b(), 28, true);
  EXPECT_EQ(vl.at("layers.0.self_attn.k_proj.bias"), (Shape{512}));
  EXPECT_EQ(vl.count("layers.0.self_attn.q_norm.weight"), 0u);
  std::map<std::string, Shape> m = parameter_shapes(mistral_small_3(), 40, true);
  EXPECT_EQ(m.at("layers.39.self_attn.o_proj.weight"), (Shape{5120, 4096}));
  EXPECT_EQ(config_from_shapes(m, "mistral").family, LlmFamily::Mistral);
  EXPECT_EQ(config_from_shapes(m, "mistral").n_heads, 32);
  EXPECT_EQ(config_from_shapes(vl, "vl").n_kv_heads, 4);
  EXPECT_DOUBLE_EQ(config_from_shapes(m, "mistral").rope_theta, 1e9);
  for (const LlmConfig& c : {qwen3_4b(), qwen3_8b(), qwen2_5_vl_7b(), mistral_small_3()}) EXPECT_NO_THROW(validate(c));
}

}  // namespace
}  // namespace wick::llm
