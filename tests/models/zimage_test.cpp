// The Z-Image transformer (models/zimage) against the fixtures of tests/data/zimage (tests/reference/
// make_zimage_fixtures.py: diffusers 0.42.1's ZImageTransformer2DModel at MODELS2 section 1.7's tiny config, dim 64,
// 2 heads of 32, 2 layers + 1 + 1 refiners, cap_feat_dim 32, axes_dims [8, 12, 12], every parameter random, the
// pad tokens included): what only Z-Image has. Its config read from the weights' shapes, the token layout (patches,
// positions), the forward against the authors' code, batching and the pad tokens, full training against torch, and
// the input checks. The forward against diffusers (f32 from both layouts, bf16), LoRA against PEFT and gradient
// checkpointing are its row of arch_parity_test.cpp; the weights' layouts and float8 are zimage_weights_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/autograd/backward.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_join.h"
#include "engine/autograd/ops_layout.h"
#include "engine/autograd/ops_loss.h"
#include "models/zimage/zimage.h"
#include "models/zimage/zimage_weights.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/join.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/models/arch_parity.h"
#include "tests/models/arch_test_util.h"

namespace wick::zimage {
namespace {

using ::testing::HasSubstr;
using wick::testing::data_path;
using wick::testing::error_of;
using wick::testing::relative_to_max;

const ZImageRope kTinyRope{.axes_dims = {8, 12, 12}, .axes_lens = {256, 64, 64}, .theta = 256.0};

SafetensorsFile open_fixture(const std::string& name) { return SafetensorsFile::open(data_path("zimage/" + name)); }

WeightSource diffusers_source() { return WeightSource::open(data_path("zimage/diffusers"), "transformer"); }

std::shared_ptr<ZImageTransformer> load_tiny() {
  return load_transformer(diffusers_source(), {.dtype = DType::F32}).model;
}

struct Inputs {
  std::vector<Tensor> latents, captions;
  Tensor t;
};

Inputs case_inputs() {
  SafetensorsFile file = open_fixture("case.safetensors");
  Inputs in;
  for (int i = 0; i < 2; ++i) {
    in.latents.push_back(file.get("latents_" + std::to_string(i)));
    in.captions.push_back(file.get("caption_" + std::to_string(i)));
  }
  in.t = file.get("timestep");
  return in;
}

std::vector<Tensor> run(ZImageTransformer& model, const Inputs& in) {
  autograd::NoGradGuard no_grad;
  return model.forward(in.latents, in.t, in.captions);
}

// The worst relative_to_max over the two samples against "<prefix><i>" of `file`.
double worst_error(const std::vector<Tensor>& out, const SafetensorsFile& file, const std::string& prefix) {
  double worst = 0;
  for (size_t i = 0; i < out.size(); ++i)
    worst = std::max(worst, relative_to_max(out[i], file.get(prefix + std::to_string(i))));
  return worst;
}

int64_t count(const std::map<std::string, Shape>& shapes) {
  int64_t n = 0;
  for (auto& [name, shape] : shapes) n += numel(shape);
  return n;
}

TEST(ZImageConfig, FromShapesOfTheTinyModel) {
  WeightSource source = diffusers_source();
  const std::map<std::string, Shape> shapes = mapped_shapes(source, detect_weight_format(source));
  ZImageConfig c = config_from_shapes(shapes, rope_from_config_json(source.path()));
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.n_heads, 2);
  EXPECT_EQ(c.head_dim(), 32);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_refiner_layers, 1);
  EXPECT_EQ(c.ffn_hidden, 170);  // int(64 / 3 * 8), not a multiple of 256
  EXPECT_EQ(c.cap_feat_dim, 32);
  EXPECT_EQ(c.in_channels, 16);
  EXPECT_EQ(c.patch_size, 2);
  EXPECT_EQ(c.t_hidden, 1024);
  EXPECT_EQ(c.adaln_dim(), 64);  // min(dim, 256)
  // From the config.json beside the weights, not the released model's defaults.
  EXPECT_EQ(c.rope.axes_dims, kTinyRope.axes_dims);
  EXPECT_EQ(c.rope.axes_lens, kTinyRope.axes_lens);
  EXPECT_EQ(c.rope.theta, 256.0);
  EXPECT_EQ(count(parameter_shapes(c)), 590816);
  EXPECT_EQ(parameter_shapes(c).size(), 73u);
}

TEST(ZImageConfig, RealSizeNamesAndCount) {
  ZImageConfig turbo;
  std::map<std::string, Shape> shapes = parameter_shapes(turbo);
  EXPECT_EQ(count(shapes), 6154908736);  // MODELS2 section 1.1
  EXPECT_EQ(shapes.at("layers.29.attention.to_q.weight"), (Shape{3840, 3840}));
  EXPECT_EQ(shapes.at("layers.0.attention.norm_k.weight"), (Shape{128}));
  EXPECT_EQ(shapes.at("layers.0.feed_forward.w2.weight"), (Shape{3840, 10240}));
  EXPECT_EQ(shapes.at("layers.0.adaLN_modulation.0.weight"), (Shape{15360, 256}));
  EXPECT_EQ(shapes.count("context_refiner.0.adaLN_modulation.0.weight"), 0u);
  EXPECT_EQ(shapes.at("all_final_layer.2-1.adaLN_modulation.1.weight"), (Shape{3840, 256}));
  EXPECT_EQ(shapes.at("t_embedder.mlp.0.weight"), (Shape{1024, 256}));
  EXPECT_EQ(shapes.at("cap_embedder.1.weight"), (Shape{3840, 2560}));
  EXPECT_EQ(shapes.at("x_pad_token"), (Shape{1, 3840}));
  ZImageConfig read = config_from_shapes(shapes);
  EXPECT_EQ(read.n_heads, 30);
  EXPECT_EQ(read.n_layers, 30);
  EXPECT_EQ(read.n_refiner_layers, 2);
  EXPECT_EQ(read.rope.axes_lens, (std::vector<int64_t>{1536, 512, 512}));
  EXPECT_EQ(block_paths(turbo).size(), 34u);
  EXPECT_EQ(block_paths(turbo).front(), "noise_refiner.0");
  EXPECT_EQ(block_paths(turbo).back(), "layers.29");
}

TEST(ZImageConfig, BrokenShapeMapsAreDataErrors) {
  WeightSource source = diffusers_source();
  const std::map<std::string, Shape> good = mapped_shapes(source, detect_weight_format(source));
  auto message = [](const std::map<std::string, Shape>& shapes, ZImageRope rope = kTinyRope) {
    return wick::testing::shape_map_error([&](const auto& s) { config_from_shapes(s, rope); }, shapes);
  };
  auto without = [&](const std::string& name) { return wick::testing::without(good, name); };
  auto with = [&](const std::string& name, Shape shape) { return wick::testing::with(good, name, std::move(shape)); };
  EXPECT_THAT(message(without("all_x_embedder.2-1.weight")), HasSubstr("no all_x_embedder"));
  EXPECT_THAT(message(without("x_pad_token")), HasSubstr("'x_pad_token' is missing"));
  EXPECT_THAT(message(without("layers.1.ffn_norm2.weight")), HasSubstr("'layers.1.ffn_norm2.weight' is missing"));
  EXPECT_THAT(message(with("layers.0.feed_forward.w2.weight", {64, 160})),
              HasSubstr("'layers.0.feed_forward.w2.weight' has shape [64, 160]"));
  EXPECT_THAT(message(with("context_refiner.0.adaLN_modulation.0.weight", {256, 64})),
              HasSubstr("'context_refiner.0.adaLN_modulation.0.weight'"));
  EXPECT_THAT(message(with("layers.3.attention.to_q.weight", {64, 64})), HasSubstr("a block is missing"));
  EXPECT_THAT(message(good, ZImageRope{}), HasSubstr("axes_dims [32, 48, 48] sums to 128 but the head width is 32"));
  std::map<std::string, Shape> comfy;
  for (auto& [name, shape] : good) comfy["model.diffusion_model." + name] = shape;
  EXPECT_THAT(message(comfy), HasSubstr("ComfyUI"));
}

TEST(ZImageLayout, PositionsAndPatchesAsDiffusers) {
  SafetensorsFile file = open_fixture("case.safetensors");
  const int64_t heights[] = {6, 8}, widths[] = {10, 4}, captions[] = {7, 40};
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    SampleLayout l = sample_layout(heights[i], widths[i], captions[i], 2);
    EXPECT_EQ(l.image_padded, 32);
    EXPECT_EQ(l.caption_padded, i == 0 ? 32 : 64);
    EXPECT_EQ(image_positions(l, widths[i] / 2).to_vector<float>(),
              file.get("image_positions_" + std::to_string(i)).to_vector<float>());
    // diffusers' caption id list also holds a (0, 0, 0) row per caption pad after the padded grid; it truncates
    // them away before use (_prepare_sequence), so the positions are its first caption_padded rows.
    Tensor want = file.get("caption_positions_" + std::to_string(i));
    ASSERT_EQ(want.size(0), 2 * l.caption_padded - l.n_caption);
    EXPECT_EQ(caption_positions(l).to_vector<float>(),
              want.narrow(0, 0, l.caption_padded).contiguous().to_vector<float>());
    for (float v : want.narrow(0, l.caption_padded, l.caption_padded - l.n_caption).contiguous().to_vector<float>())
      EXPECT_EQ(v, 0.0f);
  }
  // Channel-fastest features: token (r, c), feature (pr·2 + pc)·C + channel.
  Tensor latent = file.get("latents_0");  // [16, 6, 10]
  Tensor tokens = patchify(latent, 2);
  ASSERT_EQ(tokens.shape(), (Shape{15, 64}));
  const std::vector<float> x = latent.to_vector<float>(), p = tokens.to_vector<float>();
  for (int64_t token : {0, 7, 14})
    for (int64_t feature : {0, 5, 17, 63}) {
      const int64_t r = token / 5, c = token % 5, pr = feature / 32, pc = (feature / 16) % 2, ch = feature % 16;
      EXPECT_EQ(p[static_cast<size_t>(token * 64 + feature)],
                x[static_cast<size_t>((ch * 6 + 2 * r + pr) * 10 + 2 * c + pc)]);
    }
  EXPECT_EQ(unpatchify(tokens, 2, 6, 10).to_vector<float>(), x);
  EXPECT_THAT(error_of([&] { patchify(latent.narrow(1, 0, 5), 2); }), HasSubstr("multiples of 2"));
}

TEST(ZImageForward, MatchesTheAuthorsCode) {
  auto model = load_tiny();
  const std::vector<Tensor> out = run(*model, case_inputs());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].shape(), (Shape{16, 6, 10}));
  EXPECT_EQ(out[1].shape(), (Shape{16, 8, 4}));
  const double authors = worst_error(out, open_fixture("authors_case.safetensors"), "output_");
  std::printf("Z-Image f32 output vs the authors' code %.3g\n", authors);
  EXPECT_LE(authors, 1e-5);
}

TEST(ZImageForward, BatchedEqualsOneSampleAtATime) {
  auto model = load_tiny();
  Inputs in = case_inputs();
  const std::vector<Tensor> batched = run(*model, in);
  double worst = 0;
  for (size_t i = 0; i < 2; ++i) {
    Inputs one{{in.latents[i]}, {in.captions[i]}, in.t.narrow(0, static_cast<int64_t>(i), 1).contiguous()};
    const double error = relative_to_max(run(*model, one)[0], batched[i]);
    EXPECT_LE(error, 1e-5) << i;
    worst = std::max(worst, error);
  }
  std::printf("Z-Image batched (masked) vs one sample at a time: %.3g\n", worst);
  // forward_batch: one size, captions as a padded context with a mask.
  Tensor latents = stack({in.latents[1], in.latents[1]}, 0);
  Tensor context = zeros({2, 40, 32});
  context.narrow(0, 0, 1).narrow(1, 0, 7).copy_from(in.captions[0].reshape({1, 7, 32}));
  context.narrow(0, 1, 1).copy_from(in.captions[1].reshape({1, 40, 32}));
  std::vector<float> mask(80, 0.0f);
  for (int i = 0; i < 7; ++i) mask[static_cast<size_t>(i)] = 1.0f;
  for (int i = 40; i < 80; ++i) mask[static_cast<size_t>(i)] = 1.0f;
  Tensor out;
  {
    autograd::NoGradGuard no_grad;
    out = model->forward_batch(latents, in.t, context, Tensor::from_vector<float>(mask, {2, 40}));
  }
  const std::vector<Tensor> want = run(*model, {{in.latents[1], in.latents[1]}, in.captions, in.t});
  EXPECT_LE(relative_to_max(out.select(0, 0).contiguous(), want[0]), 1e-6);
  EXPECT_LE(relative_to_max(out.select(0, 1).contiguous(), want[1]), 1e-6);
}

TEST(ZImageForward, PadTokensAreAttendedTo) {
  auto model = load_tiny();
  Inputs in = case_inputs();
  const std::vector<Tensor> base = run(*model, in);
  for (const char* name : {"x_pad_token", "cap_pad_token"}) {
    Tensor& slot = model->parameter(name);
    const Tensor saved = slot.clone();
    slot = add(saved, 1.0);
    const std::vector<Tensor> changed = run(*model, in);
    slot = saved;
    EXPECT_GT(relative_to_max(changed[0], base[0]), 1e-3) << name;
  }
}

// Full training: every parameter trainable; the gradients of small tensors on every kind of path (pad tokens, both
// embedders, norms, adaLN and final-layer biases) against torch.
TEST(ZImageFull, GradientsMatchTorch) {
  SafetensorsFile file = open_fixture("case.safetensors");
  auto model = load_tiny();
  model->set_all_trainable(true);
  Inputs in = case_inputs();
  std::vector<Tensor> out = model->forward(in.latents, in.t, in.captions);
  Tensor got = autograd::concat({autograd::flatten(out[0]), autograd::flatten(out[1])}, 0);
  Tensor want = concat({file.get("full_target_0").flatten(), file.get("full_target_1").flatten()}, 0);
  Tensor loss = autograd::mse_loss(got, want);
  const double loss_error = std::fabs(loss.item() - file.get("full_loss").item()) / file.get("full_loss").item();
  autograd::GradientStore grads = autograd::backward(loss);
  EXPECT_EQ(grads.size(), model->named_parameters().size()) << "every parameter gets a gradient";
  double worst = 0;
  std::string worst_name;
  int n = 0;
  for (const std::string& name : file.names()) {
    if (name.rfind("grad.", 0) != 0) continue;
    const std::string parameter = name.substr(5);
    const Tensor grad = grads.get(model->parameter(parameter));
    ASSERT_TRUE(grad.defined()) << parameter;
    const double error = relative_to_max(grad, file.get(name));
    EXPECT_LE(error, 1e-4) << parameter;
    if (error > worst) worst = error, worst_name = parameter;
    ++n;
  }
  EXPECT_EQ(n, 29);
  std::printf("Z-Image full training vs torch: loss %.3g, worst of %d parameter gradients %.3g (%s)\n", loss_error, n,
              worst, worst_name.c_str());
  EXPECT_LE(loss_error, 1e-5);
}

TEST(ZImageForward, BadInputsAreClearErrors) {
  auto model = load_tiny();
  Inputs in = case_inputs();
  auto call = [&](const Inputs& i) { return error_of([&] { run(*model, i); }); };
  Inputs odd = in;
  odd.latents[1] = in.latents[1].narrow(1, 0, 7).contiguous();
  EXPECT_THAT(call(odd), HasSubstr("latent 1"));
  Inputs channels = in;
  channels.latents[0] = in.latents[0].narrow(0, 0, 4).contiguous();
  EXPECT_THAT(call(channels), HasSubstr("is not [16, H, W]"));
  Inputs caption = in;
  caption.captions[0] = in.captions[0].narrow(1, 0, 31).contiguous();
  EXPECT_THAT(call(caption), HasSubstr("caption 0"));
  Inputs missing = in;
  missing.captions.pop_back();
  EXPECT_THAT(call(missing), HasSubstr("one caption per latent"));
  Inputs t = in;
  t.t = in.t.narrow(0, 0, 1).contiguous();
  EXPECT_THAT(call(t), HasSubstr("must be a floating [2]"));
  // The caption axis of the tiny model's RoPE holds 256 positions: a 300-token caption does not fit.
  Inputs long_caption = in;
  long_caption.captions[0] = zeros({300, 32});
  EXPECT_THAT(call(long_caption), HasSubstr("beyond axes_lens 256"));
  EXPECT_THAT(error_of([&] { model->check_latent_size(6, 7); }), HasSubstr("multiples of 2"));
  EXPECT_THAT(error_of([] { ZImageTransformer bad(ZImageConfig{.dim = 64, .n_heads = 2}); }),
              HasSubstr("axes_dims [32, 48, 48] sums to 128 but the head width is 32"));
  EXPECT_THAT(error_of([] {
                ZImageTransformer bad(ZImageConfig{
                    .dim = 64, .n_heads = 2, .rope = {.axes_dims = {16, 16}, .axes_lens = {256, 64}, .theta = 256.0}});
              }),
              HasSubstr("three each"));
}

}  // namespace
}  // namespace wick::zimage
