// What every architecture's model must show against its reference at a tiny size, one row per architecture whose
// datasets are encoded from images (the registry's encodable_architectures()): the f32 forward against diffusers, the
// bf16 forward against diffusers' bf16 and f32 ones, the tiny files holding exactly the parameters its config names,
// LoRA / DoRA forward, loss and adapter gradients against PEFT, and gradient checkpointing against none. What only
// one architecture has (its config's sizes, Flux's latent packing, SD3's position table, SDXL's size conditioning,
// its LoRA presets, its input checks) is in <arch>_test.cpp; a new architecture adds its row to kRows.
//
// Fixtures: tests/data/<arch>, written by tests/reference/make_<arch>_fixtures.py with diffusers 0.42.1 and PEFT
// 0.21.2 on tiny random models (each README lists the tensors; f32):
//   flux: dev and schnell (hidden 32, 2 heads of 16, 2 double + 2 single blocks, axes_dim [4, 6, 6], context 32,
//         pooled 24, 4 latent channels; latents [2, 4, 6, 10], 7 text tokens). The script also checks its BFL-named
//         weights against Black Forest Labs' own code (3.3e-7 dev, 2.2e-7 schnell), so matching diffusers is
//         matching BFL.
//   sd3:  medium (3 blocks, attn2 in 0 and 1, QK norm), large (2 blocks, QK norm), sd3 (2 blocks, neither); hidden
//         32, 4 heads of 8, patch 2, 16 latent channels, context 32, pooled 64, a 6x6 position table; latents 8x8
//         and 6x10 (cropped from the table) and 12x12 (the whole table), 7 text tokens. Also checked against Stability
//         AI's mmditx.py / sd3_impls.py (<= 3.5e-7) and diffusers' own SAI converter (bitwise).
//   sdxl: a 3-level UNet (model_channels 8, levels 8/16/16 wide, 2 resnets per level, attention at levels 1 and 2
//         with transformer depth 1 and 2 and 2 in the middle, heads of 8, linear projections, context 32, pooled 16
//         + 6 size sinusoids of 8, 4 GroupNorm groups), latents 16x16 and 8x12, 7 text tokens, timesteps 261 and
//         999. Also run through Stability AI's sgm UNetModel on the LDM-named file and diffusers' LDM converter
//         (both bitwise equal to diffusers).
//   zimage: dim 64, 2 heads of 32, 2 layers + 1 noise and 1 context refiner, cap_feat_dim 32, axes_dims [8, 12, 12],
//         every parameter random and bf16-exact (the diffusers folder and the ComfyUI file are bf16); one batch of two
//         samples of different sizes, latents [16, 6, 10] and [16, 8, 4], captions of 7 and 40 tokens, t 0.27 and
//         0.81. The authors' code gives diffusers' output bit for bit (zimage_test.cpp checks wick against it).
//         Measured f32: 3.2e-6 and 8.4e-6, almost all of it the t_embedder's sinusoid (tests/data/zimage/README.md).
// Metric, per tensor: max_i |wick_i - ref_i| / max_i |ref_i|.
//
// bf16: the model and inputs in bf16 against diffusers' bf16 forward (output_bf16*) and the f32 one. Measured
// (relative to max |output|), worst over the latents:
//   flux (diffusers and BFL round σ and σ x 1000, and guidance, to bf16 before the sinusoidal embedding; wick embeds
//   the caller's f32 values, as ComfyUI does; on these random weights that rounding alone moves diffusers' output by
//   0.5 (dev) / 0.2 (schnell), so the bf16 arithmetic is compared with diffusers' rounded products
//   (*_scaled_bf16 / 1000 as timesteps)):
//     wick bf16, diffusers' rounded t/g vs output_bf16:   dev 8.1e-3, schnell 8.3e-3
//     wick bf16, f32 t/g vs output (f32):                  dev 1.0e-2, schnell 1.0e-2
//     diffusers' own output_bf16 vs output_f32_bf16t:      dev 1.5e-2, schnell 1.0e-2
//     two bf16 evaluations with different rounding orders, each about 1e-2 from f32: tolerance 2.5e-2.
//   sd3 (diffusers does not round SD3's timestep to bf16, so the two bf16 evaluations differ only in their rounding
//   order):
//     wick bf16 vs diffusers bf16:   medium 7.8e-3, large 9.6e-3, sd3 8.8e-3
//     wick bf16 vs f32:              medium 1.2e-2, large 1.8e-2, sd3 1.4e-2
//     diffusers' bf16 vs its f32:    medium 1.1e-2, large 2.1e-2, sd3 1.2e-2: tolerance 4e-2.
//   sdxl (the resnets' GroupNorms compute in f32 in both: sgm's GroupNorm32; torch's CPU group_norm in bf16 does its
//   arithmetic in f32 too): wick bf16 vs diffusers bf16 1.17e-2, wick bf16 vs f32 1.04e-2, diffusers' bf16 vs its
//   f32 1.2e-2: tolerance 4e-2 (as SD3's).
//   zimage: wick bf16 vs diffusers bf16 1.65e-2, wick bf16 vs f32 3.8e-2, diffusers' bf16 vs its f32 2.2e-2:
//   tolerance 5e-2.
//   qwenimage: wick bf16 vs diffusers bf16 7.3e-3, wick bf16 vs f32 1.45e-2, diffusers' bf16 vs its f32 1.34e-2:
//   tolerance 3e-2. f32: 1.14e-5 from diffusers' own output (both layouts), 7.2e-7 from output_exact.
//
// LoRA: rank 4, alpha 8 on every Linear of the blocks, as the fixture's PEFT adapters merged per module of the
// original names (the fused qkv / linear1 share one lora_down; lora_up is the row concatenation; SD3's last block's
// context modulation in SAI's (shift, scale) order); DoRA (rank 4, alpha 8, PEFT's output-axis magnitude); SDXL's
// LoRA on kohya's conv_dim set (LoCon: its 3x3 convolutions at rank 2, alpha 1); Z-Image's LoRA on the main layers'
// attention and SwiGLU Linears, its loss over both samples. Gradient checkpointing: bitwise for Flux, SD3 and
// Z-Image; for SDXL the forward is bitwise, the gradients not to the last bits (an input block's output feeds three
// consumers: the next block's GroupNorm and residual, and an output block's skip concat; with checkpointing
// the next block's two contributions are summed first, so the three add in another order).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/autograd/backward.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_join.h"
#include "engine/autograd/ops_layout.h"
#include "engine/autograd/ops_loss.h"
#include "models/flux/flux.h"
#include "models/nn/adapters.h"
#include "models/nn/conv.h"
#include "models/qwenimage/qwenimage.h"
#include "models/qwenimage/qwenimage_weights.h"
#include "models/registry.h"
#include "models/sd3/sd3.h"
#include "models/sdxl/sdxl_unet.h"
#include "models/sdxl/sdxl_weights.h"
#include "models/weights/weight_source.h"
#include "models/zimage/zimage.h"
#include "models/zimage/zimage_weights.h"
#include "runtime/ops/elementwise.h"
#include "runtime/safetensors.h"
#include "tests/models/arch_parity.h"
#include "tests/models/arch_test_util.h"

namespace wick::testing {
namespace {

template <typename Model>
Model& as(DiffusionModel& model) {
  return dynamic_cast<Model&>(model);
}

template <typename Model>
std::map<std::string, Shape> shapes_of(const Model& model) {
  std::map<std::string, Shape> out;
  for (auto& [name, tensor] : model.named_parameters()) out[name] = tensor.shape();
  return out;
}

// ---- the rows ----

const std::vector<int64_t> kFluxTinyAxes = {4, 6, 6};

ParityArch flux_row() {
  const std::vector<ParityCase> variants = {{"dev", "dev_bfl.safetensors", "dev_case.safetensors", {""}, true},
                                            {"schnell", "schnell_bfl.safetensors", "schnell_case.safetensors", {""},
                                             true}};
  return {
      .name = "flux",
      .fixtures = "flux",
      .f32 = variants,
      .f32_tolerance = 1e-5,
      .zero_copy_parameter = "double_blocks.0.img_attn.qkv.weight",
      .bf16 = variants,
      .bf16_tolerance = 2.5e-2,
      .mixed_precision = true,
      .bf16_reference_f32 = "output_f32_bf16t",
      .diffusers_rounds_time = true,
      .tiny_files = {"dev_bfl.safetensors", "schnell_bfl.safetensors"},
      .lora_weights = "dev_bfl.safetensors",
      // 10 Linears per double block, 3 per single block.
      .lora_kinds = {{"lora", "dev_lora_case.safetensors", 2u * 10 + 2u * 3, "[dev LoRA]"}},
      .lora_prefix = "bfl.",
      .lora_latents = "",
      .lora_file_has_rank = true,
      .locon = false,
      .checkpointing_tolerance = 0,
      .checkpointing_label = "",  // FluxLora.CpuStepTime prints the times
      .load_path =
          [](const std::string& path, DType dtype) {
            auto file = std::make_shared<SafetensorsFile>(SafetensorsFile::open(path));
            flux::FluxConfig c = flux::config_from_shapes(flux::tensor_shapes(*file), kFluxTinyAxes);
            c.dtype = dtype;
            auto model = std::make_shared<flux::FluxTransformer>(c);
            load_parameters(*model, *file);
            return LoadedModel{file, model, file.get()};
          },
      .run = [](DiffusionModel& model, const SafetensorsFile& in, const std::string&, DType dtype,
                bool diffusers_time) {
        Tensor timesteps = in.get("timestep"), guidance;
        if (in.contains("guidance")) guidance = in.get("guidance");
        if (diffusers_time) {  // the time and guidance diffusers' bf16 forward embeds
          timesteps = wick::div(in.get("timestep_scaled_bf16"), 1000.0);
          if (guidance.defined()) guidance = wick::div(in.get("guidance_scaled_bf16"), 1000.0);
        }
        return as<flux::FluxTransformer>(model).forward(in.get("latents").to(dtype), timesteps,
                                                        in.get("context").to(dtype), in.get("pooled").to(dtype),
                                                        guidance);
      },
      .loss_input = [](const Tensor& output) { return flux::pack_latents(output); },
      .shapes = [](const std::string& path) -> std::vector<std::map<std::string, Shape>> {
        const std::map<std::string, Shape> shapes = flux::tensor_shapes(SafetensorsFile::open(path));
        flux::FluxConfig c = flux::config_from_shapes(shapes, kFluxTinyAxes);
        c.dtype = DType::F32;
        return {shapes, flux::parameter_shapes(c), shapes_of(flux::FluxTransformer(c))};
      },
  };
}

ParityArch sd3_row() {
  std::vector<ParityCase> variants;
  for (const std::string v : {"medium", "large", "sd3"})
    variants.push_back({v, v + "_sai.safetensors", v + "_case.safetensors", {"square", "wide", "full"}, true});
  // The sd3 variant has no ln_q to give the head width: 8 is given.
  auto config_of = [](const SafetensorsFile& file) { return sd3::config_from_shapes(file_shapes(file), 8); };
  return {
      .name = "sd3",
      .fixtures = "sd3",
      .f32 = variants,
      .f32_tolerance = 1e-5,
      .zero_copy_parameter = "joint_blocks.0.x_block.attn.qkv.weight",
      .bf16 = variants,
      .bf16_tolerance = 4e-2,
      .mixed_precision = true,
      .tiny_files = {"medium_sai.safetensors", "large_sai.safetensors", "sd3_sai.safetensors"},
      .lora_weights = "medium_sai.safetensors",
      // 7 per block, attn2 qkv/proj in 2 blocks, context proj/fc1/fc2 in 2.
      .lora_kinds = {{"lora", "medium_lora_case.safetensors", 31, "[medium lora] vs PEFT:"},
                     {"dora", "medium_dora_case.safetensors", 31, "[medium dora] vs PEFT:"}},
      .lora_prefix = "sai.",
      .lora_latents = "square",
      .lora_file_has_rank = true,
      .locon = false,
      .checkpointing_tolerance = 0,
      .checkpointing_label = "[medium LoRA] tiny model, batch 2, 16 image + 7 text tokens",
      .load_path =
          [config_of](const std::string& path, DType dtype) {
            auto file = std::make_shared<SafetensorsFile>(SafetensorsFile::open(path));
            sd3::Sd3Config c = config_of(*file);
            c.dtype = dtype;
            c.initialize = false;
            auto model = std::make_shared<sd3::MMDiT>(c);
            load_parameters(*model, *file);
            return LoadedModel{file, model, file.get()};
          },
      .run = [](DiffusionModel& model, const SafetensorsFile& in, const std::string& latents, DType dtype, bool) {
        return as<sd3::MMDiT>(model).forward(in.get(case_key("latents", latents)).to(dtype), in.get("sigma"),
                                             in.get("context").to(dtype), in.get("pooled").to(dtype));
      },
      .loss_input = [](const Tensor& output) { return output; },
      .shapes = [config_of](const std::string& path) -> std::vector<std::map<std::string, Shape>> {
        const SafetensorsFile file = SafetensorsFile::open(path);
        sd3::Sd3Config c = config_of(file);
        c.dtype = DType::F32;
        return {file_shapes(file), sd3::parameter_shapes(c), shapes_of(sd3::MMDiT(c))};
      },
  };
}

const sdxl::ConfigHints kSdxlTinyHints{.head_dim = 8, .norm_groups = 4, .size_embed_dim = 8};

ParityArch sdxl_row() {
  const std::vector<std::string> latents = {"square", "wide"};
  return {
      .name = "sdxl",
      .fixtures = "sdxl",
      .f32 = {{"tiny_ldm.safetensors", "tiny_ldm.safetensors", "case.safetensors", latents, true},
              {"tiny_diffusers", "tiny_diffusers", "case.safetensors", latents, false}},
      .f32_tolerance = 1e-5,
      .zero_copy_parameter = "input_blocks.4.1.transformer_blocks.0.attn1.to_q.weight",
      .bf16 = {{"tiny SDXL", "tiny_ldm.safetensors", "case.safetensors", latents}},
      .bf16_tolerance = 4e-2,
      .mixed_precision = false,
      .tiny_files = {"tiny_ldm.safetensors"},
      .lora_weights = "tiny_ldm.safetensors",
      .lora_kinds = {{"lora", "lora_case.safetensors", 257, "[tiny SDXL lora] vs PEFT:"},
                     {"dora", "dora_case.safetensors", 192, "[tiny SDXL dora] vs PEFT:"}},
      .lora_prefix = "ldm.",
      .lora_latents = "square",
      .lora_file_has_rank = false,
      .locon = true,
      .checkpointing_tolerance = 1e-5,
      .checkpointing_label = "[tiny SDXL LoRA + LoCon] batch 2, 16x16 latents",
      .load_path =
          [](const std::string& path, DType dtype) {
            auto source = std::make_shared<WeightSource>(WeightSource::open(path, "unet"));
            DetectedFormat format = sdxl::detect_weight_format(*source);
            sdxl::UnetConfig c = sdxl::config_from_shapes(mapped_shapes(*source, format), kSdxlTinyHints);
            c.dtype = dtype;
            c.initialize = false;
            auto model = std::make_shared<sdxl::Unet>(c);
            load_mapped(*model, *source, format);
            const SafetensorsFile* file = source->files().size() == 1 ? &source->file_of(source->names().front())
                                                                       : nullptr;
            return LoadedModel{source, model, file};
          },
      .run = [](DiffusionModel& model, const SafetensorsFile& in, const std::string& latents, DType dtype, bool) {
        return as<sdxl::Unet>(model).forward(in.get(case_key("latents", latents)).to(dtype), in.get("timesteps"),
                                             in.get("context").to(dtype), in.get("pooled").to(dtype),
                                             in.get("time_ids"));
      },
      .loss_input = [](const Tensor& output) { return output; },
      .shapes = [](const std::string& path) -> std::vector<std::map<std::string, Shape>> {
        const WeightSource source = WeightSource::open(path);
        const std::map<std::string, Shape> shapes = mapped_shapes(source, sdxl::detect_weight_format(source));
        sdxl::UnetConfig c = sdxl::config_from_shapes(shapes, kSdxlTinyHints);
        c.dtype = DType::F32;
        return {shapes, sdxl::parameter_shapes(c), shapes_of(sdxl::Unet(c))};
      },
  };
}

// The fixture's RoPE layout (its config.json has it; the ComfyUI file has none).
const zimage::ZImageRope kZImageTinyRope{.axes_dims = {8, 12, 12}, .axes_lens = {256, 64, 64}, .theta = 256.0};

// Z-Image's cases are one batch of two samples of different sizes (latents_0 [16, 6, 10], latents_1 [16, 8, 4],
// captions of 7 and 40 tokens): the latents "0" and "1" are the batch's two outputs; "" (the LoRA case, whose loss is
// over both) is the two flattened and concatenated, as the fixture's "output" and "target" are.
ParityArch zimage_row() {
  const std::vector<std::string> samples = {"0", "1"};
  return {
      .name = "zimage",
      .fixtures = "zimage",
      // bf16 files: the f32 model is a copy of them.
      .f32 = {{"diffusers", "diffusers", "case.safetensors", samples, false},
              {"comfyui_bf16.safetensors", "comfyui_bf16.safetensors", "case.safetensors", samples, false}},
      .f32_tolerance = 1e-5,
      .zero_copy_parameter = "layers.1.attention.to_q.weight",
      .bf16 = {{"tiny Z-Image", "diffusers", "case.safetensors", samples}},
      .bf16_tolerance = 5e-2,
      .mixed_precision = true,
      .tiny_files = {"diffusers"},
      .lora_weights = "diffusers",
      // to_q, to_k, to_v, to_out.0, w1, w2, w3 of the 2 main layers.
      .lora_kinds = {{"lora", "lora_case.safetensors", 14, "[Z-Image lora] vs PEFT:"}},
      .lora_prefix = "lora.",
      .lora_latents = "",
      .lora_file_has_rank = true,
      .locon = false,
      .checkpointing_tolerance = 0,
      .checkpointing_label = "[Z-Image LoRA] tiny model, 2 samples of 15 and 8 image tokens, 7 and 40 caption tokens",
      .load_path =
          [](const std::string& path, DType dtype) {
            auto source = std::make_shared<WeightSource>(WeightSource::open(path, "transformer"));
            std::shared_ptr<zimage::ZImageTransformer> model =
                zimage::load_transformer(*source, {.dtype = dtype, .rope = kZImageTinyRope}).model;
            return LoadedModel{source, model, nullptr};
          },
      .run = [](DiffusionModel& model, const SafetensorsFile& in, const std::string& latents, DType dtype, bool) {
        const std::vector<Tensor> out = as<zimage::ZImageTransformer>(model).forward(
            {in.get("latents_0").to(dtype), in.get("latents_1").to(dtype)}, in.get("timestep"),
            {in.get("caption_0").to(dtype), in.get("caption_1").to(dtype)});
        if (latents.empty()) return autograd::concat({autograd::flatten(out[0]), autograd::flatten(out[1])}, 0);
        return out.at(std::stoul(latents));
      },
      .loss_input = [](const Tensor& output) { return output; },
      .shapes = [](const std::string& path) -> std::vector<std::map<std::string, Shape>> {
        const WeightSource source = WeightSource::open(path, "transformer");
        const std::map<std::string, Shape> shapes = mapped_shapes(source, zimage::detect_weight_format(source));
        zimage::ZImageConfig c = zimage::config_from_shapes(shapes, kZImageTinyRope);
        c.dtype = DType::F32;
        return {shapes, zimage::parameter_shapes(c), shapes_of(zimage::ZImageTransformer(c))};
      },
  };
}

// Qwen-Image's case is a padded batch of two (latents [2, 16, 6, 10], context [2, 9, 32] with context_mask, sigma):
// one "latents". Its "output" is diffusers' own f32 forward, whose sinusoid table torch's libm rounds (two entries
// differ from the correctly rounded ones on the machine that made the fixtures; the README): that alone is 1.1e-5
// of it, so the f32 bound is 2e-5 (qwenimage_test.cpp checks 7.2e-7 against output_exact, the table rounded right).
ParityArch qwenimage_row() {
  return {
      .name = "qwenimage",
      .fixtures = "qwenimage",
      // bf16 files: the f32 model is a copy of them. The ComfyUI file records no RoPE layout: the folder's is given.
      .f32 = {{"transformer", "transformer", "case.safetensors", {""}, false},
              {"comfyui_bf16.safetensors", "comfyui_bf16.safetensors", "case.safetensors", {""}, false}},
      .f32_tolerance = 2e-5,
      .zero_copy_parameter = "transformer_blocks.1.attn.to_q.weight",
      .bf16 = {{"tiny Qwen-Image", "transformer", "case.safetensors", {""}}},
      .bf16_tolerance = 3e-2,
      .mixed_precision = true,
      .tiny_files = {"transformer"},
      .lora_weights = "transformer",
      // Every Linear of the 2 blocks (14 each); the last block's text-only ones get no gradient.
      .lora_kinds = {{"lora", "lora_case.safetensors", 28, "[Qwen-Image lora] vs PEFT:"},
                     {"dora", "dora_case.safetensors", 28, "[Qwen-Image dora] vs PEFT:"}},
      .lora_prefix = "lora.",
      .lora_latents = "",
      .lora_file_has_rank = true,
      .locon = false,
      .checkpointing_tolerance = 0,
      .checkpointing_label = "[Qwen-Image LoRA] tiny model, batch 2, 15 image + 9 text tokens",
      .load_path =
          [](const std::string& path, DType dtype) {
            auto source = std::make_shared<WeightSource>(WeightSource::open(path, "transformer"));
            const qwenimage::QwenImageJson json = qwenimage::config_json_of(data_path("qwenimage/transformer"));
            std::shared_ptr<qwenimage::QwenImageTransformer> model =
                qwenimage::load_transformer(*source, {.dtype = dtype, .json = json}).model;
            return LoadedModel{source, model, nullptr};
          },
      .run =
          [](DiffusionModel& model, const SafetensorsFile& in, const std::string&, DType dtype, bool) {
            return as<qwenimage::QwenImageTransformer>(model).forward(
                in.get("latents").to(dtype), in.get("sigma"), in.get("context").to(dtype), in.get("context_mask"));
          },
      .loss_input = [](const Tensor& output) { return output; },
      .shapes = [](const std::string& path) -> std::vector<std::map<std::string, Shape>> {
        const WeightSource source = WeightSource::open(path, "transformer");
        const std::map<std::string, Shape> shapes = mapped_shapes(source, qwenimage::detect_weight_format(source));
        qwenimage::QwenImageConfig c = qwenimage::config_from_shapes(shapes, qwenimage::config_json_of(path));
        c.dtype = DType::F32;
        return {shapes, qwenimage::parameter_shapes(c), shapes_of(qwenimage::QwenImageTransformer(c))};
      },
  };
}

// One row per architecture whose datasets are encoded from images; a new one adds its line.
const std::vector<std::pair<std::string, ParityArch (*)()>> kRows = {
    {"flux", flux_row},
    {"sd3", sd3_row},
    {"sdxl", sdxl_row},
    {"zimage", zimage_row},
    {"qwenimage", qwenimage_row},
};

// ---- the tests every row runs ----

class ArchParity : public ::testing::TestWithParam<std::string> {
 protected:
  const ParityArch& row() const { return parity_arch(GetParam()); }
};

TEST_P(ArchParity, TinyFilesHoldExactlyTheParametersOfTheirConfig) {
  for (const std::string& file : row().tiny_files) {
    SCOPED_TRACE(file);
    // The file's shapes, its config's parameter_shapes, a model built from the config.
    const std::vector<std::map<std::string, Shape>> shapes = row().shapes(row().path(file));
    ASSERT_EQ(shapes.size(), 3u);
    EXPECT_EQ(shapes[1], shapes[0]);
    EXPECT_EQ(shapes[2], shapes[0]);
  }
}

TEST_P(ArchParity, ForwardMatchesDiffusersInF32) {
  const ParityArch& a = row();
  for (const ParityCase& c : a.f32) {
    SCOPED_TRACE(c.label);
    LoadedModel loaded = a.load(c.weights);
    // Loading is frozen, and zero-copy from an f32 file: the parameters view its mapping.
    const Tensor w = loaded.model->parameter(a.zero_copy_parameter);
    EXPECT_FALSE(autograd::requires_grad(w));
    if (c.zero_copy) {
      ASSERT_NE(loaded.file, nullptr);
      EXPECT_TRUE(in_mapping(w, *loaded.file));
    }
    const SafetensorsFile inputs = a.open(c.inputs);
    for (const std::string& latents : c.latents) {
      SCOPED_TRACE(latents);
      const Tensor out = a.run(*loaded.model, inputs, latents, DType::F32, false);
      EXPECT_EQ(out.dtype(), DType::F32);
      const double error = relative_to_max(out, inputs.get(case_key("output", latents)));
      const std::string label =
          latents.empty() ? c.label
                          : c.label + ", " + latents + " latents " +
                                shape_string(inputs.get(case_key("latents", latents)).shape());
      std::printf("[%s] f32 forward vs diffusers: max relative error %.3g\n", label.c_str(), error);
      EXPECT_LE(error, a.f32_tolerance);
    }
  }
}

TEST_P(ArchParity, Bfloat16AgainstDiffusers) {
  const ParityArch& a = row();
  for (const ParityCase& c : a.bf16) {
    SCOPED_TRACE(c.label);
    LoadedModel bf16 = a.load(c.weights, DType::BF16);
    LoadedModel f32 = a.mixed_precision ? a.load(c.weights) : LoadedModel{};
    const SafetensorsFile inputs = a.open(c.inputs);
    double vs_bf16 = 0, vs_f32 = 0, f32_time_vs_bf16 = 0, theirs = 0;
    for (const std::string& latents : c.latents) {
      const Tensor out = a.run(*bf16.model, inputs, latents, DType::BF16, false);
      EXPECT_EQ(out.dtype(), DType::BF16);
      const Tensor want_bf16 = inputs.get(case_key("output_bf16", latents));
      const Tensor want_f32 = inputs.get(case_key("output", latents));
      vs_f32 = std::max(vs_f32, relative_to_max(out, want_f32));
      f32_time_vs_bf16 = std::max(f32_time_vs_bf16, relative_to_max(out, want_bf16));
      vs_bf16 = std::max(vs_bf16, a.diffusers_rounds_time
                                      ? relative_to_max(a.run(*bf16.model, inputs, latents, DType::BF16, true),
                                                        want_bf16)
                                      : relative_to_max(out, want_bf16));
      theirs = std::max(theirs,
                        relative_to_max(want_bf16, inputs.get(case_key(a.bf16_reference_f32, latents))));
      if (a.mixed_precision) {  // f32 parameters, bf16 latents and conditioning: computes in bf16 as well
        const Tensor mixed = a.run(*f32.model, inputs, latents, DType::BF16, false);
        EXPECT_EQ(mixed.dtype(), DType::BF16);
        EXPECT_LE(relative_to_max(mixed, want_f32), a.bf16_tolerance);
      }
    }
    if (a.diffusers_rounds_time)
      std::printf("[%s] bf16 forward: rounded t/g vs diffusers bf16 %.3g; f32 t/g vs f32 %.3g (vs diffusers bf16 "
                  "%.3g); diffusers bf16 vs its f32 with rounded t/g %.3g\n",
                  c.label.c_str(), vs_bf16, vs_f32, f32_time_vs_bf16, theirs);
    else
      std::printf("[%s] bf16 forward, worst of %zu latents: vs diffusers bf16 %.3g, vs f32 %.3g; diffusers' bf16 vs "
                  "its f32 %.3g\n",
                  c.label.c_str(), c.latents.size(), vs_bf16, vs_f32, theirs);
    EXPECT_LE(vs_bf16, a.bf16_tolerance);
    EXPECT_LE(vs_f32, a.bf16_tolerance);
  }
}

TEST_P(ArchParity, LoraForwardLossAndGradientsMatchPeft) {
  const ParityArch& a = row();
  for (const LoraCase& lora : a.lora_kinds) {
    SCOPED_TRACE(lora.kind);
    const SafetensorsFile file = a.open(lora.inputs);
    const LoraRun r = run_lora(a, lora, false);
    const double out_error = relative_to_max(r.output, file.get("output"));
    const double loss_error = std::fabs(r.loss - file.get("loss").item()) / std::fabs(file.get("loss").item());
    double worst = 0, worst_conv = 0;
    std::string worst_name;
    for (auto& [name, grad] : r.grads) {
      const std::string key = "grad." + a.lora_prefix + name;
      const double error = gradient_error(grad, file, key);
      EXPECT_LE(error, 1e-4) << name;
      if (error > worst) worst = error, worst_name = name;
      const bool conv3x3 = file.contains(key) && file.get(key).dim() == 4 && file.get(key).size(2) == 3;
      if (conv3x3) worst_conv = std::max(worst_conv, error);
    }
    char locon[64] = "";
    if (a.locon) std::snprintf(locon, sizeof locon, ", worst 3x3-conv LoCon gradient %.3g", worst_conv);
    std::printf("%s output %.3g, loss %.9g vs %.9g (%.3g), worst of %zu adapter gradients %.3g (%s)%s; forward + "
                "backward %.2f ms\n",
                lora.label.c_str(), out_error, r.loss, file.get("loss").item(), loss_error, r.grads.size(), worst,
                worst_name.c_str(), locon, r.forward_backward_ms);
    EXPECT_LE(out_error, 1e-5);
    EXPECT_LE(loss_error, 1e-5);
  }
}

TEST_P(ArchParity, GradientCheckpointingGivesTheSameGradients) {
  const ParityArch& a = row();
  const LoraRun plain = run_lora(a, a.lora_kinds.at(0), false), checkpointed = run_lora(a, a.lora_kinds.at(0), true);
  EXPECT_EQ(plain.loss, checkpointed.loss);
  EXPECT_EQ(plain.output.to_vector<float>(), checkpointed.output.to_vector<float>());
  ASSERT_EQ(plain.grads.size(), checkpointed.grads.size());
  double worst = 0;
  for (size_t i = 0; i < plain.grads.size(); ++i) {
    if (a.checkpointing_tolerance == 0) {
      EXPECT_EQ(plain.grads[i].second.to_vector<float>(), checkpointed.grads[i].second.to_vector<float>())
          << plain.grads[i].first;
      continue;
    }
    const double error = relative_to_max(checkpointed.grads[i].second, plain.grads[i].second);
    EXPECT_LE(error, a.checkpointing_tolerance) << plain.grads[i].first;
    worst = std::max(worst, error);
  }
  if (a.checkpointing_label.empty()) return;
  char difference[64] = "";
  if (a.checkpointing_tolerance > 0)
    std::snprintf(difference, sizeof difference, "; worst gradient difference %.3g", worst);
  std::printf("%s: forward + backward %.2f ms, with gradient checkpointing %.2f ms%s\n", a.checkpointing_label.c_str(),
              plain.forward_backward_ms, checkpointed.forward_backward_ms, difference);
}

std::vector<std::string> encodable_names() {
  std::vector<std::string> names;
  for (const Architecture* arch : encodable_architectures()) names.push_back(arch->name());
  return names;
}

INSTANTIATE_TEST_SUITE_P(Registry, ArchParity, ::testing::ValuesIn(encodable_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

bool spatial_conv(const Module& m) {
  const auto* conv = dynamic_cast<const nn::Conv2d*>(&m);
  return conv != nullptr && conv->kernel_size() > 1;
}

}  // namespace

// ---- arch_parity.h ----

std::string ParityArch::path(const std::string& file) const { return data_path(fixtures + "/" + file); }

const ParityArch& parity_arch(const std::string& name) {
  static std::map<std::string, ParityArch> made;
  auto it = made.find(name);
  if (it != made.end()) return it->second;
  for (const auto& [row_name, make_row] : kRows)
    if (row_name == name) return made.emplace(name, make_row()).first->second;
  ADD_FAILURE() << "tests/models/arch_parity_test.cpp has no row for the architecture '" << name
                << "': add one to kRows";
  throw std::runtime_error("no parity row for " + name);
}

LoraRun run_lora(const ParityArch& a, const LoraCase& lora, bool checkpointing) {
  const SafetensorsFile file = a.open(lora.inputs);
  LoadedModel loaded = a.load(a.lora_weights);
  DiffusionModel& model = *loaded.model;
  const std::vector<std::string> paths = lora_paths(file, a.lora_prefix);
  EXPECT_EQ(paths.size(), lora.n_modules);
  if (a.lora_file_has_rank) {
    EXPECT_EQ(file.get("rank").item(), 4.0);
    EXPECT_EQ(file.get("alpha").item(), 8.0);
  }
  // The adapters of the fixture's modules; with LoCon, the 3x3 convolutions take their own rank and alpha.
  nn::AdapterConfig adapters{.type = lora.kind,
                             .patterns = paths,
                             .options = {.rank = 4, .alpha = 8.0, .dora_axis = nn::DoraAxis::Output}};
  if (a.locon) adapters.accepts = [](const Module& m) { return !spatial_conv(m); };
  std::vector<std::string> wrapped = nn::apply_adapters(model, adapters).wrapped;
  if (a.locon && lora.kind == "lora") {
    nn::AdapterConfig convs{.type = lora.kind, .patterns = paths, .options = {.rank = 2, .alpha = 1.0},
                            .accepts = spatial_conv};
    std::vector<std::string> more = nn::apply_adapters(model, convs).wrapped;
    wrapped.insert(wrapped.end(), more.begin(), more.end());
  }
  std::sort(wrapped.begin(), wrapped.end());
  EXPECT_EQ(wrapped, paths);
  for (auto& [path, adapter] : nn::find_adapters(model)) {
    copy_into_slot(adapter->down_weight(), file.get(a.lora_prefix + path + ".lora_down"));
    copy_into_slot(adapter->up_weight(), file.get(a.lora_prefix + path + ".lora_up"));
    if (auto dora = std::dynamic_pointer_cast<nn::DoRALinear>(adapter))
      copy_into_slot(dora->magnitude(), file.get(a.lora_prefix + path + ".magnitude"));
  }
  model.set_gradient_checkpointing(checkpointing);
  LoraRun result;
  auto start = std::chrono::steady_clock::now();
  result.output = a.run(model, file, a.lora_latents, DType::F32, false);
  Tensor loss = autograd::mse_loss(a.loss_input(result.output), file.get("target"));
  result.loss = loss.item();
  autograd::GradientStore grads = autograd::backward(loss);
  result.forward_backward_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  size_t n_stored = 0;  // the factors the store has a gradient for (those the loss reaches, at least)
  auto add = [&](const std::string& name, const Tensor& slot) {
    n_stored += grads.contains(slot) ? 1 : 0;
    result.grads.emplace_back(name, gradient_or_zeros(grads, slot));
  };
  for (auto& [path, adapter] : nn::find_adapters(model)) {
    add(path + ".lora_down", adapter->down_weight());
    add(path + ".lora_up", adapter->up_weight());
    if (auto dora = std::dynamic_pointer_cast<nn::DoRALinear>(adapter)) add(path + ".magnitude", dora->magnitude());
  }
  EXPECT_EQ(grads.size(), n_stored) << "only the adapters get gradients";
  return result;
}

std::string shape_map_error(const std::function<void(const std::map<std::string, Shape>&)>& config_from_shapes,
                            const std::map<std::string, Shape>& shapes, ErrorKind kind) {
  try {
    config_from_shapes(shapes);
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

std::map<std::string, Shape> without(std::map<std::string, Shape> shapes, const std::string& name) {
  shapes.erase(name);
  return shapes;
}

std::map<std::string, Shape> with(std::map<std::string, Shape> shapes, const std::string& name, Shape shape) {
  shapes[name] = std::move(shape);
  return shapes;
}

}  // namespace wick::testing
