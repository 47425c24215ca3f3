// The SDXL UNet (models/sdxl) against diffusers 0.42.1 on a tiny random 3-level UNet: fixtures from
// tests/reference/make_sdxl_fixtures.py in tests/data/sdxl (model_channels 8, levels 8/16/16 wide, 2 resnets per
// level, attention at levels 1 and 2 with transformer depth 1 and 2 and 2 in the middle, heads of 8, linear
// projections, context 32, pooled 16 + 6 size sinusoids of 8, 4 GroupNorm groups), latents 16x16 and 8x12, 7 text
// tokens, timesteps 261 and 999; f32. The script also runs Stability AI's own sgm UNetModel on the LDM-named file
// (equal to diffusers bitwise) and diffusers' own LDM converter (bitwise), so matching diffusers here is matching sgm.
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
#include "models/sdxl/sdxl_blocks.h"
#include "models/sdxl/sdxl_unet.h"
#include "models/sdxl/sdxl_weights.h"
#include "models/weights/weight_source.h"
#include "runtime/ops/creation.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/test_data.h"

namespace wick::sdxl {
namespace {

using ::testing::HasSubstr;
using wick::testing::error_of;

const char* const kLatents[] = {"square", "wide"};
const ConfigHints kTinyHints{.head_dim = 8, .norm_groups = 4, .size_embed_dim = 8};

std::string fixture_path(const std::string& name) { return wick::testing::test_data_dir() + "/sdxl/" + name; }
SafetensorsFile open_fixture(const std::string& name) { return SafetensorsFile::open(fixture_path(name)); }

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

// The tiny UNet of the fixture, loaded from the LDM single file (or the diffusers folder).
struct Loaded {
  WeightSource source;
  std::shared_ptr<Unet> model;
};

Loaded load_model(const std::string& path = "tiny_ldm.safetensors", DType dtype = DType::F32) {
  WeightSource source = WeightSource::open(fixture_path(path), "unet");
  DetectedFormat format = detect_weight_format(source);
  UnetConfig c = config_from_shapes(mapped_shapes(source, format), kTinyHints);
  c.dtype = dtype;
  c.initialize = false;
  auto model = std::make_shared<Unet>(c);
  load_mapped(*model, source, format);
  return {std::move(source), model};
}

Tensor run(Unet& model, const SafetensorsFile& inputs, const std::string& latents, DType dtype = DType::F32) {
  return model.forward(inputs.get("latents_" + latents).to(dtype), inputs.get("timesteps"),
                       inputs.get("context").to(dtype), inputs.get("pooled").to(dtype), inputs.get("time_ids"));
}

std::map<std::string, Shape> ldm_shapes(const WeightSource& source) {
  return mapped_shapes(source, detect_weight_format(source));
}

TEST(SdxlConfig, FromShapesOfTheTinyUnet) {
  WeightSource source = WeightSource::open(fixture_path("tiny_ldm.safetensors"));
  const std::map<std::string, Shape> shapes = ldm_shapes(source);
  EXPECT_EQ(shapes.count("first_stage_model.decoder.conv_in.weight"), 0u) << "the VAE beside the UNet is not read";
  const UnetConfig c = config_from_shapes(shapes, kTinyHints);
  EXPECT_EQ(c.in_channels, 4);
  EXPECT_EQ(c.out_channels, 4);
  EXPECT_EQ(c.model_channels, 8);
  EXPECT_EQ(c.channel_mult, (std::vector<int64_t>{1, 2, 2}));
  EXPECT_EQ(c.num_res_blocks, 2);
  EXPECT_EQ(c.transformer_depth, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(c.transformer_depth_middle, 2);
  EXPECT_EQ(c.time_embed_dim, 32);
  EXPECT_EQ(c.context_dim, 32);
  EXPECT_EQ(c.adm_in_channels, 64);
  EXPECT_EQ(c.pooled_dim(), 16);
  EXPECT_TRUE(c.linear_projection);
  EXPECT_EQ(c.heads(16), 2);
  // The shapes are exactly the UNet's parameters, under the same names; the module tree names them the same way.
  EXPECT_EQ(parameter_shapes(c), shapes);
  UnetConfig built = c;
  built.dtype = DType::F32;
  Unet model(built);
  std::map<std::string, Shape> model_shapes;
  for (auto& [name, tensor] : model.named_parameters()) model_shapes[name] = tensor.shape();
  EXPECT_EQ(model_shapes, shapes);
  EXPECT_EQ(model.summary(), "SDXL-like UNet (3 levels 8/16/16, transformer depth 0/1/2, middle 2, f32)");
  // The index arithmetic: level 1's first resnet is input_blocks.4, the upsamplers sit after the transformers.
  EXPECT_EQ(input_block_index(c, 1, 0), 4);
  EXPECT_EQ(downsample_index(c, 0), 3);
  EXPECT_EQ(output_block_index(c, 2, 0), 0);
  EXPECT_EQ(upsample_path(c, 2), "output_blocks.2.2.conv");
  EXPECT_EQ(upsample_path(c, 1), "output_blocks.5.2.conv");
}

TEST(SdxlConfig, RealSizes) {
  // Parameter counts as diffusers' UNet2DConditionModel has them (SDXL base's config; SD 1.5's and SD 2.1's).
  struct Expected {
    UnetConfig config;
    const char* name;
    int64_t n_parameters;
  };
  UnetConfig sd15{.channel_mult = {1, 2, 4, 4}, .transformer_depth = {1, 1, 1, 0}, .transformer_depth_middle = 1,
                  .head_dim = 0, .num_heads = 8, .context_dim = 768, .adm_in_channels = 0, .linear_projection = false};
  UnetConfig sd21 = sd15;
  sd21.head_dim = 64, sd21.num_heads = 0, sd21.context_dim = 1024, sd21.linear_projection = true;
  for (const Expected& e : {Expected{UnetConfig::sdxl_base(), "SDXL base", 2567463684},
                            Expected{sd15, "SD 1.x UNet", 859520964}, Expected{sd21, "SD 2.x UNet", 865910724}}) {
    SCOPED_TRACE(e.name);
    const std::map<std::string, Shape> shapes = parameter_shapes(e.config);
    int64_t n = 0;
    for (auto& [name, shape] : shapes) n += numel(shape);
    EXPECT_EQ(n, e.n_parameters);
    EXPECT_EQ(variant_name(e.config), e.name);
    const UnetConfig back =
        config_from_shapes(shapes, {.head_dim = e.config.head_dim, .num_heads = e.config.num_heads});
    EXPECT_EQ(back.channel_mult, e.config.channel_mult);
    EXPECT_EQ(back.transformer_depth, e.config.transformer_depth);
    EXPECT_EQ(back.transformer_depth_middle, e.config.transformer_depth_middle);
    EXPECT_EQ(back.linear_projection, e.config.linear_projection);
    EXPECT_EQ(back.adm_in_channels, e.config.adm_in_channels);
    EXPECT_EQ(parameter_shapes(back), shapes);
  }
  const std::map<std::string, Shape> base = parameter_shapes(UnetConfig::sdxl_base());
  EXPECT_EQ(base.size(), 1680u);
  EXPECT_EQ(base.at("label_emb.0.0.weight"), (Shape{1280, 2816}));
  EXPECT_EQ(base.at("input_blocks.4.1.transformer_blocks.1.attn2.to_k.weight"), (Shape{640, 2048}));
  EXPECT_EQ(base.count("input_blocks.4.1.transformer_blocks.2.attn1.to_q.weight"), 0u);
  EXPECT_EQ(base.at("input_blocks.7.1.transformer_blocks.9.ff.net.0.proj.weight"), (Shape{10240, 1280}));
  EXPECT_EQ(base.at("output_blocks.0.0.in_layers.2.weight"), (Shape{1280, 2560, 3, 3}));
  EXPECT_EQ(base.at("output_blocks.2.0.skip_connection.weight"), (Shape{1280, 1920, 1, 1}));
  EXPECT_EQ(base.at("output_blocks.2.2.conv.weight"), (Shape{1280, 1280, 3, 3}));
  EXPECT_EQ(base.at("output_blocks.5.2.conv.weight"), (Shape{640, 640, 3, 3}));
  EXPECT_EQ(base.at("output_blocks.8.0.skip_connection.weight"), (Shape{320, 640, 1, 1}));
  EXPECT_EQ(base.count("output_blocks.8.1.proj_in.weight"), 0u);
  EXPECT_EQ(base.at("middle_block.1.transformer_blocks.9.attn1.to_out.0.bias"), (Shape{1280}));
  // SD 1.x: the upsampler of its attention-less last level sits in slot 1; 1x1-conv projections.
  const std::map<std::string, Shape> v1 = parameter_shapes(sd15);
  EXPECT_EQ(v1.at("output_blocks.2.1.conv.weight"), (Shape{1280, 1280, 3, 3}));
  EXPECT_EQ(v1.at("input_blocks.1.1.proj_in.weight"), (Shape{320, 320, 1, 1}));
}

TEST(SdxlConfig, BrokenShapeMapsAreDataErrors) {
  const std::map<std::string, Shape> good = ldm_shapes(WeightSource::open(fixture_path("tiny_ldm.safetensors")));
  auto message = [](const std::map<std::string, Shape>& shapes, ConfigHints hints = kTinyHints) {
    try {
      config_from_shapes(shapes, hints);
    } catch (const WickError& e) {
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
  EXPECT_THAT(message(without("input_blocks.0.0.weight")), HasSubstr("'input_blocks.0.0.weight' is missing"));
  EXPECT_THAT(message(without("output_blocks.4.1.transformer_blocks.0.norm2.bias")),
              HasSubstr("'output_blocks.4.1.transformer_blocks.0.norm2.bias' is missing"));
  EXPECT_THAT(message(with("output_blocks.0.0.in_layers.2.weight", {16, 31, 3, 3})),
              HasSubstr("'output_blocks.0.0.in_layers.2.weight' has shape [16, 31, 3, 3]"));
  EXPECT_THAT(message(with("input_blocks.4.1.proj_out.weight", {16, 16, 1, 1})),
              HasSubstr("a 1x1-conv projection is [C, C, 1, 1]"));
  EXPECT_THAT(message(with("output_blocks.1.1.transformer_blocks.2.extra", {1})),
              HasSubstr("'output_blocks.1.1.transformer_blocks.2.extra'"));
  EXPECT_THAT(message(good, {.head_dim = 3, .norm_groups = 4, .size_embed_dim = 8}),
              HasSubstr("do not split into heads of 3 (model.head_dim)"));
  EXPECT_THAT(message(good, {.head_dim = 8, .norm_groups = 3, .size_embed_dim = 8}),
              HasSubstr("do not split into 3 GroupNorm groups"));
  EXPECT_THAT(message(good, {.head_dim = 8, .norm_groups = 4, .size_embed_dim = 16}),
              HasSubstr("is not a pooled vector + 6 sinusoids of 16"));
  std::map<std::string, Shape> prefixed;
  for (auto& [name, shape] : good) prefixed["model.diffusion_model." + name] = shape;
  EXPECT_THAT(message(prefixed), HasSubstr("strip that prefix"));
  EXPECT_THAT(message({{"down_blocks.0.resnets.0.conv1.weight", {8, 8, 3, 3}}}), HasSubstr("diffusers'"));
}

TEST(SdxlForward, MatchesDiffusersInF32) {
  for (const std::string weights : {"tiny_ldm.safetensors", "tiny_diffusers"}) {
    SCOPED_TRACE(weights);
    Loaded loaded = load_model(weights);
    Tensor w = loaded.model->parameter("input_blocks.4.1.transformer_blocks.0.attn1.to_q.weight");
    EXPECT_FALSE(autograd::requires_grad(w));
    if (weights == "tiny_ldm.safetensors") {  // f32 in the file: the parameters view its mapping (zero-copy)
      const SafetensorsFile& file = loaded.source.file_of("model.diffusion_model.out.2.weight");
      auto* begin = file.mapped_data();
      auto* data = static_cast<const uint8_t*>(w.data());
      EXPECT_TRUE(data >= begin && data < begin + file.mapped_bytes());
    }
    SafetensorsFile file = open_fixture("case.safetensors");
    for (const char* latents : kLatents) {
      SCOPED_TRACE(latents);
      Tensor out = run(*loaded.model, file, latents);
      EXPECT_EQ(out.dtype(), DType::F32);
      const double error = relative_to_max(out, file.get(std::string("output_") + latents));
      std::printf("[%s, %s latents %s] f32 forward vs diffusers: max relative error %.3g\n", weights.c_str(), latents,
                  shape_string(file.get(std::string("latents_") + latents).shape()).c_str(), error);
      EXPECT_LE(error, 1e-5);
    }
  }
}

TEST(SdxlForward, PredictTakesTimeOverAThousand) {
  Loaded loaded = load_model();
  SafetensorsFile file = open_fixture("case.safetensors");
  const Tensor timesteps = file.get("timesteps");
  diffusion::Conditioning cond{.context = file.get("context"), .pooled = file.get("pooled"),
                               .size_ids = file.get("time_ids")};
  // t / 1000 in f32 does not always multiply back exactly (127, 251, ...): the UNet rounds to the integer.
  Tensor time = Tensor::from_vector<float>({127.0f / 1000.0f, 999.0f / 1000.0f}, {2});
  Tensor by_time = loaded.model->predict(file.get("latents_wide"), time, cond);
  Tensor direct = loaded.model->forward(file.get("latents_wide"), Tensor::from_vector<float>({127.0f, 999.0f}, {2}),
                                        cond.context, cond.pooled, cond.size_ids);
  EXPECT_EQ(by_time.to_vector<float>(), direct.to_vector<float>());
  // Without size_ids: each sample at its own size (8h, 8w), uncropped.
  Tensor sizes = default_size_conditioning(2, 8, 12, Device::cpu());
  EXPECT_EQ(sizes.to_vector<float>(), (std::vector<float>{64, 96, 0, 0, 64, 96, 64, 96, 0, 0, 64, 96}));
  cond.size_ids = Tensor();
  Tensor defaulted = loaded.model->forward(file.get("latents_wide"), timesteps, cond.context, cond.pooled, Tensor());
  Tensor explicit_sizes = loaded.model->forward(file.get("latents_wide"), timesteps, cond.context, cond.pooled, sizes);
  EXPECT_EQ(defaulted.to_vector<float>(), explicit_sizes.to_vector<float>());
  // The micro-conditioning matters (and its order: swapping h and w within a pair changes the output).
  Tensor swapped = Tensor::from_vector<float>({768, 1024, 0, 0, 128, 128, 896, 640, 16, 32, 96, 64}, {2, 6});
  Tensor out = loaded.model->forward(file.get("latents_square"), timesteps, cond.context, cond.pooled, swapped);
  EXPECT_GT(relative_to_max(out, file.get("output_square")), 1e-3);
}

// bf16 model and inputs against diffusers' bf16 forward (output_bf16_*) and the f32 one. The resnets' GroupNorms
// compute in f32 in both (sgm's GroupNorm32; torch's CPU group_norm in bf16 does its arithmetic in f32 too), so the
// two bf16 evaluations differ only in their rounding order. Measured (relative to max |output|), worst of the two
// latents: wick bf16 vs diffusers bf16 1.17e-2, wick bf16 vs f32 1.04e-2, diffusers' bf16 vs its f32 1.2e-2:
// tolerance 4e-2 (as SD3's and Flux's).
TEST(SdxlForward, Bfloat16AgainstDiffusers) {
  Loaded bf16 = load_model("tiny_ldm.safetensors", DType::BF16);
  SafetensorsFile file = open_fixture("case.safetensors");
  double vs_bf16 = 0, vs_f32 = 0, theirs = 0;
  for (const char* latents : kLatents) {
    Tensor out = run(*bf16.model, file, latents, DType::BF16);
    EXPECT_EQ(out.dtype(), DType::BF16);
    vs_bf16 = std::max(vs_bf16, relative_to_max(out, file.get(std::string("output_bf16_") + latents)));
    vs_f32 = std::max(vs_f32, relative_to_max(out, file.get(std::string("output_") + latents)));
    theirs = std::max(theirs, relative_to_max(file.get(std::string("output_bf16_") + latents),
                                              file.get(std::string("output_") + latents)));
  }
  std::printf("[tiny SDXL] bf16 forward, worst of 2 latents: vs diffusers bf16 %.3g, vs f32 %.3g; diffusers' bf16 vs "
              "its f32 %.3g\n",
              vs_bf16, vs_f32, theirs);
  EXPECT_LE(vs_bf16, 4e-2);
  EXPECT_LE(vs_f32, 4e-2);
}

// LoRA (rank 4, alpha 8 on Linears and 1x1 convs; rank 2, alpha 1 on the 3x3 convs: LoCon) on kohya's conv_dim set,
// and DoRA (rank 4, alpha 8, PEFT's output-axis magnitude) on the transformers' Linears, as the fixture's PEFT
// adapters.
struct LoraRun {
  double loss = 0;
  std::vector<std::pair<std::string, Tensor>> grads;  // lora_down / lora_up (/ magnitude) per module path
  Tensor output;
  double forward_backward_ms = 0;
};

std::vector<std::string> lora_paths(const SafetensorsFile& file) {
  std::vector<std::string> paths;
  const std::string prefix = "ldm.", suffix = ".lora_down";
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

bool spatial_conv(const Module& m) {
  const auto* conv = dynamic_cast<const nn::Conv2d*>(&m);
  return conv != nullptr && conv->kernel_size() > 1;
}

// Wraps the case's modules: the 3x3 convolutions at rank 2, alpha 1; the rest at rank 4, alpha 8.
void apply_case_adapters(Unet& model, const std::string& kind, const std::vector<std::string>& paths) {
  nn::AdapterConfig rest{.type = kind,
                         .patterns = paths,
                         .options = {.rank = 4, .alpha = 8.0, .dora_axis = nn::DoraAxis::Output},
                         .accepts = [](const Module& m) { return !spatial_conv(m); }};
  std::vector<std::string> wrapped = nn::apply_adapters(model, rest).wrapped;
  if (kind == "lora") {
    nn::AdapterConfig convs{.type = kind, .patterns = paths, .options = {.rank = 2, .alpha = 1.0},
                            .accepts = spatial_conv};
    std::vector<std::string> more = nn::apply_adapters(model, convs).wrapped;
    wrapped.insert(wrapped.end(), more.begin(), more.end());
  }
  std::sort(wrapped.begin(), wrapped.end());
  EXPECT_EQ(wrapped, paths);
}

LoraRun run_lora(const std::string& kind, bool checkpointing) {
  SafetensorsFile file = open_fixture(kind + "_case.safetensors");
  Loaded loaded = load_model();
  const std::vector<std::string> paths = lora_paths(file);
  EXPECT_EQ(paths.size(), kind == "lora" ? 257u : 192u);
  apply_case_adapters(*loaded.model, kind, paths);
  for (auto& [path, adapter] : nn::find_adapters(*loaded.model)) {
    copy_into_slot(adapter->down_weight(), file.get("ldm." + path + ".lora_down"));
    copy_into_slot(adapter->up_weight(), file.get("ldm." + path + ".lora_up"));
    if (auto dora = std::dynamic_pointer_cast<nn::DoRALinear>(adapter))
      copy_into_slot(dora->magnitude(), file.get("ldm." + path + ".magnitude"));
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

TEST(SdxlLora, ForwardLossAndGradientsMatchPeft) {
  for (const std::string kind : {"lora", "dora"}) {
    SCOPED_TRACE(kind);
    SafetensorsFile file = open_fixture(kind + "_case.safetensors");
    LoraRun r = run_lora(kind, false);
    const double out_error = relative_to_max(r.output, file.get("output"));
    const double loss_error = std::fabs(r.loss - file.get("loss").item()) / std::fabs(file.get("loss").item());
    double worst = 0, worst_conv = 0;
    std::string worst_name;
    for (auto& [name, grad] : r.grads) {
      ASSERT_TRUE(grad.defined()) << name << " got no gradient";
      const Tensor want = file.get("grad.ldm." + name);
      const double error = relative_to_max(grad.reshape(want.shape()), want);
      EXPECT_LE(error, 1e-4) << name;
      if (error > worst) worst = error, worst_name = name;
      if (want.dim() == 4 && want.size(2) == 3) worst_conv = std::max(worst_conv, error);
    }
    std::printf("[tiny SDXL %s] vs PEFT: output %.3g, loss %.9g vs %.9g (%.3g), worst of %zu adapter gradients %.3g "
                "(%s), worst 3x3-conv LoCon gradient %.3g; forward + backward %.2f ms\n",
                kind.c_str(), out_error, r.loss, file.get("loss").item(), loss_error, r.grads.size(), worst,
                worst_name.c_str(), worst_conv, r.forward_backward_ms);
    EXPECT_LE(out_error, 1e-5);
    EXPECT_LE(loss_error, 1e-5);
  }
}

TEST(SdxlLora, PresetsAndConvTargetsWrapKohyasModules) {
  const Architecture& arch = find_architecture("sdxl");
  EXPECT_EQ(&find_architecture("SDXL_base"), &arch);
  EXPECT_EQ(arch.default_preset(), "all");
  auto wrapped = [&](const std::vector<std::string>& patterns, std::function<bool(const Module&)> accepts = {}) {
    Loaded loaded = load_model();
    std::vector<std::string> out =
        nn::apply_adapters(*loaded.model, {.patterns = patterns, .options = {.rank = 2}, .accepts = accepts}).wrapped;
    std::sort(out.begin(), out.end());
    return out;
  };
  const std::vector<std::string> all = wrapped(arch.targets({"all"}));
  // Every Linear of the 2·1 + 2·2 (down) + 2 (middle) + 3·2 + 3·1 (up) = 17 transformer blocks (10 each) and the 2
  // projections of the 11 transformers.
  EXPECT_EQ(all.size(), 17u * 10 + 11u * 2);
  EXPECT_THAT(all, ::testing::Contains("input_blocks.4.1.transformer_blocks.0.attn1.to_q"));
  EXPECT_THAT(all, ::testing::Contains("middle_block.1.transformer_blocks.1.ff.net.0.proj"));
  EXPECT_THAT(all, ::testing::Contains("output_blocks.5.1.proj_out"));
  EXPECT_EQ(wrapped(arch.targets({"attention"})).size(), 17u * 8);
  EXPECT_EQ(wrapped(arch.targets({"attention_mlp"})).size(), 17u * 10);
  // The fixture's LoCon set = kohya's: all + the conv targets.
  std::vector<std::string> locon = arch.targets({});
  const std::vector<std::string> conv = arch.conv_targets();
  locon.insert(locon.end(), conv.begin(), conv.end());
  EXPECT_EQ(wrapped(locon), lora_paths(open_fixture("lora_case.safetensors")));
  const std::vector<std::string> spatial = wrapped(conv, spatial_conv);
  EXPECT_EQ(spatial.size(), 38u);  // conv1 + conv2 of 17 resnets, 2 downsamplers, 2 upsamplers
  EXPECT_THAT(spatial, ::testing::Contains("output_blocks.2.2.conv"));
  EXPECT_THAT(spatial, ::testing::Contains("input_blocks.6.0.op"));
}

// The forward is bitwise the same with checkpointing; the gradients are not, to the last bits: an input block's
// output feeds three consumers (the next block's GroupNorm and residual, and an output block's skip concat), and
// with checkpointing the next block's two contributions are summed first, so the three add in another order.
TEST(SdxlLora, GradientCheckpointingGivesTheSameGradients) {
  LoraRun plain = run_lora("lora", false), checkpointed = run_lora("lora", true);
  EXPECT_EQ(plain.loss, checkpointed.loss);
  EXPECT_EQ(plain.output.to_vector<float>(), checkpointed.output.to_vector<float>());
  ASSERT_EQ(plain.grads.size(), checkpointed.grads.size());
  double worst = 0;
  for (size_t i = 0; i < plain.grads.size(); ++i) {
    const double error = relative_to_max(checkpointed.grads[i].second, plain.grads[i].second);
    EXPECT_LE(error, 1e-5) << plain.grads[i].first;
    worst = std::max(worst, error);
  }
  std::printf("[tiny SDXL LoRA + LoCon] batch 2, 16x16 latents: forward + backward %.2f ms, with gradient "
              "checkpointing %.2f ms; worst gradient difference %.3g\n",
              plain.forward_backward_ms, checkpointed.forward_backward_ms, worst);
}

TEST(SdxlForward, BadInputsAreClearErrors) {
  Loaded loaded = load_model();
  SafetensorsFile file = open_fixture("case.safetensors");
  const Tensor latents = file.get("latents_square"), t = file.get("timesteps"), context = file.get("context"),
               pooled = file.get("pooled"), ids = file.get("time_ids");
  Unet& m = *loaded.model;
  EXPECT_THAT(error_of([&] { m.forward(latents.narrow(2, 0, 14).contiguous(), t, context, pooled, ids); }),
              HasSubstr("must be multiples of 4"));
  EXPECT_THAT(error_of([&] { m.forward(latents.narrow(1, 0, 3).contiguous(), t, context, pooled, ids); }),
              HasSubstr("this UNet takes 4"));
  EXPECT_THAT(error_of([&] { m.forward(latents, t, context.narrow(2, 0, 31).contiguous(), pooled, ids); }),
              HasSubstr("is not [2, L, 32]"));
  EXPECT_THAT(error_of([&] { m.forward(latents, t, context, pooled.narrow(1, 0, 15).contiguous(), ids); }),
              HasSubstr("is not [2, 16]"));
  EXPECT_THAT(error_of([&] { m.forward(latents, t, context, pooled, ids.narrow(1, 0, 4).contiguous()); }),
              HasSubstr("is not a floating [2, 6]"));
  EXPECT_THAT(error_of([&] { m.forward(latents, t.narrow(0, 0, 1).contiguous(), context, pooled, ids); }),
              HasSubstr("timesteps"));
  EXPECT_THAT(error_of([&] { m.check_latent_size(16, 10); }), HasSubstr("multiples of 4 (images: multiples of 32"));
  m.check_latent_size(8, 12);
}

}  // namespace
}  // namespace wick::sdxl
