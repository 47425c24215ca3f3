// umT5 (Wan 2.x's text encoder architecture) through models/t5 against transformers 5.24.0's UMT5EncoderModel on a
// tiny random model: fixtures from tests/reference/make_umt5_fixtures.py in tests/data/umt5 (d_model 64, 4 heads of
// 16, d_ff 96, 2 blocks each with its own relative_attention_bias [32, 4], vocab 384). Input: ids [2, 48], the second
// prompt 30 tokens then padding; relative distances reach 47, past the 8 exact buckets.
//
// Metric, per tensor: max_i |wick_i - ref_i| / max_i |ref_i|.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/autograd/grad_mode.h"
#include "models/t5/t5_blocks.h"
#include "models/t5/t5_encoder.h"
#include "models/t5/t5_weights.h"
#include "runtime/safetensors.h"
#include "tests/test_data.h"

namespace wick::t5 {
namespace {

std::string data_path(const std::string& name) { return wick::testing::test_data_dir() + "/umt5/" + name; }

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

Tensor run(T5Encoder& encoder, bool with_mask) {
  autograd::NoGradGuard no_grad;
  return encoder.forward(cases().get("pad.ids"), with_mask ? cases().get("pad.mask") : Tensor()).to(DType::F32);
}

TEST(Umt5Encoder, ConfigHasABiasTableInEveryBlock) {
  WeightSource source = WeightSource::open(data_path("model.safetensors"));
  T5Config c = config_from_shapes(mapped_shapes(source, detect_weight_format(source)));
  EXPECT_TRUE(c.bias_per_block);
  EXPECT_EQ(c.vocab_size, 384);
  EXPECT_EQ(c.d_model, 64);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.d_kv, 16);
  EXPECT_EQ(c.d_ff, 96);
  EXPECT_EQ(c.n_layers, 2);
  int64_t n = 0;
  for (const auto& [name, shape] : parameter_shapes(c)) n += numel(shape);
  EXPECT_EQ(n, 94784);  // UMT5EncoderModel's parameter count
  EXPECT_EQ(parameter_shapes(c).at("encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight"),
            (Shape{32, 4}));
  // umt5-xxl (Wan): 24 blocks of 4096, 64 heads of 64, d_ff 10240, 256,384 rows.
  T5Config xxl{.vocab_size = 256384, .bias_per_block = true};
  n = 0;
  for (const auto& [name, shape] : parameter_shapes(xxl)) n += numel(shape);
  EXPECT_EQ(n, 5680910336);  // UMT5EncoderModel with the umt5-xxl config on the meta device
}

TEST(Umt5Encoder, MatchesTransformersInF32AndBf16) {
  auto f32 = T5Encoder::load(data_path("model.safetensors"), {.dtype = DType::F32});
  EXPECT_TRUE(f32->config().bias_per_block);
  const double masked = relative_to_max(run(*f32, true), cases().get("pad.masked"));
  const double unmasked = relative_to_max(run(*f32, false), cases().get("pad.unmasked"));
  EXPECT_LE(masked, 1e-5);
  EXPECT_LE(unmasked, 1e-5);
  // The mask and the per-block tables both matter: the masked output is far from the unmasked reference, and with
  // block 0's table in block 1 too (T5 v1.1's sharing) the output moves far from transformers'.
  EXPECT_GT(relative_to_max(run(*f32, true), cases().get("pad.unmasked")), 1e-2);
  auto shared = T5Encoder::load(data_path("model.safetensors"), {.dtype = DType::F32});
  T5Stack& stack = static_cast<T5Stack&>(*shared->child("encoder"));
  auto table = [&](int64_t n) -> Tensor& {
    return static_cast<T5Embedding&>(*stack.block(n).attention().child("relative_attention_bias")).weight_;
  };
  table(1) = table(0);
  EXPECT_GT(relative_to_max(run(*shared, true), cases().get("pad.masked")), 1e-2);

  auto bf16 = T5Encoder::load(data_path("model.safetensors"), {.dtype = DType::BF16});
  const std::vector<float> theirs = cases().get("bf16_rel_err").to_vector<float>();
  EXPECT_LE(relative_to_max(run(*bf16, true), cases().get("pad.masked")), theirs[0]);
  EXPECT_LE(relative_to_max(run(*bf16, false), cases().get("pad.unmasked")), theirs[1]);
}

// transformers' names -> Wan's (or, with `kijai`, the wrapper's attention. / final_norm spelling): MODELS2 A3.4.
std::string wan_name(const std::string& name, bool kijai) {
  if (name == "shared.weight") return "token_embedding.weight";
  if (name == "encoder.final_layer_norm.weight") return kijai ? "final_norm.weight" : "norm.weight";
  const std::string block = "encoder.block.";
  const size_t dot = name.find('.', block.size());
  const std::string n = name.substr(block.size(), dot - block.size()), rest = name.substr(dot + 1);
  const std::string attention = kijai ? ".attention." : ".attn.";
  const std::pair<const char*, std::string> map[] = {
      {"layer.0.layer_norm.weight", ".norm1.weight"},
      {"layer.0.SelfAttention.q.weight", attention + "q.weight"},
      {"layer.0.SelfAttention.k.weight", attention + "k.weight"},
      {"layer.0.SelfAttention.v.weight", attention + "v.weight"},
      {"layer.0.SelfAttention.o.weight", attention + "o.weight"},
      {"layer.0.SelfAttention.relative_attention_bias.weight", ".pos_embedding.embedding.weight"},
      {"layer.1.layer_norm.weight", ".norm2.weight"},
      {"layer.1.DenseReluDense.wi_0.weight", ".ffn.gate.0.weight"},
      {"layer.1.DenseReluDense.wi_1.weight", ".ffn.fc1.weight"},
      {"layer.1.DenseReluDense.wo.weight", ".ffn.fc2.weight"},
  };
  for (const auto& [from, to] : map)
    if (rest == from) return "blocks." + n + to;
  ADD_FAILURE() << "unexpected tensor " << name;
  return name;
}

TEST(Umt5Encoder, LoadsWansNames) {
  SafetensorsFile file = SafetensorsFile::open(data_path("model.safetensors"));
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / ("wick_umt5_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (bool kijai : {false, true}) {
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const std::string& name : file.names()) tensors.push_back({wan_name(name, kijai), file.get(name)});
    const std::string path = (dir / (kijai ? "kijai.safetensors" : "wan.safetensors")).string();
    save_safetensors(path, tensors);
    WeightSource source = WeightSource::open(path);
    EXPECT_EQ(detect_weight_format(source).format.name, "wan");
    auto encoder = T5Encoder::load(path, {.dtype = DType::F32});
    EXPECT_TRUE(encoder->config().bias_per_block);
    EXPECT_LE(relative_to_max(run(*encoder, true), cases().get("pad.masked")), 1e-5) << path;
  }
}

}  // namespace
}  // namespace wick::t5
