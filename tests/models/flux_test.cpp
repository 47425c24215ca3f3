// Flux.1 transformer (models/flux) against diffusers 0.42.1 on tiny random dev and schnell models:
// fixtures from tests/reference/make_flux_fixtures.py in tests/data/flux (hidden 32, 2 heads of 16,
// 2 double + 2 single blocks, axes_dim [4, 6, 6], context 32, pooled 24, 4 latent channels; latents
// [2, 4, 6, 10], 7 text tokens; f32). The script also checks its BFL-named weights against Black
// Forest Labs' own code (3.3e-7 dev, 2.2e-7 schnell), so matching diffusers here is matching BFL.
//
// Metric, per tensor: max_i |wick_i - ref_i| / max_i |ref_i|.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <set>
#include <string>

#include "engine/autograd/backward.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_loss.h"
#include "models/flux/flux.h"
#include "models/nn/adapters.h"
#include "runtime/ops/copy.h"
#include "runtime/safetensors.h"
#include "runtime/ops/elementwise.h"
#include "tests/error_of.h"
#include "tests/test_data.h"

namespace wick::flux {
namespace {

using ::testing::HasSubstr;
using wick::testing::error_of;

const std::vector<int64_t> kTinyAxes = {4, 6, 6};

SafetensorsFile open_fixture(const std::string& name) {
  return SafetensorsFile::open(wick::testing::test_data_dir() + "/flux/" + name);
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

// The tiny model of a fixture, its weights loaded from the BFL-named file (zero-copy in f32).
struct Loaded {
  SafetensorsFile file;
  std::shared_ptr<FluxTransformer> model;
};

Loaded load_model(const std::string& variant, DType dtype = DType::F32) {
  SafetensorsFile file = open_fixture(variant + "_bfl.safetensors");
  FluxConfig c = config_from_shapes(tensor_shapes(file), kTinyAxes);
  c.dtype = dtype;
  auto model = std::make_shared<FluxTransformer>(c);
  load_parameters(*model, file);
  return {std::move(file), model};
}

// The fixture's inputs, cast to `dtype`.
struct Inputs {
  Tensor latents, timesteps, context, pooled, guidance;
};

Inputs case_inputs(const SafetensorsFile& file, DType dtype = DType::F32) {
  Inputs in{file.get("latents").to(dtype), file.get("timestep"), file.get("context").to(dtype),
            file.get("pooled").to(dtype), Tensor()};
  if (file.contains("guidance")) in.guidance = file.get("guidance");
  return in;
}

Tensor run(FluxTransformer& model, const Inputs& in) {
  return model.forward(in.latents, in.timesteps, in.context, in.pooled, in.guidance);
}

TEST(FluxConfig, FromShapesOfDevAndSchnell) {
  for (const char* variant : {"dev", "schnell"}) {
    SCOPED_TRACE(variant);
    SafetensorsFile file = open_fixture(std::string(variant) + "_bfl.safetensors");
    std::map<std::string, Shape> shapes = tensor_shapes(file);
    FluxConfig c = config_from_shapes(shapes, kTinyAxes);
    EXPECT_EQ(c.in_channels, 16);
    EXPECT_EQ(c.hidden_size, 32);
    EXPECT_EQ(c.num_heads, 2);
    EXPECT_EQ(c.head_dim(), 16);
    EXPECT_EQ(c.depth, 2);
    EXPECT_EQ(c.depth_single, 2);
    EXPECT_EQ(c.context_dim, 32);
    EXPECT_EQ(c.vec_dim, 24);
    EXPECT_EQ(c.mlp_hidden(), 128);
    EXPECT_TRUE(c.qkv_bias);
    EXPECT_EQ(c.guidance_embed, std::string(variant) == "dev");
    EXPECT_EQ(c.axes_dim, kTinyAxes);
    // The file holds exactly the model's parameters, under the same names and shapes.
    EXPECT_EQ(parameter_shapes(c), shapes);
    c.dtype = DType::F32;
    FluxTransformer model(c);
    std::map<std::string, Shape> model_shapes;
    for (auto& [name, tensor] : model.named_parameters()) model_shapes[name] = tensor.shape();
    EXPECT_EQ(model_shapes, shapes);
  }
}

TEST(FluxConfig, RealSizeNamesAndCount) {
  FluxConfig dev;  // the defaults: Flux.1-dev
  std::map<std::string, Shape> shapes = parameter_shapes(dev);
  EXPECT_EQ(shapes.at("img_in.weight"), (Shape{3072, 64}));
  EXPECT_EQ(shapes.at("txt_in.weight"), (Shape{3072, 4096}));
  EXPECT_EQ(shapes.at("double_blocks.18.img_mod.lin.weight"), (Shape{18432, 3072}));
  EXPECT_EQ(shapes.at("double_blocks.0.txt_attn.qkv.bias"), (Shape{9216}));
  EXPECT_EQ(shapes.at("double_blocks.0.img_attn.norm.key_norm.scale"), (Shape{128}));
  EXPECT_EQ(shapes.at("double_blocks.0.img_mlp.2.weight"), (Shape{3072, 12288}));
  EXPECT_EQ(shapes.at("single_blocks.37.linear1.weight"), (Shape{21504, 3072}));
  EXPECT_EQ(shapes.at("single_blocks.37.linear2.weight"), (Shape{3072, 15360}));
  EXPECT_EQ(shapes.at("single_blocks.0.modulation.lin.weight"), (Shape{9216, 3072}));
  EXPECT_EQ(shapes.at("final_layer.adaLN_modulation.1.weight"), (Shape{6144, 3072}));
  EXPECT_EQ(shapes.at("final_layer.linear.weight"), (Shape{64, 3072}));
  int64_t n = 0;
  for (auto& [name, shape] : shapes) n += numel(shape);
  EXPECT_EQ(n, 11901408320);  // Flux.1-dev's published count; 339,831,296 per double, 141,591,808 per single block
  FluxConfig schnell{.guidance_embed = false};
  int64_t n_schnell = 0;
  for (auto& [name, shape] : parameter_shapes(schnell)) n_schnell += numel(shape);
  EXPECT_EQ(n - n_schnell, (256 * 3072 + 3072) + (3072 * 3072 + 3072));  // guidance_in only
  EXPECT_EQ(config_from_shapes(shapes).depth, 19);
  EXPECT_EQ(config_from_shapes(shapes).num_heads, 24);
}

TEST(FluxConfig, BrokenShapeMapsAreDataErrors) {
  const std::map<std::string, Shape> good = tensor_shapes(open_fixture("dev_bfl.safetensors"));
  auto message = [](const std::map<std::string, Shape>& shapes, std::vector<int64_t> axes = kTinyAxes) {
    try {
      config_from_shapes(shapes, axes);
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
  EXPECT_THAT(message(without("img_in.weight")), HasSubstr("'img_in.weight' is missing"));
  EXPECT_THAT(message(without("double_blocks.1.txt_mlp.2.bias")),
              HasSubstr("'double_blocks.1.txt_mlp.2.bias' is missing"));
  EXPECT_THAT(message(with("single_blocks.1.linear2.weight", {32, 150})),
              HasSubstr("'single_blocks.1.linear2.weight' has shape [32, 150]"));
  EXPECT_THAT(message(with("txt_in.weight", {48, 32})), HasSubstr("'txt_in.weight' has shape [48, 32]"));
  EXPECT_THAT(message(good, {16, 56, 56}), HasSubstr("axes_dim [16, 56, 56] sums to 128 but the head width is 16"));
  EXPECT_THAT(message(with("double_blocks.0.img_attn.norm.query_norm.scale", {12})),
              HasSubstr("not a multiple of the head width 12"));
  EXPECT_THAT(message(with("double_blocks.3.img_mod.lin.weight", {192, 32})), HasSubstr("a block is missing"));
  EXPECT_THAT(message(with("double_blocks.0.img_attn.extra", {1})), HasSubstr("'double_blocks.0.img_attn.extra'"));
  std::map<std::string, Shape> prefixed;
  for (auto& [name, shape] : good) prefixed["model.diffusion_model." + name] = shape;
  EXPECT_THAT(message(prefixed), HasSubstr("strip that prefix"));
  EXPECT_THAT(message({}), HasSubstr("'img_in.weight' is missing"));
}

TEST(FluxPacking, MatchesDiffusersAndRoundTrips) {
  SafetensorsFile file = open_fixture("dev_case.safetensors");
  Tensor latents = file.get("latents");  // [2, 4, 6, 10]
  Tensor packed = pack_latents(latents);
  EXPECT_EQ(packed.shape(), (Shape{2, 15, 16}));
  EXPECT_EQ(packed.to_vector<float>(), file.get("packed").to_vector<float>());  // exact: a permutation
  EXPECT_EQ(unpack_latents(packed, 6, 10).to_vector<float>(), latents.to_vector<float>());
  EXPECT_EQ(image_ids(3, 5).to_vector<float>(), file.get("img_ids").to_vector<float>());
  EXPECT_EQ(image_ids(2, 3).to_vector<float>(),
            (std::vector<float>{0, 0, 0, 0, 0, 1, 0, 0, 2, 0, 1, 0, 0, 1, 1, 0, 1, 2}));
  for (float v : file.get("txt_ids").to_vector<float>()) EXPECT_EQ(v, 0.0f);
  EXPECT_THAT(error_of([&] { pack_latents(latents.narrow(2, 0, 5)); }), HasSubstr("H and W even"));
  EXPECT_THAT(error_of([&] { unpack_latents(packed, 6, 8); }), HasSubstr("is not [B, (6/2)(8/2), 4C]"));
}

TEST(FluxForward, MatchesDiffusersInF32) {
  for (const char* variant : {"dev", "schnell"}) {
    SCOPED_TRACE(variant);
    Loaded loaded = load_model(variant);
    // Loading is zero-copy and frozen: the parameters view the file's mapping.
    Tensor w = loaded.model->parameter("double_blocks.0.img_attn.qkv.weight");
    auto* begin = loaded.file.mapped_data();
    auto* data = static_cast<const uint8_t*>(w.data());
    EXPECT_TRUE(data >= begin && data < begin + loaded.file.mapped_bytes());
    EXPECT_FALSE(autograd::requires_grad(w));
    SafetensorsFile file = open_fixture(std::string(variant) + "_case.safetensors");
    Tensor out = run(*loaded.model, case_inputs(file));
    EXPECT_EQ(out.dtype(), DType::F32);
    double error = relative_to_max(out, file.get("output"));
    std::printf("[%s] f32 forward vs diffusers: max relative error %.3g\n", variant, error);
    EXPECT_LE(error, 1e-5);
  }
}

// bf16 model and inputs against diffusers' bf16 forward (output_bf16) and the f32 one (output).
// Time convention: diffusers (and BFL) round sigma and sigma x 1000 (guidance likewise) to bf16
// before the sinusoidal embedding; wick embeds the caller's f32 values (as ComfyUI does). On these
// random weights that rounding alone moves diffusers' output by 0.5 (dev) / 0.2 (schnell), so the
// bf16 arithmetic is compared with diffusers' rounded products (*_scaled_bf16 / 1000 as timesteps).
// Measured (relative to max |output|):
//   wick bf16, diffusers' rounded t/g vs output_bf16:   dev 8.1e-3, schnell 8.3e-3
//   wick bf16, f32 t/g vs output (f32):                  dev 1.0e-2, schnell 1.0e-2
//   diffusers' own output_bf16 vs output_f32_bf16t:      dev 1.5e-2, schnell 1.0e-2
// Two bf16 evaluations with different rounding orders, each about 1e-2 from f32: tolerance 2.5e-2.
TEST(FluxForward, Bfloat16AgainstDiffusers) {
  for (const char* variant : {"dev", "schnell"}) {
    SCOPED_TRACE(variant);
    Loaded loaded = load_model(variant, DType::BF16);
    SafetensorsFile file = open_fixture(std::string(variant) + "_case.safetensors");
    Inputs in = case_inputs(file, DType::BF16);
    Tensor out = run(*loaded.model, in);
    EXPECT_EQ(out.dtype(), DType::BF16);
    double vs_f32 = relative_to_max(out, file.get("output"));
    Inputs rounded = in;  // the time and guidance diffusers' bf16 forward embeds
    rounded.timesteps = wick::div(file.get("timestep_scaled_bf16"), 1000.0);
    if (in.guidance.defined()) rounded.guidance = wick::div(file.get("guidance_scaled_bf16"), 1000.0);
    double rounded_vs_bf16 = relative_to_max(run(*loaded.model, rounded), file.get("output_bf16"));
    std::printf("[%s] bf16 forward: rounded t/g vs diffusers bf16 %.3g; f32 t/g vs f32 %.3g (vs diffusers bf16 "
                "%.3g); diffusers bf16 vs its f32 with rounded t/g %.3g\n",
                variant, rounded_vs_bf16, vs_f32, relative_to_max(out, file.get("output_bf16")),
                relative_to_max(file.get("output_bf16"), file.get("output_f32_bf16t")));
    EXPECT_LE(rounded_vs_bf16, 2.5e-2);
    EXPECT_LE(vs_f32, 2.5e-2);
    // Mixed precision: f32 parameters, bf16 latents and conditioning: computes in bf16 as well.
    Loaded f32_model = load_model(variant);
    Tensor mixed = run(*f32_model.model, in);
    EXPECT_EQ(mixed.dtype(), DType::BF16);
    EXPECT_LE(relative_to_max(mixed, file.get("output")), 2.5e-2);
  }
}

// LoRA (rank 4, alpha 8) on every Linear of the blocks, as the fixture's PEFT adapters merged per
// BFL module (the fused qkv / linear1 share one lora_down; lora_up is the row concatenation).
struct LoraRun {
  double loss = 0;
  std::vector<std::pair<std::string, Tensor>> grads;  // lora_down / lora_up per module path
  Tensor output;
  double forward_backward_ms = 0;
};

std::vector<std::string> lora_paths(const SafetensorsFile& file) {
  std::vector<std::string> paths;
  const std::string prefix = "bfl.", suffix = ".lora_down";
  for (const std::string& name : file.names())
    if (name.rfind(prefix, 0) == 0 && name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      paths.push_back(name.substr(prefix.size(), name.size() - prefix.size() - suffix.size()));
  std::sort(paths.begin(), paths.end());
  return paths;
}

LoraRun run_lora(bool checkpointing) {
  SafetensorsFile file = open_fixture("dev_lora_case.safetensors");
  Loaded loaded = load_model("dev");
  std::vector<std::string> paths = lora_paths(file);
  EXPECT_EQ(paths.size(), 2u * 10 + 2u * 3);  // 10 Linears per double block, 3 per single block
  EXPECT_EQ(file.get("rank").item(), 4.0);
  EXPECT_EQ(file.get("alpha").item(), 8.0);
  nn::AdapterReport report = nn::apply_adapters(
      *loaded.model, {.type = "lora", .patterns = paths, .options = {.rank = 4, .alpha = 8.0}});
  std::vector<std::string> wrapped = report.wrapped;
  std::sort(wrapped.begin(), wrapped.end());
  EXPECT_EQ(wrapped, paths);
  LoraRun result;
  for (auto& [path, adapter] : nn::find_adapters(*loaded.model)) {
    copy_into(adapter->down_weight(), file.get("bfl." + path + ".lora_down"));
    copy_into(adapter->up_weight(), file.get("bfl." + path + ".lora_up"));
  }
  loaded.model->set_gradient_checkpointing(checkpointing);
  auto start = std::chrono::steady_clock::now();
  result.output = run(*loaded.model, case_inputs(file));
  Tensor loss = autograd::mse_loss(pack_latents(result.output), file.get("target"));
  result.loss = loss.item();
  autograd::GradientStore grads = autograd::backward(loss);
  result.forward_backward_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  for (auto& [path, adapter] : nn::find_adapters(*loaded.model)) {
    result.grads.emplace_back(path + ".lora_down", grads.get(adapter->down_weight()));
    result.grads.emplace_back(path + ".lora_up", grads.get(adapter->up_weight()));
  }
  EXPECT_EQ(grads.size(), result.grads.size()) << "only the adapters get gradients";
  return result;
}

TEST(FluxLora, ForwardLossAndGradientsMatchPeft) {
  SafetensorsFile file = open_fixture("dev_lora_case.safetensors");
  LoraRun r = run_lora(false);
  double out_error = relative_to_max(r.output, file.get("output"));
  double loss_error = std::fabs(r.loss - file.get("loss").item()) / std::fabs(file.get("loss").item());
  double worst = 0;
  std::string worst_name;
  for (auto& [name, grad] : r.grads) {
    ASSERT_TRUE(grad.defined()) << name << " got no gradient";
    double error = relative_to_max(grad, file.get("grad.bfl." + name));
    EXPECT_LE(error, 1e-4) << name;
    if (error > worst) worst = error, worst_name = name;
  }
  std::printf("[dev LoRA] output %.3g, loss %.9g vs %.9g (%.3g), worst of %zu adapter gradients %.3g (%s); "
              "forward + backward %.2f ms\n",
              out_error, r.loss, file.get("loss").item(), loss_error, r.grads.size(), worst, worst_name.c_str(),
              r.forward_backward_ms);
  EXPECT_LE(out_error, 1e-5);
  EXPECT_LE(loss_error, 1e-5);
}

TEST(FluxLora, BlockGlobsWrapExactlyTheFixtureModules) {
  Loaded loaded = load_model("dev");
  nn::AdapterReport report =
      nn::apply_adapters(*loaded.model, {.patterns = {"double_blocks.*", "single_blocks.*"}, .options = {.rank = 4}});
  std::vector<std::string> wrapped = report.wrapped;
  std::sort(wrapped.begin(), wrapped.end());
  EXPECT_EQ(wrapped, lora_paths(open_fixture("dev_lora_case.safetensors")));
  EXPECT_EQ(report.n_trainable, loaded.model->n_parameters(/*trainable_only=*/true));
}

TEST(FluxLora, CpuStepTime) {
  double best = 1e30, best_checkpointed = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    best = std::min(best, run_lora(false).forward_backward_ms);
    best_checkpointed = std::min(best_checkpointed, run_lora(true).forward_backward_ms);
  }
  std::printf("[dev LoRA] tiny model, batch 2, 15 image + 7 text tokens: forward + backward %.2f ms, with gradient "
              "checkpointing %.2f ms (best of 5)\n",
              best, best_checkpointed);
}

TEST(FluxLora, GradientCheckpointingIsBitwiseTheSame) {
  LoraRun plain = run_lora(false), checkpointed = run_lora(true);
  EXPECT_EQ(plain.loss, checkpointed.loss);
  EXPECT_EQ(plain.output.to_vector<float>(), checkpointed.output.to_vector<float>());
  ASSERT_EQ(plain.grads.size(), checkpointed.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i)
    EXPECT_EQ(plain.grads[i].second.to_vector<float>(), checkpointed.grads[i].second.to_vector<float>())
        << plain.grads[i].first;
}

TEST(FluxForward, BadInputsAreClearErrors) {
  Loaded dev = load_model("dev"), schnell = load_model("schnell");
  Inputs in = case_inputs(open_fixture("dev_case.safetensors"));
  auto call = [](FluxTransformer& m, const Inputs& i) { return error_of([&] { run(m, i); }); };
  Inputs no_guidance = in;
  no_guidance.guidance = Tensor();
  EXPECT_THAT(call(*dev.model, no_guidance), HasSubstr("pass guidance [2]"));
  EXPECT_THAT(call(*schnell.model, in), HasSubstr("has no guidance_in"));
  Inputs odd = in;
  odd.latents = in.latents.narrow(2, 0, 5).contiguous();
  EXPECT_THAT(call(*dev.model, odd), HasSubstr("must be even"));
  Inputs channels = in;
  channels.latents = in.latents.narrow(1, 0, 3).contiguous();
  EXPECT_THAT(call(*dev.model, channels), HasSubstr("this model takes 4"));
  Inputs context = in;
  context.context = in.context.narrow(2, 0, 31).contiguous();
  EXPECT_THAT(call(*dev.model, context), HasSubstr("is not [2, L, 32]"));
  Inputs pooled = in;
  pooled.pooled = in.pooled.narrow(1, 0, 23).contiguous();
  EXPECT_THAT(call(*dev.model, pooled), HasSubstr("is not [2, 24]"));
  Inputs timesteps = in;
  timesteps.timesteps = in.timesteps.narrow(0, 0, 1).contiguous();
  EXPECT_THAT(call(*dev.model, timesteps), HasSubstr("timesteps"));
  // Any even size works (no fixed grid): another shape runs and keeps it.
  Inputs other = in;
  other.latents = in.latents.narrow(2, 0, 4).narrow(3, 0, 2).contiguous();
  EXPECT_EQ(run(*dev.model, other).shape(), (Shape{2, 4, 4, 2}));
  EXPECT_THAT(error_of([] { FluxTransformer bad(FluxConfig{.hidden_size = 32, .num_heads = 2}); }),
              HasSubstr("axes_dim [16, 56, 56] sums to 128 but the head width is 16"));
}

}  // namespace
}  // namespace wick::flux
