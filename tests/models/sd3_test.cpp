// The SD3 / SD3.5 MMDiT (models/sd3) against diffusers 0.42.1 on tiny random models: fixtures from
// tests/reference/make_sd3_fixtures.py in tests/data/sd3 (hidden 32, 4 heads of 8, patch 2, 16 latent
// channels, context 32, pooled 64, a 6x6 position table): medium (3 blocks, attn2 in 0 and 1, QK norm),
// large (2 blocks, QK norm), sd3 (2 blocks, neither); latents 8x8 and 6x10 (cropped from the table) and
// 12x12 (the whole table), 7 text tokens; f32. The script also checks its SAI-named weights against
// Stability AI's own code (mmditx.py, sd3_impls.py: <= 3.5e-7) and against diffusers' own SAI converter
// (bitwise), so matching diffusers here is matching SAI.
//
// Metric, per tensor: max_i |wick_i - ref_i| / max_i |ref_i|.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "engine/autograd/backward.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_loss.h"
#include "models/nn/adapters.h"
#include "models/registry.h"
#include "models/sd3/sd3.h"
#include "models/sd3/sd3_blocks.h"
#include "models/weights/weight_source.h"
#include "runtime/ops/copy.h"
#include "runtime/ops/creation.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/test_data.h"

namespace wick::sd3 {
namespace {

using ::testing::HasSubstr;
using wick::testing::error_of;

const char* const kVariants[] = {"medium", "large", "sd3"};
const char* const kLatents[] = {"square", "wide", "full"};

SafetensorsFile open_fixture(const std::string& name) {
  return SafetensorsFile::open(wick::testing::test_data_dir() + "/sd3/" + name);
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

std::map<std::string, Shape> file_shapes(const SafetensorsFile& file) {
  std::map<std::string, Shape> out;
  for (const std::string& name : file.names()) out[name] = file.info(name).shape;
  return out;
}

// The tiny model of a fixture, its weights loaded from the SAI-named file (zero-copy in f32).
struct Loaded {
  SafetensorsFile file;
  std::shared_ptr<MMDiT> model;
};

Loaded load_model(const std::string& variant, DType dtype = DType::F32) {
  SafetensorsFile file = open_fixture(variant + "_sai.safetensors");
  Sd3Config c = config_from_shapes(file_shapes(file), 8);  // the sd3 variant has no ln_q to give the head width
  c.dtype = dtype;
  c.initialize = false;
  auto model = std::make_shared<MMDiT>(c);
  load_parameters(*model, file);
  return {std::move(file), model};
}

Tensor run(MMDiT& model, const SafetensorsFile& inputs, const std::string& latents, DType dtype = DType::F32) {
  return model.forward(inputs.get("latents_" + latents).to(dtype), inputs.get("sigma"),
                       inputs.get("context").to(dtype), inputs.get("pooled").to(dtype));
}

TEST(Sd3Config, FromShapesOfTheThreeVariants) {
  for (const char* variant : kVariants) {
    SCOPED_TRACE(variant);
    SafetensorsFile file = open_fixture(std::string(variant) + "_sai.safetensors");
    const std::map<std::string, Shape> shapes = file_shapes(file);
    Sd3Config c = config_from_shapes(shapes, 8);
    const std::string name = variant;
    EXPECT_EQ(c.patch_size, 2);
    EXPECT_EQ(c.in_channels, 16);
    EXPECT_EQ(c.out_channels, 16);
    EXPECT_EQ(c.hidden_size, 32);
    EXPECT_EQ(c.num_heads, 4);
    EXPECT_EQ(c.depth, name == "medium" ? 3 : 2);
    EXPECT_EQ(c.context_dim, 32);
    EXPECT_EQ(c.pooled_dim, 64);
    EXPECT_EQ(c.pos_embed_max_size, 6);
    EXPECT_EQ(c.mlp_hidden(), 128);
    EXPECT_EQ(c.qk_norm, name != "sd3");
    EXPECT_EQ(c.dual_attention_layers, name == "medium" ? std::vector<int64_t>({0, 1}) : std::vector<int64_t>{});
    // The file holds exactly the model's parameters, under the same names and shapes.
    EXPECT_EQ(parameter_shapes(c), shapes);
    c.dtype = DType::F32;
    MMDiT model(c);
    std::map<std::string, Shape> model_shapes;
    for (auto& [param, tensor] : model.named_parameters()) model_shapes[param] = tensor.shape();
    EXPECT_EQ(model_shapes, shapes);
    EXPECT_FALSE(autograd::requires_grad(model.parameter("pos_embed")));  // a buffer in SAI and diffusers
  }
  // With QK norm the head width comes from ln_q (no hint needed); without it SAI's 64 is assumed, which does not
  // divide the tiny sd3's hidden 32.
  EXPECT_EQ(config_from_shapes(file_shapes(open_fixture("large_sai.safetensors"))).num_heads, 4);
  EXPECT_THAT(error_of([] { config_from_shapes(file_shapes(open_fixture("sd3_sai.safetensors"))); }),
              HasSubstr("not a multiple of the head width 64"));
}

TEST(Sd3Config, RealSizeNamesAndCounts) {
  struct Expected {
    Sd3Config config;
    const char* name;
    int64_t n_parameters;  // diffusers' SD3Transformer2DModel parameters + its pos_embed buffer (as in the file)
  };
  for (const Expected& e : {Expected{Sd3Config::large(), "SD3.5 Large", 8146280768},
                            Expected{Sd3Config::medium(), "SD3.5 Medium", 2469663936}}) {
    SCOPED_TRACE(e.name);
    std::map<std::string, Shape> shapes = parameter_shapes(e.config);
    int64_t n = 0;
    for (auto& [name, shape] : shapes) n += numel(shape);
    EXPECT_EQ(n, e.n_parameters);
    EXPECT_EQ(variant_name(e.config), e.name);
    const Sd3Config back = config_from_shapes(shapes);
    EXPECT_EQ(back.depth, e.config.depth);
    EXPECT_EQ(back.num_heads, e.config.num_heads);
    EXPECT_EQ(back.pos_embed_max_size, e.config.pos_embed_max_size);
    EXPECT_EQ(back.dual_attention_layers, e.config.dual_attention_layers);
  }
  const std::map<std::string, Shape> large = parameter_shapes(Sd3Config::large());
  EXPECT_EQ(large.at("x_embedder.proj.weight"), (Shape{2432, 16, 2, 2}));
  EXPECT_EQ(large.at("pos_embed"), (Shape{1, 192 * 192, 2432}));
  EXPECT_EQ(large.at("context_embedder.weight"), (Shape{2432, 4096}));
  EXPECT_EQ(large.at("y_embedder.mlp.0.weight"), (Shape{2432, 2048}));
  EXPECT_EQ(large.at("joint_blocks.0.x_block.attn.ln_q.weight"), (Shape{64}));
  EXPECT_EQ(large.at("joint_blocks.37.context_block.adaLN_modulation.1.weight"), (Shape{2 * 2432, 2432}));
  EXPECT_EQ(large.count("joint_blocks.37.context_block.attn.proj.weight"), 0u);
  EXPECT_EQ(large.at("final_layer.linear.weight"), (Shape{64, 2432}));
  const std::map<std::string, Shape> medium = parameter_shapes(Sd3Config::medium());
  EXPECT_EQ(medium.at("joint_blocks.12.x_block.adaLN_modulation.1.weight"), (Shape{9 * 1536, 1536}));
  EXPECT_EQ(medium.at("joint_blocks.13.x_block.adaLN_modulation.1.weight"), (Shape{6 * 1536, 1536}));
  EXPECT_EQ(medium.count("joint_blocks.12.x_block.attn2.qkv.weight"), 1u);
  EXPECT_EQ(medium.count("joint_blocks.13.x_block.attn2.qkv.weight"), 0u);
  EXPECT_EQ(variant_name(Sd3Config{.hidden_size = 1536, .num_heads = 24, .depth = 24, .qk_norm = false}), "SD3 Medium");
}

TEST(Sd3Config, BrokenShapeMapsAreDataErrors) {
  const std::map<std::string, Shape> good = file_shapes(open_fixture("medium_sai.safetensors"));
  auto message = [](const std::map<std::string, Shape>& shapes, int64_t head_dim = 0) {
    try {
      config_from_shapes(shapes, head_dim);
    } catch (const WickError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Data) << e.what();
      return std::string(e.what());
    }
    ADD_FAILURE() << "no error";
    return std::string();
  };
  auto without = [&](const std::string& name) {
    auto s = good;
    s.erase(name);
    return s;
  };
  auto with = [&](const std::string& name, Shape shape) {
    auto s = good;
    s[name] = std::move(shape);
    return s;
  };
  EXPECT_THAT(message(without("x_embedder.proj.weight")), HasSubstr("'x_embedder.proj.weight' is missing"));
  EXPECT_THAT(message(without("joint_blocks.1.context_block.mlp.fc2.bias")),
              HasSubstr("'joint_blocks.1.context_block.mlp.fc2.bias' is missing"));
  EXPECT_THAT(message(with("pos_embed", {1, 35, 32})), HasSubstr("is not [1, max², 32]"));
  EXPECT_THAT(message(with("joint_blocks.2.x_block.mlp.fc2.weight", {32, 100})),
              HasSubstr("'joint_blocks.2.x_block.mlp.fc2.weight' has shape [32, 100]"));
  EXPECT_THAT(message(good, 16), HasSubstr("model.head_dim is 16 but joint_blocks.0.x_block.attn.ln_q.weight gives 8"));
  // Dual attention: an attn2 tensor without attn2.qkv (SAI's loader reads attn2 from ln_k), attn2 with a 6-way
  // modulation, and a 9-way modulation without attn2: refused as inconsistent.
  EXPECT_THAT(message(without("joint_blocks.0.x_block.attn2.qkv.weight")),
              HasSubstr("dual attention (attn2) of block 0 is inconsistent"));
  EXPECT_THAT(message(with("joint_blocks.1.x_block.adaLN_modulation.1.weight", {6 * 32, 32})),
              HasSubstr("the file's attn2 is inconsistent"));
  auto no_attn2 = good;
  for (auto it = no_attn2.begin(); it != no_attn2.end();)
    it = it->first.rfind("joint_blocks.1.x_block.attn2.", 0) == 0 ? no_attn2.erase(it) : std::next(it);
  EXPECT_THAT(message(no_attn2), HasSubstr("'joint_blocks.1.x_block.adaLN_modulation.1.bias' has shape [288]"));
  EXPECT_THAT(message(no_attn2), HasSubstr("the file's attn2 is inconsistent"));
  EXPECT_THAT(message(with("joint_blocks.0.x_block.extra", {1})), HasSubstr("'joint_blocks.0.x_block.extra'"));
  std::map<std::string, Shape> prefixed;
  for (auto& [name, shape] : good) prefixed["model.diffusion_model." + name] = shape;
  EXPECT_THAT(message(prefixed), HasSubstr("strip that prefix"));
  EXPECT_THAT(message({{"transformer_blocks.0.attn.to_q.weight", {32, 32}}}), HasSubstr("diffusers'"));
}

TEST(Sd3Positions, CropIsTheCentreWindowAndUnpatchifyIsPQC) {
  // A 5x5 table of 2-wide rows whose values name their (row, column).
  std::vector<float> values;
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 5; ++c) values.insert(values.end(), {static_cast<float>(r), static_cast<float>(c)});
  Tensor table = Tensor::from_vector<float>(values, {1, 25, 2});
  // 2 x 3 patches: top (5 - 2) / 2 = 1, left (5 - 3) / 2 = 1.
  EXPECT_EQ(crop_position_table(table, 5, 2, 3).to_vector<float>(),
            (std::vector<float>{1, 1, 1, 2, 1, 3, 2, 1, 2, 2, 2, 3}));
  // 4 x 1: top 0, left 2.
  EXPECT_EQ(crop_position_table(table, 5, 4, 1).to_vector<float>(), (std::vector<float>{0, 2, 1, 2, 2, 2, 3, 2}));
  EXPECT_EQ(crop_position_table(table, 5, 5, 5).to_vector<float>(), values);
  EXPECT_THAT(error_of([&] { crop_position_table(table, 5, 6, 2); }),
              HasSubstr("a latent of 6x2 patches does not fit the position table of 5x5"));
  // Tokens [1, h·w = 2, p·p·C = 8] (p = 2, C = 2) with value 100·token + feature: out[c, 2·i + p, 2·j + q] =
  // token (i, j), feature (p·2 + q)·2 + c.
  std::vector<float> tokens;
  for (int t = 0; t < 2; ++t)
    for (int f = 0; f < 8; ++f) tokens.push_back(static_cast<float>(100 * t + f));
  Tensor image = unpatchify(Tensor::from_vector<float>(tokens, {1, 2, 8}), 2, 1, 2);
  EXPECT_EQ(image.shape(), (Shape{1, 2, 2, 4}));
  EXPECT_EQ(image.to_vector<float>(),
            (std::vector<float>{0, 2, 100, 102, 4, 6, 104, 106, 1, 3, 101, 103, 5, 7, 105, 107}));
}

TEST(Sd3Forward, MatchesDiffusersInF32) {
  for (const char* variant : kVariants) {
    SCOPED_TRACE(variant);
    Loaded loaded = load_model(variant);
    // Loading is zero-copy and frozen: the parameters view the file's mapping.
    Tensor w = loaded.model->parameter("joint_blocks.0.x_block.attn.qkv.weight");
    auto* begin = loaded.file.mapped_data();
    auto* data = static_cast<const uint8_t*>(w.data());
    EXPECT_TRUE(data >= begin && data < begin + loaded.file.mapped_bytes());
    EXPECT_FALSE(autograd::requires_grad(w));
    SafetensorsFile file = open_fixture(std::string(variant) + "_case.safetensors");
    for (const char* latents : kLatents) {
      SCOPED_TRACE(latents);
      Tensor out = run(*loaded.model, file, latents);
      EXPECT_EQ(out.dtype(), DType::F32);
      const double error = relative_to_max(out, file.get(std::string("output_") + latents));
      std::printf("[%s, %s latents %s] f32 forward vs diffusers: max relative error %.3g\n", variant, latents,
                  shape_string(file.get(std::string("latents_") + latents).shape()).c_str(), error);
      EXPECT_LE(error, 1e-5);
    }
  }
}

// bf16 model and inputs against diffusers' bf16 forward (output_bf16_*) and the f32 one. diffusers does not round
// SD3's timestep to bf16 (unlike Flux's), so the two bf16 evaluations differ only in their rounding order.
// Measured (relative to max |output|), worst of the three latents:
//   wick bf16 vs diffusers bf16:   medium 7.8e-3, large 9.6e-3, sd3 8.8e-3
//   wick bf16 vs f32:              medium 1.2e-2, large 1.8e-2, sd3 1.4e-2
//   diffusers' bf16 vs its f32:    medium 1.1e-2, large 2.1e-2, sd3 1.2e-2
// Two bf16 evaluations with different rounding orders, each about 1e-2 from f32: tolerance 4e-2.
TEST(Sd3Forward, Bfloat16AgainstDiffusers) {
  for (const char* variant : kVariants) {
    SCOPED_TRACE(variant);
    Loaded loaded = load_model(variant, DType::BF16);
    Loaded f32_model = load_model(variant);
    SafetensorsFile file = open_fixture(std::string(variant) + "_case.safetensors");
    double vs_bf16 = 0, vs_f32 = 0, theirs = 0;
    for (const char* latents : kLatents) {
      Tensor out = run(*loaded.model, file, latents, DType::BF16);
      EXPECT_EQ(out.dtype(), DType::BF16);
      vs_bf16 = std::max(vs_bf16, relative_to_max(out, file.get(std::string("output_bf16_") + latents)));
      vs_f32 = std::max(vs_f32, relative_to_max(out, file.get(std::string("output_") + latents)));
      theirs = std::max(theirs, relative_to_max(file.get(std::string("output_bf16_") + latents),
                                                file.get(std::string("output_") + latents)));
      // Mixed precision: f32 parameters, bf16 latents and conditioning: computes in bf16 as well.
      Tensor mixed = run(*f32_model.model, file, latents, DType::BF16);
      EXPECT_EQ(mixed.dtype(), DType::BF16);
      EXPECT_LE(relative_to_max(mixed, file.get(std::string("output_") + latents)), 4e-2);
    }
    std::printf("[%s] bf16 forward, worst of 3 latents: vs diffusers bf16 %.3g, vs f32 %.3g; diffusers' bf16 vs its "
                "f32 %.3g\n",
                variant, vs_bf16, vs_f32, theirs);
    EXPECT_LE(vs_bf16, 4e-2);
    EXPECT_LE(vs_f32, 4e-2);
  }
}

// LoRA (rank 4, alpha 8) on every Linear of the blocks, as the fixture's PEFT adapters merged per SAI module
// (the fused qkv share one lora_down; lora_up is the row concatenation, the last block's context modulation in
// SAI's (shift, scale) order).
struct LoraRun {
  double loss = 0;
  std::vector<std::pair<std::string, Tensor>> grads;  // lora_down / lora_up (/ magnitude) per module path
  Tensor output;
  double forward_backward_ms = 0;
};

std::vector<std::string> lora_paths(const SafetensorsFile& file) {
  std::vector<std::string> paths;
  const std::string prefix = "sai.", suffix = ".lora_down";
  for (const std::string& name : file.names())
    if (name.rfind(prefix, 0) == 0 && name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      paths.push_back(name.substr(prefix.size(), name.size() - prefix.size() - suffix.size()));
  std::sort(paths.begin(), paths.end());
  return paths;
}

void copy_into_slot(Tensor& slot, const Tensor& value) {
  autograd::detach(slot).copy_from(value.reshape(slot.shape()));
}

LoraRun run_lora(const std::string& kind, bool checkpointing) {
  SafetensorsFile file = open_fixture("medium_" + kind + "_case.safetensors");
  Loaded loaded = load_model("medium");
  std::vector<std::string> paths = lora_paths(file);
  EXPECT_EQ(paths.size(), 31u);  // 7 per block, attn2 qkv/proj in 2 blocks, context proj/fc1/fc2 in 2
  EXPECT_EQ(file.get("rank").item(), 4.0);
  EXPECT_EQ(file.get("alpha").item(), 8.0);
  nn::AdapterReport report = nn::apply_adapters(
      *loaded.model, {.type = kind, .patterns = paths,
                      .options = {.rank = 4, .alpha = 8.0, .dora_axis = nn::DoraAxis::Output}});
  std::vector<std::string> wrapped = report.wrapped;
  std::sort(wrapped.begin(), wrapped.end());
  EXPECT_EQ(wrapped, paths);
  for (auto& [path, adapter] : nn::find_adapters(*loaded.model)) {
    copy_into_slot(adapter->down_weight(), file.get("sai." + path + ".lora_down"));
    copy_into_slot(adapter->up_weight(), file.get("sai." + path + ".lora_up"));
    if (auto dora = std::dynamic_pointer_cast<nn::DoRALinear>(adapter))
      copy_into_slot(dora->magnitude(), file.get("sai." + path + ".magnitude"));
  }
  loaded.model->set_gradient_checkpointing(checkpointing);
  LoraRun result;
  auto start = std::chrono::steady_clock::now();
  result.output = run(*loaded.model, file, "square");
  Tensor loss = autograd::mse_loss(result.output, file.get("target"));
  result.loss = loss.item();
  autograd::GradientStore grads = autograd::backward(loss);
  result.forward_backward_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  for (auto& [path, adapter] : nn::find_adapters(*loaded.model)) {
    result.grads.emplace_back(path + ".lora_down", grads.get(adapter->down_weight()));
    result.grads.emplace_back(path + ".lora_up", grads.get(adapter->up_weight()));
    if (auto dora = std::dynamic_pointer_cast<nn::DoRALinear>(adapter))
      result.grads.emplace_back(path + ".magnitude", grads.get(dora->magnitude()));
  }
  EXPECT_EQ(grads.size(), result.grads.size()) << "only the adapters get gradients";
  return result;
}

TEST(Sd3Lora, ForwardLossAndGradientsMatchPeft) {
  for (const std::string kind : {"lora", "dora"}) {
    SCOPED_TRACE(kind);
    SafetensorsFile file = open_fixture("medium_" + kind + "_case.safetensors");
    LoraRun r = run_lora(kind, false);
    const double out_error = relative_to_max(r.output, file.get("output"));
    const double loss_error = std::fabs(r.loss - file.get("loss").item()) / std::fabs(file.get("loss").item());
    double worst = 0;
    std::string worst_name;
    for (auto& [name, grad] : r.grads) {
      ASSERT_TRUE(grad.defined()) << name << " got no gradient";
      const Tensor want = file.get("grad.sai." + name);
      const double error = relative_to_max(grad.reshape(want.shape()), want);
      EXPECT_LE(error, 1e-4) << name;
      if (error > worst) worst = error, worst_name = name;
    }
    std::printf("[medium %s] vs PEFT: output %.3g, loss %.9g vs %.9g (%.3g), worst of %zu adapter gradients %.3g "
                "(%s); forward + backward %.2f ms\n",
                kind.c_str(), out_error, r.loss, file.get("loss").item(), loss_error, r.grads.size(), worst,
                worst_name.c_str(), r.forward_backward_ms);
    EXPECT_LE(out_error, 1e-5);
    EXPECT_LE(loss_error, 1e-5);
  }
}

TEST(Sd3Lora, PresetsWrapTheirModules) {
  const Architecture& arch = find_architecture("sd3.5");
  EXPECT_EQ(arch.name(), "sd3");
  EXPECT_EQ(&find_architecture("mmdit"), &arch);
  EXPECT_EQ(&find_architecture("SD35"), &arch);
  EXPECT_EQ(arch.default_preset(), "all");
  auto wrapped = [&](const std::string& preset) {
    Loaded loaded = load_model("medium");
    std::vector<std::string> out =
        nn::apply_adapters(*loaded.model, {.patterns = arch.targets({preset}), .options = {.rank = 4}}).wrapped;
    std::sort(out.begin(), out.end());
    return out;
  };
  // all = every Linear of the blocks, adaLN included: exactly the fixture's 31 modules.
  EXPECT_EQ(wrapped("all"), lora_paths(open_fixture("medium_lora_case.safetensors")));
  const std::vector<std::string> attention = wrapped("attention");
  // x qkv + proj in 3 blocks, context qkv in 3 and proj in 2 (none in the pre-only block), attn2 qkv + proj in 2.
  EXPECT_EQ(attention.size(), 3u * 2 + 3u + 2u + 2u * 2);
  EXPECT_THAT(attention, ::testing::Contains("joint_blocks.1.x_block.attn2.qkv"));
  EXPECT_THAT(attention, ::testing::Contains("joint_blocks.2.context_block.attn.qkv"));
  EXPECT_EQ(wrapped("attention_mlp").size(), attention.size() + 3u * 2 + 2u * 2);  // fc1, fc2: x in 3, context in 2
}

TEST(Sd3Lora, GradientCheckpointingIsBitwiseTheSame) {
  LoraRun plain = run_lora("lora", false), checkpointed = run_lora("lora", true);
  EXPECT_EQ(plain.loss, checkpointed.loss);
  EXPECT_EQ(plain.output.to_vector<float>(), checkpointed.output.to_vector<float>());
  ASSERT_EQ(plain.grads.size(), checkpointed.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i)
    EXPECT_EQ(plain.grads[i].second.to_vector<float>(), checkpointed.grads[i].second.to_vector<float>())
        << plain.grads[i].first;
  std::printf("[medium LoRA] tiny model, batch 2, 16 image + 7 text tokens: forward + backward %.2f ms, with "
              "gradient checkpointing %.2f ms\n",
              plain.forward_backward_ms, checkpointed.forward_backward_ms);
}

TEST(Sd3Forward, BadInputsAreClearErrors) {
  Loaded medium = load_model("medium");
  SafetensorsFile file = open_fixture("medium_case.safetensors");
  const Tensor latents = file.get("latents_square"), sigma = file.get("sigma"), context = file.get("context"),
               pooled = file.get("pooled");
  MMDiT& m = *medium.model;
  EXPECT_THAT(error_of([&] { m.forward(latents.narrow(2, 0, 7).contiguous(), sigma, context, pooled); }),
              HasSubstr("multiples of the patch size 2"));
  EXPECT_THAT(error_of([&] { m.forward(latents.narrow(1, 0, 4).contiguous(), sigma, context, pooled); }),
              HasSubstr("this model takes 16"));
  EXPECT_THAT(error_of([&] { m.forward(latents, sigma, context.narrow(2, 0, 31).contiguous(), pooled); }),
              HasSubstr("is not [2, L, 32]"));
  EXPECT_THAT(error_of([&] { m.forward(latents, sigma, context, pooled.narrow(1, 0, 63).contiguous()); }),
              HasSubstr("is not [2, 64]"));
  EXPECT_THAT(error_of([&] { m.forward(latents, sigma.narrow(0, 0, 1).contiguous(), context, pooled); }),
              HasSubstr("timesteps"));
  // Larger than the 6x6 table: a Config error naming the limit (also before training, check_latent_size).
  Tensor big = zeros({2, 16, 14, 8}, DType::F32);
  const std::string too_big = error_of([&] { m.forward(big, sigma, context, pooled); });
  EXPECT_THAT(too_big, HasSubstr("7x4 patches"));
  EXPECT_THAT(too_big, HasSubstr("position table of 6x6 patches"));
  EXPECT_THAT(error_of([&] { m.check_latent_size(12, 14); }), HasSubstr("at most 12x12 latents"));
  EXPECT_THAT(error_of([&] { m.check_latent_size(12, 9); }), HasSubstr("multiples of the patch size 2"));
  m.check_latent_size(12, 4);  // non-square, within the table
  EXPECT_EQ(m.summary(), "SD3 (MMDiT) (3 joint blocks, hidden 32, 4 heads, QK norm, attn2 in 2 blocks, f32)");
}

}  // namespace
}  // namespace wick::sd3
