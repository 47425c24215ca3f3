// The Qwen-Image transformer (models/qwenimage) against the fixtures of tests/data/qwenimage (tests/reference/
// make_qwenimage_fixtures.py: diffusers 0.42.1's QwenImageTransformer2DModel at MODELS2 section 2.7's tiny config,
// dim 64, 2 heads of 32, 2 blocks, text width 32, axes_dims_rope (8, 12, 12), every parameter random): its config read
// from the weights' shapes, the token layout (packing, centred RoPE positions), the forward from both layouts in f32
// and bf16, a padded batch against one sample at a time, full training and LoRA against torch / PEFT, gradient
// checkpointing, Edit's reference images with and without zero_cond_t, and the errors for bad files and inputs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "engine/autograd/backward.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_loss.h"
#include "models/diffusion/flow_matching.h"
#include "models/nn/adapters.h"
#include "models/nn/timestep_embedding.h"
#include "models/qwenimage/qwenimage.h"
#include "models/qwenimage/qwenimage_weights.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/rope.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/models/arch_parity.h"
#include "tests/models/arch_test_util.h"
#include "tests/models/weights_test_util.h"

namespace wick::qwenimage {
namespace {

using ::testing::HasSubstr;
using wick::testing::copy_into_slot;
using wick::testing::data_path;
using wick::testing::error_of;
using wick::testing::relative_to_max;

const QwenImageJson kTinyJson{.axes_dims = {8, 12, 12}, .patch_size = 2, .zero_cond_t = false};

SafetensorsFile open_fixture(const std::string& name) { return SafetensorsFile::open(data_path("qwenimage/" + name)); }

WeightSource diffusers_source() { return WeightSource::open(data_path("qwenimage/transformer"), "transformer"); }
WeightSource comfyui_source() { return WeightSource::open(data_path("qwenimage/comfyui_bf16.safetensors"), ""); }

std::shared_ptr<QwenImageTransformer> load_tiny(DType dtype = DType::F32) {
  return load_transformer(diffusers_source(), {.dtype = dtype}).model;
}

struct Inputs {
  Tensor latents, sigma, context, mask;
};

Inputs case_inputs(DType dtype = DType::F32) {
  SafetensorsFile file = open_fixture("case.safetensors");
  return {file.get("latents").to(dtype), file.get("sigma"), file.get("context").to(dtype), file.get("context_mask")};
}

Tensor run(QwenImageTransformer& model, const Inputs& in, const std::vector<Tensor>& references = {}) {
  autograd::NoGradGuard no_grad;
  return model.forward(in.latents, in.sigma, in.context, in.mask, references);
}

int64_t count(const std::map<std::string, Shape>& shapes) {
  int64_t n = 0;
  for (auto& [name, shape] : shapes) n += numel(shape);
  return n;
}

// atan2(sin, cos) of wick's RoPE tables for `positions`: the angles diffusers' complex tables hold.
Tensor angles(const Tensor& positions) {
  RopeTables t = rope_frequencies(positions, kTinyJson.axes_dims, 10000.0);
  std::vector<float> c = t.cos.to_vector<float>(), s = t.sin.to_vector<float>(), out(c.size());
  for (size_t i = 0; i < c.size(); ++i) out[i] = std::atan2(s[i], c[i]);
  return Tensor::from_vector<float>(out, t.cos.shape());
}

TEST(QwenImageConfig, FromShapesOfTheTinyModel) {
  WeightSource source = diffusers_source();
  EXPECT_EQ(detect_weight_format(source).format.name, "diffusers");
  const std::map<std::string, Shape> shapes = mapped_shapes(source, detect_weight_format(source));
  QwenImageConfig c = config_from_shapes(shapes, config_json_of(source.path()));
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.n_heads, 2);
  EXPECT_EQ(c.head_dim(), 32);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.mlp_hidden, 256);
  EXPECT_EQ(c.text_dim, 32);
  EXPECT_EQ(c.in_channels, 64);
  EXPECT_EQ(c.out_channels, 16);
  EXPECT_EQ(c.patch_size, 2);
  EXPECT_FALSE(c.zero_cond_t);
  // From the config.json beside the weights, not the released model's defaults.
  EXPECT_EQ(c.axes_dims, kTinyJson.axes_dims);
  EXPECT_EQ(count(parameter_shapes(c)), 338400);  // MODELS2 section 2.7
  EXPECT_EQ(parameter_shapes(c).size(), 77u);
  EXPECT_EQ(parameter_shapes(c), shapes);
}

TEST(QwenImageConfig, RealSizeNamesAndCount) {
  QwenImageConfig released;
  std::map<std::string, Shape> shapes = parameter_shapes(released);
  EXPECT_EQ(count(shapes), 20430401088);  // MODELS2 section 2.1
  EXPECT_EQ(shapes.at("transformer_blocks.59.attn.add_q_proj.weight"), (Shape{3072, 3072}));
  EXPECT_EQ(shapes.at("transformer_blocks.0.img_mod.1.weight"), (Shape{18432, 3072}));
  EXPECT_EQ(shapes.at("transformer_blocks.0.txt_mlp.net.0.proj.weight"), (Shape{12288, 3072}));
  EXPECT_EQ(shapes.at("transformer_blocks.0.attn.norm_added_k.weight"), (Shape{128}));
  EXPECT_EQ(shapes.at("txt_norm.weight"), (Shape{3584}));
  EXPECT_EQ(shapes.at("txt_in.weight"), (Shape{3072, 3584}));
  EXPECT_EQ(shapes.at("norm_out.linear.weight"), (Shape{6144, 3072}));
  EXPECT_EQ(shapes.at("proj_out.weight"), (Shape{64, 3072}));
  QwenImageConfig read = config_from_shapes(shapes);
  EXPECT_EQ(read.n_heads, 24);
  EXPECT_EQ(read.n_layers, 60);
  EXPECT_EQ(read.axes_dims, (std::vector<int64_t>{16, 56, 56}));
  EXPECT_EQ(block_paths(released).size(), 60u);
  EXPECT_EQ(block_paths(released).back(), "transformer_blocks.59");
}

TEST(QwenImageConfig, BrokenShapeMapsAreDataErrors) {
  WeightSource source = diffusers_source();
  const std::map<std::string, Shape> good = mapped_shapes(source, detect_weight_format(source));
  auto message = [](const std::map<std::string, Shape>& shapes, QwenImageJson json = kTinyJson) {
    return wick::testing::shape_map_error([&](const auto& s) { config_from_shapes(s, json); }, shapes);
  };
  auto without = [&](const std::string& name) { return wick::testing::without(good, name); };
  auto with = [&](const std::string& name, Shape shape) { return wick::testing::with(good, name, std::move(shape)); };
  EXPECT_THAT(message(without("img_in.weight")), HasSubstr("'img_in.weight' is missing"));
  EXPECT_THAT(message(without("txt_norm.weight")), HasSubstr("'txt_norm.weight' is missing"));
  EXPECT_THAT(message(without("transformer_blocks.1.attn.norm_added_k.weight")),
              HasSubstr("'transformer_blocks.1.attn.norm_added_k.weight' is missing"));
  EXPECT_THAT(message(with("transformer_blocks.0.txt_mlp.net.2.weight", {64, 128})),
              HasSubstr("'transformer_blocks.0.txt_mlp.net.2.weight' has shape [64, 128]"));
  EXPECT_THAT(message(with("proj_out.weight", {60, 64})), HasSubstr("proj_out.weight has 60 rows"));
  EXPECT_THAT(message(with("transformer_blocks.3.attn.to_q.weight", {64, 64})), HasSubstr("a block is missing"));
  EXPECT_THAT(message(with("transformer_blocks.0.attn.extra.weight", {64, 64})),
              HasSubstr("'transformer_blocks.0.attn.extra.weight' [64, 64] is not a parameter"));
  EXPECT_THAT(message(good, QwenImageJson{}),
              HasSubstr("axes_dims_rope [16, 56, 56] sums to 128 but the head width is 32"));
  std::map<std::string, Shape> comfy;
  for (auto& [name, shape] : good) comfy["model.diffusion_model." + name] = shape;
  EXPECT_THAT(message(comfy), HasSubstr("ComfyUI's prefix"));
}

// Packing in (c, ph, pw) order and the centred positions of an odd, non-square grid, against diffusers.
TEST(QwenImageLayout, PackingAndRopeAsDiffusers) {
  SafetensorsFile file = open_fixture("case.safetensors");
  Tensor latents = file.get("latents");  // [2, 16, 6, 10]: 3 x 5 tokens
  Tensor tokens = pack_latents(latents, 2);
  EXPECT_EQ(tokens.to_vector<float>(), file.get("hidden_states").to_vector<float>());
  EXPECT_EQ(unpack_latents(tokens, 2, 6, 10).to_vector<float>(), latents.to_vector<float>());

  const std::vector<TokenGrid> t2i{{3, 5}};
  Tensor img = image_positions(t2i);
  // Rows -2, -1, 0 and columns -3 .. 1: the extra index of an odd size on the negative side.
  EXPECT_EQ(img.narrow(0, 0, 1).to_vector<float>(), (std::vector<float>{0, -2, -3}));
  EXPECT_EQ(img.narrow(0, 14, 1).to_vector<float>(), (std::vector<float>{0, 0, 1}));
  // Text after max(3 / 2, 5 / 2) = 2 on all three axes.
  EXPECT_EQ(text_positions(t2i, 9).narrow(0, 0, 1).to_vector<float>(), (std::vector<float>{2, 2, 2}));
  EXPECT_LE(wick::testing::max_abs_difference(angles(img), file.get("rope_image_angles")), 1e-5);
  EXPECT_LE(wick::testing::max_abs_difference(angles(text_positions(t2i, 9)), file.get("rope_text_angles")), 1e-5);

  // Edit: a 4 x 8 reference at frame 1; the text starts after max over all images (8 / 2 = 4).
  SafetensorsFile edit = open_fixture("edit_case.safetensors");
  const std::vector<TokenGrid> grids{{3, 5}, {4, 8}};
  EXPECT_EQ(text_positions(grids, 9).narrow(0, 0, 1).to_vector<float>(), (std::vector<float>{4, 4, 4}));
  EXPECT_EQ(image_positions(grids).narrow(0, 15, 1).to_vector<float>(), (std::vector<float>{1, -2, -4}));
  EXPECT_LE(wick::testing::max_abs_difference(angles(image_positions(grids)), edit.get("rope_image_angles")), 1e-5);
  EXPECT_LE(wick::testing::max_abs_difference(angles(text_positions(grids, 9)), edit.get("rope_text_angles")), 1e-5);
}

// The sinusoid of sigma x 1000 ([cos, sin], diffusers' rounding order) and the timestep embedding. The "_exact"
// references are diffusers' with its frequency table correctly rounded: torch's f32 exp rounds some of the 128
// constants differently on different CPUs (entries 12 and 106 on the machine that made the fixtures), and with
// angles of hundreds of radians one ulp there moves a feature by ~2e-5 and the tiny model's output by ~1.2e-5.
TEST(QwenImageForward, TimestepEmbeddingAsDiffusers) {
  SafetensorsFile file = open_fixture("case.safetensors");
  const Tensor features = nn::timestep_features_scaled_after(file.get("sigma"), 1000.0, DType::F32);
  const double exact = wick::testing::max_abs_difference(features, file.get("timestep_features_exact"));
  const double torch_table = wick::testing::max_abs_difference(features, file.get("timestep_features"));
  autograd::NoGradGuard no_grad;
  const double temb = relative_to_max(load_tiny()->child("time_text_embed")->forward(features), file.get("temb_exact"));
  std::printf(
      "Qwen-Image timestep features vs diffusers: %.3g (correctly rounded table), %.3g (this torch's table); "
      "embedding %.3g\n",
      exact, torch_table, temb);
  EXPECT_LE(exact, 1e-6);
  EXPECT_LE(torch_table, 1e-4);
  EXPECT_LE(temb, 1e-6);
}

TEST(QwenImageForward, F32MatchesDiffusersFromBothLayouts) {
  SafetensorsFile file = open_fixture("case.safetensors");
  const Inputs in = case_inputs();
  const Tensor from_folder = run(*load_tiny(), in);
  WeightSource comfy = comfyui_source();
  LoadedQwenImage loaded = load_transformer(comfy, {.dtype = DType::F32, .json = kTinyJson});
  EXPECT_EQ(loaded.format.format.name, "comfyui");
  EXPECT_EQ(loaded.format.prefix, "model.diffusion_model.");
  const Tensor from_comfyui = run(*loaded.model, in);
  EXPECT_EQ(from_folder.to_vector<float>(), from_comfyui.to_vector<float>());
  const double exact = relative_to_max(from_folder, file.get("output_exact"));
  const double torch_table = relative_to_max(from_folder, file.get("output"));
  std::printf(
      "Qwen-Image f32 output vs diffusers (both layouts): %.3g (correctly rounded sinusoid table), %.3g "
      "(this torch's table)\n",
      exact, torch_table);
  EXPECT_LE(exact, 1e-5);
  EXPECT_LE(torch_table, 3e-5);
}

TEST(QwenImageForward, Bf16NearDiffusersBf16) {
  SafetensorsFile file = open_fixture("case.safetensors");
  Tensor out = run(*load_tiny(DType::BF16), case_inputs(DType::BF16));
  EXPECT_EQ(out.dtype(), DType::BF16);
  const double vs_bf16 = relative_to_max(out.to(DType::F32), file.get("output_bf16"));
  const double vs_f32 = relative_to_max(out.to(DType::F32), file.get("output"));
  std::printf("Qwen-Image bf16 output: %.3g from diffusers bf16, %.3g from diffusers f32\n", vs_bf16, vs_f32);
  EXPECT_LE(vs_bf16, 3e-2);
  EXPECT_LE(vs_f32, 3e-2);
}

TEST(QwenImageForward, PaddedBatchEqualsOneSampleAtATime) {
  auto model = load_tiny();
  const Inputs in = case_inputs();
  const Tensor batched = run(*model, in);
  const int64_t lengths[] = {5, 9};
  double worst = 0;
  for (int64_t b = 0; b < 2; ++b) {
    Inputs one{in.latents.narrow(0, b, 1).contiguous(), in.sigma.narrow(0, b, 1).contiguous(),
               in.context.narrow(0, b, 1).narrow(1, 0, lengths[b]).contiguous(), Tensor()};
    const double error = relative_to_max(run(*model, one), batched.narrow(0, b, 1).contiguous());
    EXPECT_LE(error, 1e-5) << b;
    worst = std::max(worst, error);
  }
  std::printf("Qwen-Image padded batch vs one sample at a time: %.3g\n", worst);
  // The padding rows' values do not reach the output.
  Inputs other = in;
  other.context = in.context.clone();
  other.context.narrow(0, 0, 1).narrow(1, 5, 4).copy_from(full({1, 4, 32}, 5.0f));
  EXPECT_EQ(run(*model, other).to_vector<float>(), batched.to_vector<float>());
}

// Full training: every parameter trainable; the gradients of small tensors on every kind of path against torch.
TEST(QwenImageFull, GradientsMatchTorch) {
  SafetensorsFile file = open_fixture("case.safetensors");
  auto model = load_tiny();
  model->set_all_trainable(true);
  const Inputs in = case_inputs();
  Tensor loss = autograd::mse_loss(model->forward(in.latents, in.sigma, in.context, in.mask), file.get("full_target"));
  const double loss_error = std::fabs(loss.item() - file.get("full_loss").item()) / file.get("full_loss").item();
  autograd::GradientStore grads = autograd::backward(loss);
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
  EXPECT_EQ(n, 22);
  std::printf("Qwen-Image full training vs torch: loss %.3g, worst of %d parameter gradients %.3g (%s)\n", loss_error,
              n, worst, worst_name.c_str());
  EXPECT_LE(loss_error, 1e-5);
}

struct LoraResult {
  Tensor output;
  double loss = 0;
  std::map<std::string, Tensor> grads;  // "<path>.lora_down" / ".lora_up"
};

// PEFT's adapters (r 4, alpha 8) on every Linear of the blocks, from lora_case.safetensors; with `swapper`, both
// blocks' frozen weights streamed by it.
LoraResult run_lora(bool checkpointing, std::shared_ptr<BlockSwapper> swapper = nullptr) {
  SafetensorsFile file = open_fixture("lora_case.safetensors");
  auto model = load_tiny();
  const std::vector<std::string> paths = wick::testing::lora_paths(file, "lora.");
  EXPECT_EQ(paths.size(), 28u);
  std::vector<std::string> wrapped =
      nn::apply_adapters(*model, {.type = "lora", .patterns = paths, .options = {.rank = 4, .alpha = 8.0}}).wrapped;
  std::sort(wrapped.begin(), wrapped.end());
  EXPECT_EQ(wrapped, paths);
  for (auto& [path, adapter] : nn::find_adapters(*model)) {
    copy_into_slot(adapter->down_weight(), file.get("lora." + path + ".lora_down"));
    copy_into_slot(adapter->up_weight(), file.get("lora." + path + ".lora_up"));
  }
  model->set_gradient_checkpointing(checkpointing);
  if (swapper) {
    for (const std::string& block : model->block_paths())
      swapper->add_block(block, *model->child("transformer_blocks")->child(block.substr(block.rfind('.') + 1)));
    model->set_block_swapper(swapper);
  }
  const Inputs in = case_inputs();
  LoraResult r;
  r.output = model->forward(in.latents, in.sigma, in.context, in.mask);
  Tensor loss = autograd::mse_loss(r.output, file.get("target"));
  r.loss = loss.item();
  autograd::GradientStore grads = autograd::backward(loss);
  for (auto& [path, adapter] : nn::find_adapters(*model)) {
    r.grads[path + ".lora_down"] = grads.get(adapter->down_weight());
    r.grads[path + ".lora_up"] = grads.get(adapter->up_weight());
  }
  return r;
}

TEST(QwenImageLora, MatchesPeft) {
  SafetensorsFile file = open_fixture("lora_case.safetensors");
  EXPECT_EQ(file.get("rank").item(), 4.0);
  EXPECT_EQ(file.get("alpha").item(), 8.0);
  LoraResult r = run_lora(false);
  const double output = relative_to_max(autograd::detach(r.output), file.get("output"));
  const double loss = std::fabs(r.loss - file.get("loss").item()) / file.get("loss").item();
  double worst = 0;
  int n = 0, dead = 0;
  for (const auto& [name, grad] : r.grads) {
    if (!file.contains("grad.lora." + name)) {
      // The last block's text-only Linears (add_q_proj, to_add_out, txt_mlp): only the image stream is output.
      EXPECT_THAT(name, HasSubstr("transformer_blocks.1."));
      if (grad.defined()) {
        EXPECT_EQ(wick::testing::max_abs_difference(grad, zeros_like(grad)), 0.0) << name;
      }
      ++dead;
      continue;
    }
    ASSERT_TRUE(grad.defined()) << name;
    const double error = relative_to_max(grad, file.get("grad.lora." + name));
    EXPECT_LE(error, 1e-4) << name;
    worst = std::max(worst, error);
    ++n;
  }
  EXPECT_EQ(n, 48);
  EXPECT_EQ(dead, 8);
  std::printf("Qwen-Image LoRA vs PEFT: output %.3g, loss %.3g, worst of %d adapter gradients %.3g\n", output, loss, n,
              worst);
  EXPECT_LE(output, 1e-5);
  EXPECT_LE(loss, 1e-5);
}

TEST(QwenImageLora, CheckpointingGivesBitwiseTheSameGradients) {
  LoraResult plain = run_lora(false), checkpointed = run_lora(true);
  EXPECT_TRUE(wick::testing::same_bits(autograd::detach(plain.output), autograd::detach(checkpointed.output)));
  EXPECT_EQ(plain.loss, checkpointed.loss);
  ASSERT_EQ(plain.grads.size(), checkpointed.grads.size());
  for (const auto& [name, grad] : plain.grads) {
    const Tensor& other = checkpointed.grads.at(name);
    if (grad.defined() && other.defined()) {
      EXPECT_TRUE(wick::testing::same_bits(grad, other)) << name;
      continue;
    }
    // The last block's text-only adapters reach nothing: no gradient, or zeros where the checkpoint's
    // recomputation hands back a zero gradient for the block's unused text output.
    EXPECT_THAT(name, HasSubstr("transformer_blocks.1."));
    for (const Tensor& g : {grad, other})
      if (g.defined()) {
        EXPECT_EQ(wick::testing::max_abs_difference(g, zeros_like(g)), 0.0) << name;
      }
  }
}

// Block swapping (engine/block_swap.h; on the CPU the device copies are host copies): bitwise the same training step.
TEST(QwenImageLora, BlockSwappingGivesBitwiseTheSameStep) {
  LoraResult plain = run_lora(true);
  auto swapper = std::make_shared<BlockSwapper>(Device::cpu());
  LoraResult swapped = run_lora(true, swapper);
  EXPECT_TRUE(wick::testing::same_bits(autograd::detach(plain.output), autograd::detach(swapped.output)));
  for (const auto& [name, grad] : plain.grads)
    if (grad.defined()) {
      EXPECT_TRUE(wick::testing::same_bits(grad, swapped.grads.at(name))) << name;
    }
  // Each block copied in forward and again for its checkpoint's recomputation.
  EXPECT_GE(swapper->stats().n_block_copies, 4);
}

TEST(QwenImageEdit, ReferenceTokensWithAndWithoutZeroCondT) {
  SafetensorsFile file = open_fixture("edit_case.safetensors");
  const Inputs in = case_inputs();
  const Tensor reference = file.get("reference");  // [2, 16, 8, 16]: 4 x 8 tokens at frame 1
  const double edit = relative_to_max(run(*load_tiny(), in, {reference}), file.get("output_exact"));
  QwenImageJson json = kTinyJson;
  json.zero_cond_t = true;
  auto zero_cond = load_transformer(diffusers_source(), {.dtype = DType::F32, .json = json}).model;
  const Tensor zero_out = run(*zero_cond, in, {reference});
  const double zero = relative_to_max(zero_out, file.get("output_zero_cond_t_exact"));
  EXPECT_LE(relative_to_max(zero_out, file.get("output_zero_cond_t")), 3e-5);  // diffusers' own table
  std::printf("Qwen-Image Edit vs diffusers: %.3g, with zero_cond_t %.3g\n", edit, zero);
  EXPECT_LE(edit, 1e-5);
  EXPECT_LE(zero, 1e-5);
  // zero_cond_t without references is the plain model.
  EXPECT_LE(relative_to_max(run(*zero_cond, in), open_fixture("case.safetensors").get("output_exact")), 1e-5);
}

// diffusers' training step (train_dreambooth_lora_qwen_image.py, make_qwenimage_fixtures.py flow_matching_case): the
// noisy latents through predict() (sigma in, the velocity out, no sign change) and wick's flow-matching loss against
// eps - x0 give diffusers' prediction and loss.
TEST(QwenImageDiffusion, FlowMatchingStepMatchesDiffusersTrainingStep) {
  SafetensorsFile file = open_fixture("flow_matching_case.safetensors");
  const Tensor x0 = file.get("x0"), noise = file.get("noise"), sigma = file.get("sigma");
  const std::vector<float> x0_values = x0.to_vector<float>(), noise_values = noise.to_vector<float>(),
                           sigmas = sigma.to_vector<float>();
  std::vector<float> noisy(x0_values.size()), target(x0_values.size());
  const size_t per_sample = x0_values.size() / sigmas.size();
  for (size_t i = 0; i < noisy.size(); ++i) {
    const float s = sigmas[i / per_sample];
    noisy[i] = (1.0f - s) * x0_values[i] + s * noise_values[i];
    target[i] = noise_values[i] - x0_values[i];
  }
  auto model = load_tiny();
  const Inputs in = case_inputs();
  const diffusion::Conditioning cond{.context = in.context, .context_mask = in.mask};
  autograd::NoGradGuard no_grad;
  const Tensor pred = model->predict(Tensor::from_vector<float>(noisy, x0.shape()), sigma, cond);
  const Tensor loss = diffusion::flow_matching_loss(pred, Tensor::from_vector<float>(target, x0.shape()));
  const double pred_error = relative_to_max(pred, file.get("prediction"));
  const double loss_error = std::fabs(loss.item() - file.get("loss").item()) / file.get("loss").item();
  std::printf("Qwen-Image flow-matching step vs diffusers: prediction %.3g, loss %.3g (loss %.6f)\n", pred_error,
              loss_error, loss.item());
  EXPECT_LE(pred_error, 1e-5);
  EXPECT_LE(loss_error, 1e-5);
  EXPECT_EQ(model->arch_name(), "qwenimage");
  EXPECT_EQ(model->summary(), "Qwen-Image (2 blocks, dim 64, f32)");
}

// A copy of the tiny ComfyUI file with `edit` applied to its tensors, in a scratch folder.
std::string edited_comfyui(const std::string& name,
                           const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit) {
  SafetensorsFile file = open_fixture("comfyui_bf16.safetensors");
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& tensor : file.names()) tensors.emplace_back(tensor, file.get(tensor));
  edit(tensors);
  const std::string path = (wick::testing::scratch_dir("qwenimage_" + name) / "model.safetensors").string();
  save_safetensors(path, tensors, {{"format", "pt"}});
  return path;
}

ErrorKind kind_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const WickError& error) {
    return error.kind();
  }
  ADD_FAILURE() << "no WickError thrown";
  return ErrorKind::Usage;
}

TEST(QwenImageWeights, BadFilesAreDataErrorsNamingTheTensor) {
  const std::string prefix = "model.diffusion_model.";
  auto load = [](const std::string& path) {
    return [path] { load_transformer(WeightSource::open(path, ""), {.dtype = DType::F32, .json = kTinyJson}); };
  };
  const std::string missing = edited_comfyui("missing", [&](auto& tensors) {
    std::erase_if(tensors, [&](const auto& t) { return t.first == prefix + "transformer_blocks.1.txt_mod.1.bias"; });
  });
  EXPECT_EQ(kind_of(load(missing)), ErrorKind::Data);
  EXPECT_THAT(error_of(load(missing)), HasSubstr("transformer_blocks.1.txt_mod.1.bias"));
  const std::string shape = edited_comfyui("shape", [&](auto& tensors) {
    for (auto& [name, t] : tensors)
      if (name == prefix + "transformer_blocks.0.attn.norm_added_q.weight") t = t.narrow(0, 0, 16).contiguous();
  });
  EXPECT_EQ(kind_of(load(shape)), ErrorKind::Data);
  EXPECT_THAT(error_of(load(shape)), HasSubstr("transformer_blocks.0.attn.norm_added_q.weight"));
  const std::string extra = edited_comfyui("extra", [&](auto& tensors) {
    tensors.emplace_back(prefix + "transformer_blocks.0.attn.to_qkv.weight", zeros({192, 64}, DType::BF16));
  });
  EXPECT_EQ(kind_of(load(extra)), ErrorKind::Data);
  EXPECT_THAT(error_of(load(extra)), HasSubstr("transformer_blocks.0.attn.to_qkv.weight"));
  const std::string other = edited_comfyui("other", [&](auto& tensors) {
    std::erase_if(tensors, [&](const auto& t) { return t.first == prefix + "txt_norm.weight"; });
  });
  EXPECT_EQ(kind_of(load(other)), ErrorKind::Data);
  EXPECT_THAT(error_of(load(other)), HasSubstr("txt_norm.weight"));
  // Edit-2511's marker turns zero_cond_t on and is not loaded.
  const std::string marked = edited_comfyui("marked", [&](auto& tensors) {
    tensors.emplace_back(prefix + "__index_timestep_zero__", zeros({1}, DType::BF16));
  });
  LoadedQwenImage loaded = load_transformer(WeightSource::open(marked, ""), {.dtype = DType::F32, .json = kTinyJson});
  EXPECT_TRUE(loaded.model->config().zero_cond_t);
  EXPECT_EQ(loaded.report.n_ignored, 1);
}

TEST(QwenImageForward, BadInputsAreClearErrors) {
  auto model = load_tiny();
  const Inputs in = case_inputs();
  auto call = [&](const Inputs& i) { return error_of([&] { run(*model, i); }); };
  Inputs odd = in;
  odd.latents = in.latents.narrow(2, 0, 5).contiguous();
  EXPECT_THAT(call(odd), HasSubstr("multiples of 2"));
  Inputs channels = in;
  channels.latents = in.latents.narrow(1, 0, 4).contiguous();
  EXPECT_THAT(call(channels), HasSubstr("is not [B, 16, H, W]"));
  Inputs context = in;
  context.context = in.context.narrow(2, 0, 31).contiguous();
  EXPECT_THAT(call(context), HasSubstr("context"));
  Inputs mask = in;
  mask.mask = in.mask.narrow(1, 0, 4).contiguous();
  EXPECT_THAT(call(mask), HasSubstr("context_mask"));
  Inputs sigma = in;
  sigma.sigma = in.sigma.narrow(0, 0, 1).contiguous();
  EXPECT_THAT(call(sigma), HasSubstr("must be a floating [2]"));
  EXPECT_THAT(error_of([&] { model->check_latent_size(6, 7); }), HasSubstr("multiples of 2"));
  EXPECT_THAT(error_of([] { QwenImageTransformer bad(QwenImageConfig{.dim = 64, .n_heads = 2}); }),
              HasSubstr("axes_dims [16, 56, 56] sums to 128 but the head width is 32"));
}

}  // namespace
}  // namespace wick::qwenimage
