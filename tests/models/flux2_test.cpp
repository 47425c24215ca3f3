// FLUX.2's transformer (models/flux2) against the fixtures of tests/data/flux2 (tests/reference/make_flux2_fixtures.py,
// diffusers 0.42.1 and PEFT 0.21.2; a tiny random dev-style model, hidden 64 in 2 heads of 32, 2 double + 2 single
// blocks, RoPE axes [8, 8, 8, 8], context 24, 16 token features; klein-style = the same without guidance_in): its
// config from the weights' shapes and the full-size parameter counts, BFL's and diffusers' layouts, the forward in f32
// and bf16 (target alone, klein, with a reference image), full-training gradients, LoRA against PEFT with and without
// gradient checkpointing, the input checks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/autograd/backward.h"
#include "engine/autograd/ops_loss.h"
#include "engine/autograd/node.h"
#include "models/flux2/flux2.h"
#include "models/flux2/flux2_weights.h"
#include "models/nn/adapters.h"
#include "runtime/ops/elementwise.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/models/arch_parity.h"
#include "tests/models/arch_test_util.h"
#include "tests/models/bpe_test_util.h"
#include "tests/test_data.h"

namespace wick::flux2 {
namespace {

using ::testing::HasSubstr;
using wick::testing::copy_into_slot;
using wick::testing::data_path;
using wick::testing::error_of;
using wick::testing::gradient_error;
using wick::testing::gradient_or_zeros;
using wick::testing::lora_paths;
using wick::testing::relative_to_max;

SafetensorsFile open_fixture(const std::string& name) { return SafetensorsFile::open(data_path("flux2/" + name)); }

int64_t count(const std::map<std::string, Shape>& shapes, const std::string& prefix = "") {
  int64_t n = 0;
  for (const auto& [name, shape] : shapes)
    if (name.rfind(prefix, 0) == 0) n += numel(shape);
  return n;
}

// A model loaded from a fixture file or folder (the source outlives it).
struct Loaded {
  std::shared_ptr<WeightSource> source;
  std::shared_ptr<Flux2Transformer> model;
  DetectedFormat format;
};

Loaded load(const std::string& path, DType dtype = DType::F32) {
  auto source = std::make_shared<WeightSource>(WeightSource::open(path));
  LoadedFlux2 loaded = load_transformer(*source, {.dtype = dtype});
  return {source, loaded.model, loaded.format};
}

// The klein-style fixture model: dev_bfl without guidance_in, written to `dir`.
std::string write_klein(const std::string& dir) {
  SafetensorsFile dev = open_fixture("dev_bfl.safetensors");
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& name : dev.names())
    if (name.rfind("guidance_in.", 0) != 0) tensors.emplace_back(name, dev.get(name));
  const std::string path = dir + "/klein_bfl.safetensors";
  save_safetensors(path, tensors, {});
  return path;
}

Tensor run(Flux2Transformer& model, const SafetensorsFile& c, bool guidance, bool reference, DType dtype) {
  std::vector<Tensor> references;
  if (reference) references.push_back(c.get("reference_latents").to(dtype));
  return model.forward(c.get("latents").to(dtype), c.get("timestep"), c.get("context").to(dtype),
                       guidance ? c.get("guidance") : Tensor(), references);
}

TEST(Flux2Config, ReleasedSizesAndCounts) {
  const std::map<std::string, Shape> dev = parameter_shapes(Flux2Config{});
  EXPECT_EQ(count(dev), 32223281152);  // FLUX.2-dev (MODELS2 B1, from the meta-instantiated model)
  EXPECT_EQ(count(dev, "double_blocks.0."), 981467648);
  EXPECT_EQ(count(dev, "single_blocks.0."), 490733824);
  EXPECT_EQ(dev.at("img_in.weight"), (Shape{6144, 128}));
  EXPECT_EQ(dev.at("txt_in.weight"), (Shape{6144, 15360}));
  EXPECT_EQ(dev.at("double_stream_modulation_img.lin.weight"), (Shape{36864, 6144}));
  EXPECT_EQ(dev.at("single_blocks.47.linear1.weight"), (Shape{55296, 6144}));
  EXPECT_EQ(dev.at("single_blocks.47.linear2.weight"), (Shape{6144, 24576}));
  EXPECT_EQ(dev.at("double_blocks.7.txt_mlp.0.weight"), (Shape{36864, 6144}));
  EXPECT_EQ(dev.at("final_layer.adaLN_modulation.1.weight"), (Shape{12288, 6144}));
  EXPECT_EQ(count(parameter_shapes(klein_9b_config())), 9078581248);
  EXPECT_EQ(count(parameter_shapes(klein_4b_config())), 3875544576);
  for (const Flux2Config& c : {Flux2Config{}, klein_9b_config(), klein_4b_config()}) {
    const Flux2Config read = config_from_shapes(parameter_shapes(c));
    EXPECT_EQ(read.hidden_size, c.hidden_size);
    EXPECT_EQ(read.num_heads, c.num_heads);
    EXPECT_EQ(read.depth, c.depth);
    EXPECT_EQ(read.depth_single, c.depth_single);
    EXPECT_EQ(read.context_dim, c.context_dim);
    EXPECT_EQ(read.mlp_hidden(), c.mlp_hidden());
    EXPECT_EQ(read.guidance_embed, c.guidance_embed);
    EXPECT_EQ(read.axes_dim, (std::vector<int64_t>{32, 32, 32, 32}));
  }
}

TEST(Flux2Config, FromTheFixtureShapes) {
  const Flux2Config c = config_from_shapes(wick::testing::file_shapes(open_fixture("dev_bfl.safetensors")));
  EXPECT_EQ(c.in_channels, 16);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_heads, 2);
  EXPECT_EQ(c.depth, 2);
  EXPECT_EQ(c.depth_single, 2);
  EXPECT_EQ(c.context_dim, 24);
  EXPECT_EQ(c.mlp_hidden(), 192);
  EXPECT_TRUE(c.guidance_embed);
  EXPECT_EQ(c.axes_dim, (std::vector<int64_t>{8, 8, 8, 8}));
  EXPECT_EQ(count(parameter_shapes(c)), 434048);  // MODELS2 D3's count
}

TEST(Flux2Config, BrokenShapeMapsAreDataErrors) {
  const std::map<std::string, Shape> good = wick::testing::file_shapes(open_fixture("dev_bfl.safetensors"));
  auto message = [](const std::map<std::string, Shape>& shapes, std::vector<int64_t> axes = {}) {
    return wick::testing::shape_map_error([&](const auto& s) { config_from_shapes(s, axes); }, shapes);
  };
  auto without = [&](const std::string& name) { return wick::testing::without(good, name); };
  auto with = [&](const std::string& name, Shape shape) { return wick::testing::with(good, name, std::move(shape)); };
  EXPECT_THAT(message(without("img_in.weight")), HasSubstr("'img_in.weight' is missing"));
  EXPECT_THAT(message(without("double_blocks.1.txt_mlp.2.weight")),
              HasSubstr("'double_blocks.1.txt_mlp.2.weight' is missing"));
  EXPECT_THAT(message(without("single_stream_modulation.lin.weight")),
              HasSubstr("'single_stream_modulation.lin.weight' is missing"));
  EXPECT_THAT(message(with("single_blocks.1.linear2.weight", {64, 250})),
              HasSubstr("'single_blocks.1.linear2.weight' has shape [64, 250]"));
  EXPECT_THAT(message(good, {16, 8, 8, 8}), HasSubstr("axes_dim [16, 8, 8, 8] sums to 40 but the head width is 32"));
  EXPECT_THAT(wick::testing::shape_map_error([&](const auto& s) { config_from_shapes(s, {8, 8, 8, 4, 4}); }, good,
                                             ErrorKind::Config),
              HasSubstr("one entry per position axis (T, H, W, L)"));
  EXPECT_THAT(message(with("double_blocks.3.img_attn.proj.weight", {64, 64})), HasSubstr("a block is missing"));
  EXPECT_THAT(message(with("double_blocks.0.img_attn.qkv.bias", {192})),
              HasSubstr("'double_blocks.0.img_attn.qkv.bias' [192] is not a parameter"));
  std::map<std::string, Shape> prefixed, flux1 = good;
  for (auto& [name, shape] : good) prefixed["model.diffusion_model." + name] = shape;
  EXPECT_THAT(message(prefixed), HasSubstr("ComfyUI's prefix"));
  flux1.erase("single_stream_modulation.lin.weight");
  flux1["double_blocks.0.img_mod.lin.weight"] = {384, 64};
  EXPECT_THAT(message(flux1), HasSubstr("as Flux.1: it is not a FLUX.2 model"));
}

TEST(Flux2Weights, BflAndDiffusersLayoutsLoadTheSameModel) {
  Loaded bfl = load(data_path("flux2/dev_bfl.safetensors")), diffusers = load(data_path("flux2/dev_diffusers"));
  EXPECT_EQ(bfl.format.format.name, "bfl");
  EXPECT_EQ(diffusers.format.format.name, "diffusers");
  EXPECT_EQ(bfl.model->weight_origin().layout, "bfl");
  const auto a = bfl.model->named_parameters(), b = diffusers.model->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.to_vector<float>(), b[i].second.to_vector<float>()) << a[i].first;
    EXPECT_FALSE(autograd::requires_grad(a[i].second)) << a[i].first;
  }
}

TEST(Flux2Forward, TokensAndPositionIdsAreDiffusers) {
  const SafetensorsFile c = open_fixture("case.safetensors");
  EXPECT_EQ(pack_tokens(c.get("latents")).to_vector<float>(), c.get("packed").to_vector<float>());
  EXPECT_EQ(unpack_tokens(c.get("packed"), 3, 4).to_vector<float>(), c.get("latents").to_vector<float>());
  EXPECT_EQ(image_ids(3, 4).to_vector<float>(), c.get("img_ids").to_vector<float>());
  EXPECT_EQ(text_ids(5).to_vector<float>(), c.get("txt_ids").to_vector<float>());
  EXPECT_EQ(image_ids(2, 2, reference_time(0)).to_vector<float>(), c.get("ref_ids").to_vector<float>());
}

// Against diffusers' f32 forward with the sinusoid's frequency table correctly rounded (the "_exact" outputs; the
// plain ones carry one machine's f32 exp, printed for comparison).
TEST(Flux2Forward, MatchesDiffusersInF32) {
  wick::bpe::TempDir dir;
  const SafetensorsFile c = open_fixture("case.safetensors");
  struct Row {
    const char* label;
    std::string weights;
    bool guidance, reference;
    const char* output;
  };
  const std::vector<Row> rows = {
      {"dev (BFL file)", data_path("flux2/dev_bfl.safetensors"), true, false, "output"},
      {"dev (diffusers folder)", data_path("flux2/dev_diffusers"), true, false, "output"},
      {"dev + reference image", data_path("flux2/dev_bfl.safetensors"), true, true, "output_reference"},
      {"klein", write_klein(dir.path()), false, false, "output_klein"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.label);
    Loaded loaded = load(row.weights);
    const Tensor out = run(*loaded.model, c, row.guidance, row.reference, DType::F32);
    const double exact = relative_to_max(out, c.get(std::string(row.output) + "_exact"));
    const double plain = relative_to_max(out, c.get(row.output));
    std::printf("[FLUX.2 %s] f32 vs diffusers: %.2e (this machine's exp table: %.2e)\n", row.label, exact, plain);
    EXPECT_LE(exact, 1e-5);
  }
}

// In bf16: wick embeds the caller's f32 sigma and guidance; diffusers rounds them to bf16 before multiplying by 1000
// (0.375 -> 376, 0.8125 -> 812), which alone moves its output by half of its largest value. So the bf16 arithmetic is
// compared with diffusers' fed the same rounded values (sigma = timestep_scaled_bf16 / 1000), and wick's own bf16 run
// with the fixture's f32 reference.
TEST(Flux2Forward, Bf16IsCloseToDiffusersBf16) {
  const SafetensorsFile c = open_fixture("case.safetensors");
  Loaded loaded = load(data_path("flux2/dev_bfl.safetensors"), DType::BF16);
  Flux2Transformer& model = *loaded.model;
  const Tensor latents = c.get("latents").to(DType::BF16), context = c.get("context").to(DType::BF16);
  const Tensor out = model.forward(latents, c.get("timestep"), context, c.get("guidance")).to(DType::F32);
  const Tensor rounded_time = div(c.get("timestep_scaled_bf16"), 1000.0);
  const Tensor rounded_guidance = div(c.get("guidance_scaled_bf16"), 1000.0);
  const Tensor as_diffusers = model.forward(latents, rounded_time, context, rounded_guidance).to(DType::F32);
  const double vs_f32 = relative_to_max(out, c.get("output_exact"));
  const double vs_bf16 = relative_to_max(as_diffusers, c.get("output_bf16"));
  const double vs_f32_rounded = relative_to_max(as_diffusers, c.get("output_f32_bf16t"));
  std::printf("[FLUX.2 dev] bf16 vs f32 %.2e; with diffusers' rounded time: vs diffusers bf16 %.2e, vs its f32 %.2e\n",
              vs_f32, vs_bf16, vs_f32_rounded);
  EXPECT_LE(vs_f32, 5e-2);
  EXPECT_LE(vs_bf16, 5e-2);
  EXPECT_LE(vs_f32_rounded, 5e-2);
}

TEST(Flux2Forward, FullTrainingGradientsMatchDiffusers) {
  const SafetensorsFile c = open_fixture("case.safetensors");
  Loaded loaded = load(data_path("flux2/dev_bfl.safetensors"));
  loaded.model->set_all_trainable(true);
  Tensor loss = autograd::mse_loss(run(*loaded.model, c, true, false, DType::F32), c.get("full_target"));
  EXPECT_NEAR(loss.item(), c.get("full_loss").item(), 1e-5 * std::fabs(c.get("full_loss").item()));
  autograd::GradientStore grads = autograd::backward(loss);
  int checked = 0;
  double worst = 0;
  for (const std::string& key : c.names()) {
    if (key.rfind("grad.", 0) != 0) continue;
    const std::string name = key.substr(5);
    SCOPED_TRACE(name);
    const double e = gradient_error(gradient_or_zeros(grads, loaded.model->parameter(name)), c, key);
    worst = std::max(worst, e);
    EXPECT_LE(e, 1e-4);
    ++checked;
  }
  EXPECT_GE(checked, 12);
  std::printf("[FLUX.2 dev] full training: %d gradients, worst %.2e\n", checked, worst);
}

// LoRA (rank 4, alpha 8) on every Linear of the blocks with PEFT's factors; gradients of the factors, with and without
// gradient checkpointing.
TEST(Flux2Lora, MatchesPeftWithAndWithoutCheckpointing) {
  const SafetensorsFile file = open_fixture("lora_case.safetensors");
  const std::vector<std::string> paths = lora_paths(file, "bfl.");
  EXPECT_EQ(paths.size(), 20u);
  std::vector<std::vector<Tensor>> runs;
  for (bool checkpointing : {false, true}) {
    SCOPED_TRACE(checkpointing);
    Loaded loaded = load(data_path("flux2/dev_bfl.safetensors"));
    nn::AdapterReport report = nn::apply_adapters(
        *loaded.model, {.patterns = {"double_blocks.*", "single_blocks.*"}, .options = {.rank = 4, .alpha = 8.0}});
    std::vector<std::string> wrapped = report.wrapped;
    std::sort(wrapped.begin(), wrapped.end());
    EXPECT_EQ(wrapped, paths);  // the block globs wrap exactly the fixture's modules
    for (auto& [path, adapter] : nn::find_adapters(*loaded.model)) {
      copy_into_slot(adapter->down_weight(), file.get("bfl." + path + ".lora_down"));
      copy_into_slot(adapter->up_weight(), file.get("bfl." + path + ".lora_up"));
    }
    loaded.model->set_gradient_checkpointing(checkpointing);
    const Tensor out = run(*loaded.model, file, true, false, DType::F32);
    EXPECT_LE(relative_to_max(out, file.get("output")), 1e-5);
    Tensor loss = autograd::mse_loss(out, file.get("target"));
    EXPECT_NEAR(loss.item(), file.get("loss").item(), 1e-5 * std::fabs(file.get("loss").item()));
    autograd::GradientStore grads = autograd::backward(loss);
    double worst = 0;
    std::vector<Tensor> grad_list;
    for (auto& [path, adapter] : nn::find_adapters(*loaded.model)) {
      for (const char* factor : {"lora_down", "lora_up"}) {
        const Tensor& slot = std::string(factor) == "lora_down" ? adapter->down_weight() : adapter->up_weight();
        const Tensor grad = gradient_or_zeros(grads, slot);
        worst = std::max(worst, gradient_error(grad, file, "grad.bfl." + path + "." + factor));
        grad_list.push_back(grad);
      }
    }
    std::printf("[FLUX.2 dev LoRA%s] output %.2e, worst factor gradient %.2e vs PEFT\n",
                checkpointing ? ", checkpointing" : "", relative_to_max(out, file.get("output")), worst);
    EXPECT_LE(worst, 1e-4);
    runs.push_back(grad_list);
  }
  ASSERT_EQ(runs[0].size(), runs[1].size());
  for (size_t i = 0; i < runs[0].size(); ++i)
    EXPECT_EQ(runs[0][i].to_vector<float>(), runs[1][i].to_vector<float>()) << "checkpointing changes gradient " << i;
}

TEST(Flux2Forward, BadInputsAreClearErrors) {
  wick::bpe::TempDir dir;
  const SafetensorsFile c = open_fixture("case.safetensors");
  Loaded dev = load(data_path("flux2/dev_bfl.safetensors")), klein = load(write_klein(dir.path()));
  const Tensor latents = c.get("latents"), t = c.get("timestep"), context = c.get("context"), g = c.get("guidance");
  Flux2Transformer& d = *dev.model;
  EXPECT_THAT(error_of([&] { d.forward(latents, t, context); }), HasSubstr("pass guidance [2]"));
  EXPECT_THAT(error_of([&] { klein.model->forward(latents, t, context, g); }), HasSubstr("has no guidance_in"));
  EXPECT_THAT(error_of([&] { d.forward(latents.narrow(1, 0, 15).contiguous(), t, context, g); }),
              HasSubstr("this model takes 16"));
  EXPECT_THAT(error_of([&] { d.forward(latents, t, context.narrow(2, 0, 23).contiguous(), g); }),
              HasSubstr("is not [2, L, 24]"));
  EXPECT_THAT(error_of([&] { d.forward(latents, t.narrow(0, 0, 1).contiguous(), context, g); }),
              HasSubstr("timesteps"));
  EXPECT_THAT(error_of([&] { d.forward(latents, t, context, g, {latents.narrow(0, 0, 1).contiguous()}); }),
              HasSubstr("reference 0"));
  // Any size works (one token per latent position): another shape runs and keeps it.
  EXPECT_EQ(d.forward(latents.narrow(2, 0, 2).narrow(3, 0, 3).contiguous(), t, context, g).shape(),
            (Shape{2, 16, 2, 3}));
  EXPECT_THAT(error_of([] { Flux2Transformer bad(Flux2Config{.hidden_size = 64, .num_heads = 2}); }),
              HasSubstr("axes_dim [32, 32, 32, 32] sums to 128 but the head width is 32"));
}

}  // namespace
}  // namespace wick::flux2
