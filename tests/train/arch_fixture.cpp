// Files for the end-to-end tests of each architecture (tests/train/arch_train_test.sh, arch_sample_test.sh,
// arch_lora_diffusers_test.sh; docs/testing.md "End-to-end tests per architecture"). One row per architecture in
// kRows at the bottom: what `data` writes, the case inputs its forward reads, its forward.
//
//   arch_fixture ARCH data DIR                          the training model and datasets of ARCH's row (below)
//   arch_fixture ARCH sample-data DIR [DATA]            a model whose widths fit the committed sampling parts (flux),
//                                                       or the parts a run needs beside them (zimage; DATA: tests/data)
//   arch_fixture ARCH lora-case LORA CASE OUT [WEIGHTS]
//     Rebuilds the model LORA was trained on (its wick_config metadata; base WEIGHTS when given) in f32, loads LORA,
//     merges it into the weights and writes OUT with the row's inputs from CASE (renamed as the row says) and the
//     merged model's output as expected_output.
//   arch_fixture ARCH model-case WEIGHTS CASE OUT       the model of WEIGHTS (no adapters) on CASE, as lora-case (sdxl)
//
// flux data DIR
//   DIR/flux_tiny.safetensors   a random Flux.1-dev in Black Forest Labs' names at real widths but tiny depth:
//                               16-channel latents (img_in 64), hidden 128, one head of 128 (axes 16 + 56 + 56),
//                               2 double + 2 single blocks, T5 width 4096, CLIP pooled 768, guidance_in (dev); f32,
//                               2,536,512 parameters
//   DIR/flux.h5                 cached latents for it (model_family flux, VAE scaling 0.3611, shift 0.1159): 18
//                               samples, 6 in each of the buckets 16x24, 24x16, 16x16; 16 text tokens; stored as a VAE
//                               distribution (latents = mean, latents_logvar about -4: a std of 0.05 in the model's
//                               units), so every run samples its training latents (dataset.latent_sampling: sample)
//   DIR/flux_dev_sized.h5       cached latents the size of tests/data/flux/dev_bfl (4 channels, 7 tokens of 32,
//                               pooled 24): 8 samples in buckets 6x10 and 8x8
// flux sample-data DIR
//   DIR/flux_sample_tiny.safetensors  a random Flux.1-dev in BFL names whose widths fit the committed tiny sampling
//                                     parts: img_in 64 (tests/data/vae/flux_tiny: 16 latent channels, x2), txt_in 32
//                                     (tests/data/t5: T5 width 32), vector_in 16 (tests/data/clip_text/clip_l: pooled
//                                     16); hidden 32, 2 heads of 16 (axes 4 + 6 + 6: model.axes_dim [4, 6, 6]), 2
//                                     double + 2 single blocks
//   DIR/flux_sample.h5                cached latents for it: 8 samples in buckets 8x12 and 12x8 (16 x 24 and 24 x 16
//                                     pixels through the x2 VAE), 8 text tokens of 32, pooled 16; its text attributes
//                                     say T5 length 8 (text_embeds_encoder t5-xxl), so a sampler uses 8 T5 tokens
// flux lora-case: CASE's latents, context, pooled, timestep and guidance (tests/data/flux/dev_case.safetensors).
//
// sd3 data DIR
//   DIR/sd3.5_tiny.safetensors  a random SD3.5-Medium-like MMDiT laid out as SAI's single files: Stability AI's names
//                               under "model.diffusion_model.", a VAE tensor under "first_stage_model." beside it;
//                               16-channel latents in 2x2 patches, hidden 128 = 64 x 2 blocks in heads of 64 (SAI's
//                               rule, which ComfyUI's key map also assumes), attn2 and QK norm, the last block
//                               pre-only, context 4096, pooled 2048, a 16x16 position table; f32, 2,067,776 parameters
//   DIR/sd3.h5                  cached latents for it (model_family sd3, SD3's VAE scaling 1.5305, shift 0.0609): 18
//                               samples, 6 in each of the buckets 16x24, 24x16, 16x16; 16 text tokens
//   DIR/sd3_medium_sized.h5     cached latents the size of tests/data/sd3/medium (16 channels, 7 tokens of 32, pooled
//                               64): 8 samples in buckets 8x8 and 6x10 (inside its 6x6 patch table)
// sd3 lora-case: CASE's latents_square (as latents), context, pooled and sigma (tests/data/sd3/medium_case).
//
// sdxl data DIR
//   DIR/sdxl_tiny.safetensors   a random SDXL-like UNet laid out as sd_xl_base_1.0.safetensors: sgm's names under
//                               "model.diffusion_model.", a VAE tensor under "first_stage_model." beside it; SDXL's
//                               rules (32 GroupNorm groups, 256-wide size sinusoids, linear projections) at tiny
//                               sizes: 4-channel latents, model_channels 32, 2 levels 32/64 (attention at level 1,
//                               depth 1; middle depth 1), heads of 32, context 64, pooled 32 (label_emb 32 + 6 x 256)
//   DIR/sdxl.h5                 cached latents for it (model_family sdxl, SDXL's VAE scaling 0.13025) with
//                               original_size and crop per sample: 18 samples, 6 in each of the buckets 16x16, 16x24,
//                               24x16; 8 text tokens of 64, pooled 32
//   DIR/sdxl_no_sizes.h5        the same samples without original_size and crop
//   DIR/sdxl_tiny_sized.h5      cached latents the size of tests/data/sdxl's tiny UNet (4 channels, 7 tokens of 32,
//                               pooled 16) with original_size and crop: 8 samples in buckets 16x16 and 8x12
// sdxl lora-case: CASE's latents_square (as latents), timesteps, context, pooled and time_ids (tests/data/sdxl/case).
// sdxl model-case: WEIGHTS a file or diffusers folder; head width, groups and sinusoid width from its config.json,
// else tests/data/sdxl's 8, 4, 8.
//
// zimage data DIR
//   DIR/zimage_tiny.safetensors  a random Z-Image in ComfyUI's single-file layout (the fused attention.qkv under
//                                "model.diffusion_model.") at real widths but tiny depth:
//                                16-channel latents in 2x2 patches, dim 128 in one head of 128 (RoPE axes 32 + 48 +
//                                48), 2 layers + 1 noise and 1 context refiner, SwiGLU 341, caption features 2560
//                                (Qwen3-4B's), t_embedder 256 -> 1024 -> 128; f32
//   DIR/zimage.h5                cached latents for it (model_family zimage, the Flux VAE's scaling 0.3611, shift
//                                0.1159): 18 samples, 6 in each of the buckets 16x24, 24x16, 16x16; 16 caption rows
//                                of 2560 with their mask; no pooled vector (P = 0)
//   DIR/zimage_sized.h5          cached latents the size of tests/data/zimage's model (16 channels, 7 caption rows
//                                of 32): 8 samples in buckets 6x10 and 8x4
// zimage sample-data DIR DATA
//   DIR/qwen3/model.safetensors  DATA/zimage_sample/qwen3.safetensors (a tiny Qwen3, hidden 16) written in full: the
//                                text encoder of `wick dataset encode --model zimage` and of the sample grids
// zimage lora-case: CASE's latents_0 (as latents [1, C, H, W]: its first sample), caption_0 (as context, its rows)
// and timestep (the model's t, 1 = clean; the first is used) (tests/data/zimage/case.safetensors).
//
// qwenimage data DIR
//   DIR/qwenimage_tiny.safetensors  a random Qwen-Image in ComfyUI's single-file layout (diffusers' names under
//                                   "model.diffusion_model.", no config: its RoPE axes are the run's model.axes_dims
//                                   [32, 48, 48]) at real widths but tiny depth: 16-channel latents in 2x2 patches,
//                                   dim 128 in one head of 128, MLP 512, 2 dual-stream blocks, text 3584 (Qwen2.5-VL
//                                   7B's); f32
//   DIR/qwenimage.h5                cached latents for it (model_family qwenimage, the real VAE's 16 per-channel
//                                   latents_mean / latents_std as vae_latents_mean / vae_latents_std, no scalar
//                                   factor): 18 samples, 6 in each of the buckets 16x24, 24x16, 16x16; 16 caption
//                                   rows of 3584 with their mask; no pooled vector (P = 0)
//   DIR/qwenimage_sized.h5          cached latents the size of tests/data/qwenimage's model (16 channels, 7 caption
//                                   rows of 32): 8 samples in buckets 6x10 and 8x4
// qwenimage sample-data DIR DATA
//   DIR/qwen25vl/                DATA/qwenimage_sample/from_prompts/qwen25vl.safetensors (a tiny Qwen2.5-VL language
//                                model, hidden 32) written in full, with its config.json: the text encoder of `wick
//                                dataset encode --model qwenimage` and of the sample grids
// qwenimage lora-case: CASE's latents [B, 16, H, W], context, context_mask and sigma (the model's t: the
// flow-matching sigma) (tests/data/qwenimage/case.safetensors).
//
// Content of every dataset (tests/train/caption_dataset.h): three captions, each with its own deterministic text
// embeddings and its own latent pattern, plus a little per-sample noise (Philox), so a LoRA can learn caption ->
// pattern and the loss falls.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/init.h"
#include "models/flux/flux.h"
#include "models/lora_files.h"
#include "models/model_factory.h"
#include "models/nn/adapters.h"
#include "models/qwenimage/qwenimage.h"
#include "models/registry.h"
#include "models/sd3/sd3.h"
#include "models/sdxl/sdxl_unet.h"
#include "models/sdxl/sdxl_weights.h"
#include "models/vae/wan_vae_config.h"
#include "models/weights/key_map.h"
#include "models/weights/weight_source.h"
#include "models/zimage/zimage.h"
#include "runtime/error.h"
#include "runtime/ops/join.h"
#include "runtime/safetensors.h"
#include "tests/llm_fixture.h"
#include "tests/train/caption_dataset.h"

namespace wick {
namespace {

using Tensors = std::vector<std::pair<std::string, Tensor>>;
using Inputs = std::map<std::string, Tensor>;

// A case input: its name in OUT (what the forward reads) and in CASE; optional inputs may be missing; `one_sample`:
// CASE holds one sample's tensor without the batch axis, which OUT gets (of size 1).
struct CaseInput {
  std::string name, in_case;
  bool optional = false;
  bool one_sample = false;
};

// One architecture's row.
struct FixtureRow {
  std::string arch;
  void (*write_data)(const std::string& dir);
  // nullptr: no sample-data; `data`: the source tree's tests/data (for committed parts it writes out)
  void (*write_sample_data)(const std::string& dir, const std::string& data);
  std::vector<CaseInput> case_inputs;                  // the first is the latents [B, C, H, W]
  Tensor (*forward)(DiffusionModel& model, const Inputs& inputs);
  int (*model_case)(const std::string& weights, const std::string& case_path, const std::string& out);  // or nullptr
};

// A model's parameters, prefixed, with a VAE tensor beside them when `vae_beside` (as single checkpoint files are).
void save_model(const Module& model, const std::string& path, const std::string& prefix, bool vae_beside,
                const std::string& generator) {
  Tensors tensors;
  for (const auto& [name, tensor] : model.named_parameters()) tensors.emplace_back(prefix + name, tensor);
  if (vae_beside)
    tensors.emplace_back("first_stage_model.decoder.conv_in.bias", Tensor::from_vector<float>({0.5f, -0.5f}, {2}));
  save_safetensors(path, tensors, {{"format", "pt"}, {"generator", "tests/train/arch_fixture.cpp " + generator}});
}

Tensor input(const Inputs& inputs, const std::string& name) {
  auto found = inputs.find(name);
  return found == inputs.end() ? Tensor() : found->second;
}

// ---- flux ----

constexpr double kFluxVaeScaling = 0.3611, kFluxVaeShift = 0.1159;

void write_flux_data(const std::string& dir) {
  set_init_seed(11);
  flux::FluxTransformer model({.in_channels = 64, .hidden_size = 128, .num_heads = 1, .depth = 2, .depth_single = 2,
                               .context_dim = 4096, .vec_dim = 768, .guidance_embed = true, .initialize = true,
                               .dtype = DType::F32});
  save_model(model, dir + "/flux_tiny.safetensors", "", false, "flux data");
  const testing::CaptionDatasetOptions flux{.model_family = "flux", .vae_scaling = kFluxVaeScaling,
                                            .vae_shift = kFluxVaeShift};
  testing::CaptionDatasetOptions big = flux, dev_sized = flux;
  big.channels = 16, big.text_length = 16, big.text_dim = 4096, big.pooled_dim = 768;
  big.buckets = {{16, 24}, {24, 16}, {16, 16}}, big.per_bucket = 6, big.logvar = true;
  dev_sized.channels = 4, dev_sized.text_length = 7, dev_sized.text_dim = 32, dev_sized.pooled_dim = 24;
  dev_sized.buckets = {{6, 10}, {8, 8}}, dev_sized.per_bucket = 4;
  testing::write_caption_dataset(dir + "/flux.h5", big);
  testing::write_caption_dataset(dir + "/flux_dev_sized.h5", dev_sized);
}

void write_flux_sample_data(const std::string& dir, const std::string&) {
  set_init_seed(13);
  flux::FluxTransformer model({.in_channels = 64, .hidden_size = 32, .num_heads = 2, .depth = 2, .depth_single = 2,
                               .context_dim = 32, .vec_dim = 16, .axes_dim = {4, 6, 6}, .guidance_embed = true,
                               .initialize = true, .dtype = DType::F32});
  save_model(model, dir + "/flux_sample_tiny.safetensors", "", false, "flux sample-data");
  testing::write_caption_dataset(dir + "/flux_sample.h5",
                                 {.model_family = "flux", .vae_scaling = kFluxVaeScaling, .vae_shift = kFluxVaeShift,
                                  .channels = 16, .text_length = 8, .text_dim = 32, .pooled_dim = 16,
                                  .buckets = {{8, 12}, {12, 8}}, .per_bucket = 4, .t5_attributes = true});
}

Tensor flux_forward(DiffusionModel& model, const Inputs& in) {
  return dynamic_cast<flux::FluxTransformer&>(model).forward(in.at("latents"), in.at("timestep"), in.at("context"),
                                                             in.at("pooled"), input(in, "guidance"));
}

// ---- sd3 ----

void write_sd3_data(const std::string& dir) {
  set_init_seed(13);
  sd3::MMDiT model({.hidden_size = 128, .num_heads = 2, .depth = 2, .context_dim = 4096, .pooled_dim = 2048,
                    .pos_embed_max_size = 16, .qk_norm = true, .dual_attention_layers = {0}, .dtype = DType::F32});
  save_model(model, dir + "/sd3.5_tiny.safetensors", "model.diffusion_model.", true, "sd3 data");
  const testing::CaptionDatasetOptions sd3{.model_family = "sd3", .vae_scaling = 1.5305, .vae_shift = 0.0609};
  testing::CaptionDatasetOptions big = sd3, medium_sized = sd3;
  big.channels = 16, big.text_length = 16, big.text_dim = 4096, big.pooled_dim = 2048;
  big.buckets = {{16, 24}, {24, 16}, {16, 16}}, big.per_bucket = 6;
  medium_sized.channels = 16, medium_sized.text_length = 7, medium_sized.text_dim = 32, medium_sized.pooled_dim = 64;
  medium_sized.buckets = {{8, 8}, {6, 10}}, medium_sized.per_bucket = 4;
  testing::write_caption_dataset(dir + "/sd3.h5", big);
  testing::write_caption_dataset(dir + "/sd3_medium_sized.h5", medium_sized);
}

Tensor sd3_forward(DiffusionModel& model, const Inputs& in) {
  return dynamic_cast<sd3::MMDiT&>(model).forward(in.at("latents"), in.at("sigma"), in.at("context"), in.at("pooled"));
}

// ---- sdxl ----

void write_sdxl_data(const std::string& dir) {
  set_init_seed(17);
  sdxl::Unet model({.model_channels = 32, .channel_mult = {1, 2}, .transformer_depth = {0, 1},
                    .transformer_depth_middle = 1, .time_embed_dim = 128, .head_dim = 32, .context_dim = 64,
                    .adm_in_channels = 32 + 6 * 256, .dtype = DType::F32});
  save_model(model, dir + "/sdxl_tiny.safetensors", "model.diffusion_model.", true, "sdxl data");
  testing::CaptionDatasetOptions sdxl{.model_family = "sdxl", .vae_scaling = 0.13025};
  sdxl.channels = 4, sdxl.text_length = 8, sdxl.text_dim = 64, sdxl.pooled_dim = 32;
  sdxl.buckets = {{16, 16}, {16, 24}, {24, 16}}, sdxl.per_bucket = 6;
  testing::CaptionDatasetOptions no_sizes = sdxl;
  sdxl.sizes = true;
  testing::write_caption_dataset(dir + "/sdxl.h5", sdxl);
  testing::write_caption_dataset(dir + "/sdxl_no_sizes.h5", no_sizes);
  testing::CaptionDatasetOptions tiny_sized = sdxl;
  tiny_sized.text_length = 7, tiny_sized.text_dim = 32, tiny_sized.pooled_dim = 16;
  tiny_sized.buckets = {{16, 16}, {8, 12}}, tiny_sized.per_bucket = 4;
  testing::write_caption_dataset(dir + "/sdxl_tiny_sized.h5", tiny_sized);
}

Tensor sdxl_forward(DiffusionModel& model, const Inputs& in) {
  return dynamic_cast<sdxl::Unet&>(model).forward(in.at("latents"), in.at("timesteps"), in.at("context"),
                                                  in.at("pooled"), in.at("time_ids"));
}

// ---- zimage ----

// The model in ComfyUI's single-file layout (z_image_turbo_bf16.safetensors): names under "model.diffusion_model.",
// to_q | to_k | to_v fused by rows into attention.qkv, to_out.0 -> out, norm_q / norm_k -> q_norm / k_norm,
// all_x_embedder.2-1 -> x_embedder, all_final_layer.2-1 -> final_layer.
void save_zimage_comfyui(const Module& model, const std::string& path) {
  const std::vector<std::pair<std::string, std::string>> renames = {
      {".attention.to_out.0.", ".attention.out."}, {".attention.norm_q.", ".attention.q_norm."},
      {".attention.norm_k.", ".attention.k_norm."}, {"all_x_embedder.2-1.", "x_embedder."},
      {"all_final_layer.2-1.", "final_layer."}};
  std::map<std::string, Tensor> params;
  for (const auto& [name, tensor] : model.named_parameters()) params[name] = tensor;
  Tensors tensors;
  for (const auto& [name, tensor] : params) {
    const size_t q = name.find(".attention.to_q.weight");
    if (name.find(".attention.to_k.weight") != std::string::npos ||
        name.find(".attention.to_v.weight") != std::string::npos)
      continue;
    if (q != std::string::npos) {
      const std::string stem = name.substr(0, q) + ".attention.";
      tensors.emplace_back("model.diffusion_model." + stem + "qkv.weight",
                           concat({tensor, params.at(stem + "to_k.weight"), params.at(stem + "to_v.weight")}, 0));
      continue;
    }
    std::string native = name;
    for (const auto& [from, to] : renames)
      if (const size_t at = native.find(from); at != std::string::npos) native.replace(at, from.size(), to);
    tensors.emplace_back("model.diffusion_model." + native, tensor);
  }
  save_safetensors(path, tensors, {{"format", "pt"}, {"generator", "tests/train/arch_fixture.cpp zimage data"}});
}

void write_zimage_data(const std::string& dir) {
  set_init_seed(19);
  zimage::ZImageTransformer model({.dim = 128, .n_heads = 1, .n_layers = 2, .n_refiner_layers = 1,
                                   .ffn_hidden = 341, .cap_feat_dim = 2560, .dtype = DType::F32});
  save_zimage_comfyui(model, dir + "/zimage_tiny.safetensors");
  const testing::CaptionDatasetOptions zimage{.model_family = "zimage", .vae_scaling = kFluxVaeScaling,
                                              .vae_shift = kFluxVaeShift, .pooled_dim = 0};
  testing::CaptionDatasetOptions big = zimage, sized = zimage;
  big.channels = 16, big.text_length = 16, big.text_dim = 2560;
  big.buckets = {{16, 24}, {24, 16}, {16, 16}}, big.per_bucket = 6;
  sized.channels = 16, sized.text_length = 7, sized.text_dim = 32;
  sized.buckets = {{6, 10}, {8, 4}}, sized.per_bucket = 4;
  testing::write_caption_dataset(dir + "/zimage.h5", big);
  testing::write_caption_dataset(dir + "/zimage_sized.h5", sized);
}

void write_zimage_sample_data(const std::string& dir, const std::string& data) {
  WICK_CHECK_KIND(Config, !data.empty(), "zimage sample-data needs DATA (the source tree's tests/data)");
  std::filesystem::create_directories(dir + "/qwen3");
  testing::write_full_llm_file(data + "/zimage_sample/qwen3.safetensors", dir + "/qwen3/model.safetensors");
}

Tensor zimage_forward(DiffusionModel& model, const Inputs& in) {
  const Tensor latents = in.at("latents");
  return dynamic_cast<zimage::ZImageTransformer&>(model)
      .forward({latents.select(0, 0)}, in.at("timestep").narrow(0, 0, 1), {in.at("context")})
      .front()
      .unsqueeze(0);
}

// ---- qwenimage ----

void write_qwenimage_sample_data(const std::string& dir, const std::string& data) {
  WICK_CHECK_KIND(Config, !data.empty(), "qwenimage sample-data needs DATA (the source tree's tests/data)");
  const std::string from = data + "/qwenimage_sample/from_prompts/";
  std::filesystem::create_directories(dir + "/qwen25vl");
  testing::write_full_llm_file(from + "qwen25vl.safetensors", dir + "/qwen25vl/model.safetensors");
  std::filesystem::copy_file(from + "qwen25vl_config.json", dir + "/qwen25vl/config.json",
                             std::filesystem::copy_options::overwrite_existing);
}

// The model in ComfyUI's single-file layout (qwen_image_bf16.safetensors): diffusers' names under
// "model.diffusion_model.", nothing fused or renamed; the real VAE's 16 per-channel latents_mean / latents_std on the
// datasets.
void write_qwenimage_data(const std::string& dir) {
  set_init_seed(23);
  qwenimage::QwenImageTransformer model({.dim = 128, .n_heads = 1, .n_layers = 2, .mlp_hidden = 512,
                                         .axes_dims = {32, 48, 48}, .dtype = DType::F32});
  save_model(model, dir + "/qwenimage_tiny.safetensors", "model.diffusion_model.", false, "qwenimage data");
  const vae::WanLatentNormalization normalization = vae::wan21_latent_normalization();
  const testing::CaptionDatasetOptions qwenimage{.model_family = "qwenimage", .latents_mean = normalization.mean,
                                                 .latents_std = normalization.std, .pooled_dim = 0};
  testing::CaptionDatasetOptions big = qwenimage, sized = qwenimage;
  big.channels = 16, big.text_length = 16, big.text_dim = 3584;
  big.buckets = {{16, 24}, {24, 16}, {16, 16}}, big.per_bucket = 6;
  sized.channels = 16, sized.text_length = 7, sized.text_dim = 32;
  sized.buckets = {{6, 10}, {8, 4}}, sized.per_bucket = 4;
  testing::write_caption_dataset(dir + "/qwenimage.h5", big);
  testing::write_caption_dataset(dir + "/qwenimage_sized.h5", sized);
}

Tensor qwenimage_forward(DiffusionModel& model, const Inputs& in) {
  return dynamic_cast<qwenimage::QwenImageTransformer&>(model).forward(in.at("latents"), in.at("sigma"),
                                                                        in.at("context"), in.at("context_mask"));
}

int write_sdxl_model_case(const std::string& weights, const std::string& case_path, const std::string& out);

// ---- the table: one row per architecture ----

const std::vector<FixtureRow>& rows() {
  static const std::vector<FixtureRow> table = {
      {"flux", write_flux_data, write_flux_sample_data,
       {{"latents", "latents"}, {"context", "context"}, {"pooled", "pooled"}, {"timestep", "timestep"},
        {"guidance", "guidance", true}},
       flux_forward, nullptr},
      {"sd3", write_sd3_data, nullptr,
       {{"latents", "latents_square"}, {"context", "context"}, {"pooled", "pooled"}, {"sigma", "sigma"}},
       sd3_forward, nullptr},
      {"sdxl", write_sdxl_data, nullptr,
       {{"latents", "latents_square"}, {"timesteps", "timesteps"}, {"context", "context"}, {"pooled", "pooled"},
        {"time_ids", "time_ids"}},
       sdxl_forward, write_sdxl_model_case},
      {"zimage", write_zimage_data, write_zimage_sample_data,
       {{"latents", "latents_0", false, true}, {"context", "caption_0"}, {"timestep", "timestep"}}, zimage_forward,
       nullptr},
      {"qwenimage", write_qwenimage_data, write_qwenimage_sample_data,
       {{"latents", "latents"}, {"context", "context"}, {"context_mask", "context_mask"}, {"sigma", "sigma"}},
       qwenimage_forward, nullptr},
  };
  return table;
}

// The row of `arch`, or nullptr.
const FixtureRow* find_row(const std::string& arch) {
  for (const FixtureRow& row : rows())
    if (row.arch == arch) return &row;
  return nullptr;
}

// ---- the cases ----

double max_relative(const Tensor& a, const Tensor& b) {
  std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(x[i]) - y[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(y[i])));
  }
  return scale > 0 ? worst / scale : worst;
}

// The row's inputs from CASE in f32, under their names in OUT and in the row's order.
Tensors read_case(const FixtureRow& row, const SafetensorsFile& file, Inputs& inputs) {
  Tensors tensors;
  for (const CaseInput& in : row.case_inputs) {
    if (in.optional && !file.contains(in.in_case)) continue;
    Tensor tensor = file.get(in.in_case).to(DType::F32);
    if (in.one_sample) tensor = tensor.unsqueeze(0).contiguous();
    inputs[in.name] = tensor;
    tensors.emplace_back(in.name, tensor);
  }
  return tensors;
}

// OUT: the case's inputs and `output` as expected_output; metadata `key` = `from` (the LoRA or the weights).
void write_case(const std::string& arch, const Tensors& tensors, const Tensor& output, const std::string& out,
                const std::string& key, const std::string& from) {
  Tensors all = tensors;
  all.emplace_back("expected_output", output);
  save_safetensors(out, all, {{key, from}, {"generator", "tests/train/arch_fixture.cpp " + arch}});
}

int write_lora_case(const FixtureRow& row, const std::string& lora, const std::string& case_path,
                    const std::string& out, const std::string& weights) {
  LoraFile file = read_lora_file(lora);
  auto yaml = file.metadata.find("wick_config");
  WICK_CHECK_KIND(Data, yaml != file.metadata.end(), lora, ": no wick_config metadata (not written by wick train?)");
  TrainConfig config = parse_config_string(yaml->second, lora + " (wick_config)", config_schema());
  WICK_CHECK_KIND(Config, config.model.arch == row.arch, lora, ": trained on model.arch ", config.model.arch,
                  ", not ", row.arch);
  if (!weights.empty()) config.model.name_or_path = weights;
  config.model.dtype = DType::F32;
  config.train.mixed_precision = MixedPrecision::No;
  config.train.gradient_checkpointing = false;
  Inputs inputs;
  const Tensors tensors = read_case(row, SafetensorsFile::open(case_path), inputs);
  const Tensor latents = tensors.front().second, context = inputs.at("context"), pooled = input(inputs, "pooled");
  // context [B, L, D], or one sample's [L, D] (Z-Image's captions).
  DataGeometry geometry{.model_family = row.arch, .latent_channels = latents.size(1),
                        .latent_sizes = {{latents.size(2), latents.size(3)}},
                        .text_length = context.size(context.dim() - 2), .text_dim = context.size(context.dim() - 1),
                        .pooled_dim = pooled.defined() ? pooled.size(1) : 0};
  std::shared_ptr<DiffusionModel> model = build_model(config, geometry, Device::cpu());
  load_lora(*model, lora);
  Tensor adapted = row.forward(*model, inputs);
  for (auto& [path, adapter] : nn::find_adapters(*model)) adapter->merge();
  Tensor merged = row.forward(*model, inputs);
  write_case(row.arch, tensors, merged, out, "lora", lora);
  std::printf("arch_fixture %s: %s: %zu adapters (%s, rank %lld, conv rank %lld) merged; output %s, "
              "max |merged - adapters| / max = %.2e\n",
              row.arch.c_str(), out.c_str(), nn::find_adapters(*model).size(), network_type_name(config.network.type),
              static_cast<long long>(config.network.linear), static_cast<long long>(config.network.conv),
              merged.describe().c_str(), max_relative(merged, adapted));
  return 0;
}

int write_sdxl_model_case(const std::string& weights, const std::string& case_path, const std::string& out) {
  WeightSource source = WeightSource::open(weights, "unet");
  DetectedFormat format = sdxl::detect_weight_format(source);
  sdxl::ConfigHints hints = sdxl::diffusers_config_hints(source);
  if (hints.head_dim == 0 && hints.num_heads == 0) hints.head_dim = 8;
  if (hints.norm_groups == 0) hints.norm_groups = 4;
  if (hints.size_embed_dim == 0) hints.size_embed_dim = 8;
  sdxl::UnetConfig c = sdxl::config_from_shapes(mapped_shapes(source, format), hints);
  c.dtype = DType::F32;
  c.initialize = false;
  sdxl::Unet unet(c);
  load_mapped(unet, source, format);
  Inputs inputs;
  const Tensors tensors = read_case(*find_row("sdxl"), SafetensorsFile::open(case_path), inputs);
  const Tensor output = sdxl_forward(unet, inputs);
  const std::string from = weights + " (" + format.format.name + ")";
  write_case("sdxl", tensors, output, out, "from", from);
  std::printf("arch_fixture sdxl: %s: output %s of %s\n", out.c_str(), output.describe().c_str(), from.c_str());
  return 0;
}

// Runs `ARCH MODE ARGS...`; 2 (after the usage) for an unknown architecture or mode.
int run(const std::vector<std::string>& args) {
  const FixtureRow* row = find_row(args[0]);
  if (row == nullptr) {
    std::string names;
    for (const FixtureRow& known : rows()) names += " " + known.arch;
    std::fprintf(stderr, "arch_fixture: no row for the architecture '%s' (rows:%s)\n", args[0].c_str(), names.c_str());
    return 2;
  }
  const std::string& mode = args[1];
  const size_t n = args.size() - 2;
  if (mode == "data" && n == 1) {
    std::filesystem::create_directories(args[2]);
    row->write_data(args[2]);
    return 0;
  }
  if (mode == "sample-data" && (n == 1 || n == 2) && row->write_sample_data != nullptr) {
    std::filesystem::create_directories(args[2]);
    row->write_sample_data(args[2], n == 2 ? args[3] : "");
    return 0;
  }
  if (mode == "lora-case" && (n == 3 || n == 4))
    return write_lora_case(*row, args[2], args[3], args[4], n == 4 ? args[5] : "");
  if (mode == "model-case" && n == 3 && row->model_case != nullptr) return row->model_case(args[2], args[3], args[4]);
  const std::string& arch = row->arch;
  std::string usage = arch + " data DIR | " + arch + " lora-case LORA CASE OUT [WEIGHTS]";
  if (row->write_sample_data != nullptr) usage += " | " + arch + " sample-data DIR [DATA]";
  if (row->model_case != nullptr) usage += " | " + arch + " model-case WEIGHTS CASE OUT";
  std::fprintf(stderr, "usage: arch_fixture %s\n", usage.c_str());
  return 2;
}

}  // namespace
}  // namespace wick

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s ARCH data DIR | ARCH sample-data DIR | ARCH lora-case LORA CASE OUT [WEIGHTS] | "
                         "ARCH model-case WEIGHTS CASE OUT\n", argv[0]);
    return 2;
  }
  try {
    return wick::run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const wick::WickError& error) {
    std::fprintf(stderr, "arch_fixture: %s\n", error.what());
    return 1;
  }
}
