// What every architecture's sampler (models/diffusion/latent_image_sampler.h) must show, one row per architecture
// whose datasets are encoded from images (the registry's encodable_architectures()): images equal to its diffusers
// pipeline's from the same noise, the defaults a diffusers pipeline folder gives and the keys that replace them,
// images deterministic per seed with the model's training flag given back, a dataset's stored prompts in place of
// the text encoders, and errors that name the problem. What only one architecture has (its schedule, its negative
// prompt rules, its single files) is in <arch>_sampler_test.cpp; a new architecture adds its row to kRows.
//
// The pipeline fixtures (tests/data/<arch>_sample, written by tests/reference/make_<arch>_sample_fixtures.py; each
// README lists every tensor) are diffusers 0.42.1's pipelines run from given noise with a tiny random model and the
// committed tiny CLIP-L, bigG, T5, tokenizers and VAEs:
//   flux: FluxPipeline, a tiny transformer (img_in 64, txt_in 32, vector_in 16): dev (6 steps, guidance 3.5, T5 512)
//         and schnell (4 unshifted steps, T5 256).
//   sd3:  StableDiffusion3Pipeline, a tiny SD3.5-Medium-like transformer (attn2 in block 0, QK norm, context 48,
//         pooled 48) and the 16-channel VAE with SD3's scaling and shift: guidance 4.5 with the empty negative prompt
//         (6 steps), guidance 3.0 with a negative prompt (4 steps), guidance 1 (4 steps).
//   sdxl: StableDiffusionXLPipeline at 40 x 24 pixels, a tiny SDXL-like UNet (2 levels, context 32, pooled 32, 8-wide
//         size sinusoids), the 4-channel VAE and SDXL base's EulerDiscreteScheduler: guidance 5 with no negative
//         prompt (zero embeddings: force_zeros_for_empty_prompt), guidance 3 with a negative prompt, guidance 3 with
//         an explicit "" (encoded), guidance 1, and guidance 3 with v-prediction.
//   zimage: ZImagePipeline, a tiny transformer (cap_feat_dim 16), a tiny Qwen3 (hidden 16, 4 layers) and the
//         16-channel VAE: Turbo (8 steps, no CFG) and Base (5 steps, guidance_scale 4.0 against "", and 3.0 against a
//         negative prompt; wick's scale is theirs + 1).
//   qwenimage: QwenImagePipeline (tests/data/qwenimage_sample/from_prompts), the tiny transformer of
//         tests/data/qwenimage (text width 32), a tiny Qwen2.5-VL (hidden 32, 2 layers), the truncated Qwen tokenizer
//         and the tiny Wan VAE (x8, per-channel normalization) at 48 x 32 pixels: no CFG (4 steps, true_cfg_scale 1),
//         true CFG 4 against "" (5 steps) and against a negative prompt (4 steps).
// Metric: max |wick - diffusers| over the final images in [0, 1], relative to max |diffusers| (flux, sd3, zimage,
// qwenimage) or absolute (sdxl).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/flux/flux.h"
#include "models/flux/flux_sampler.h"
#include "models/qwenimage/qwenimage.h"
#include "models/qwenimage/qwenimage_image_sampler.h"
#include "models/registry.h"
#include "models/sd3/sd3.h"
#include "models/sd3/sd3_sampler.h"
#include "models/sdxl/sdxl_sampler.h"
#include "models/sdxl/sdxl_unet.h"
#include "models/text/stored_prompts.h"
#include "models/weights/pipeline_folder.h"
#include "models/weights/weight_source.h"
#include "models/zimage/zimage.h"
#include "models/zimage/zimage_sampler.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/llm_fixture.h"
#include "tests/models/arch_sampler.h"
#include "tests/models/arch_test_util.h"
#include "tests/models/weights_test_util.h"

namespace wick::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

template <typename T>
const T& as(const LatentImageSampler& sampler) {
  return dynamic_cast<const T&>(sampler);
}
template <typename T>
T& as(LatentImageSampler& sampler) {
  return dynamic_cast<T&>(sampler);
}

std::string part(const SamplerFiles& files, const std::string& key) {
  auto it = files.find(key);
  return it == files.end() ? "" : it->second;
}

const std::string kClipVocabulary = "clip_tokenizer/bpe_simple_vocab_16e6.txt.gz";

// ---- the rows ----

SamplerArch flux_row() {
  return {
      .name = "flux",
      .fixture = "flux_sample",
      .model = "flux_sample/transformer",
      .tiny_files = {{"vae_path", data_path("vae/flux_tiny/vae")},
                     {"clip_l_path", data_path("clip_text/clip_l/model.safetensors")},
                     {"t5_path", data_path("t5/t5xxl_comfy.safetensors")},
                     {"clip_tokenizer_path", data_path(kClipVocabulary)},
                     {"t5_tokenizer_path", data_path("t5/spiece.model")}},
      .guidance = 3.5,
      .t5_length = 16,
      .pipeline_runs = {{.name = "dev", .model = "flux_sample/transformer", .steps = 6, .guidance = 3.5},
                        {.name = "schnell", .model = "flux_sample/transformer_schnell", .steps = 4, .guidance = 0.0}},
      .absolute_metric = false,
      .pipeline_tolerance = 1e-4,  // measured (f32, 2 cores of the development machine): dev 1.13e-6, schnell 1.25e-6
      .pipeline_line = "flux sampler vs diffusers FluxPipeline",
      .line_has_guidance = false,
      .distinct_images = {},
      .pipeline_name = "FLUX.1-tiny",
      .model_part = "transformer",
      .pipeline_parts = {{"vae_path", "vae", {data_path("vae/flux_tiny/vae")}},
                         {"clip_l_path", "text_encoder", {data_path("clip_text/clip_l")}},
                         {"t5_path", "text_encoder_2", {data_path("t5/pipeline/text_encoder_3")}},
                         // A file where a tokenizer/ folder would be: read as open_clip's vocabulary.
                         {"clip_tokenizer_path", "tokenizer", {data_path(kClipVocabulary)}},
                         {"t5_tokenizer_path", "tokenizer_2", {data_path("t5/spiece.model")}, true}},
      .model_index = R"({"_class_name": "FluxPipeline"})",
      .overrides = {{"vae_path", "my_ae.safetensors"}, {"t5_path", "t5xxl_fp16.safetensors"}},
      .bare_model_file = data_path("flux/dev_bfl.safetensors"),
      .other_size = {8, 12},
      .stored_captions = {"a red cube", "a photo of sks"},
      .stored_generated = {"a photo of [trigger]", "a red cube", "a photo of sks"},
      .stored_steps = 3,
      .print_stored_rounding =
          [](double difference, double largest) {
            std::printf("stored f16 sample prompts vs encoded on the fly: images differ by %.2e of the largest pixel "
                        "(%.2e absolute, %.3f of an 8-bit level)\n",
                        difference, largest, largest * 255);
          },
      .size_error = {"26 x 16",
                     {.steps = 1, .width = 26, .height = 16},
                     {"image size 26 x 16", "multiples of 4 pixels", "the nearest are 28 x 16"}},
      .steps_error = "steps must be >= 1",
      .other_model = "flux/dev_diffusers",  // pooled 24, latents 4 channels
      .other_model_error = {"widths", {.steps = 1}, {"4-channel latents", "flux_tiny/vae", "has 16"}},
      .required_parts = {{"t5_path", "T5 weights"}},
      .make = [](const SamplerOptions& o) -> std::unique_ptr<LatentImageSampler> {
        return std::make_unique<flux::FluxImageSampler>(flux::FluxSamplerSetup{
            .files = {.vae = part(o.files, "vae_path"),
                      .clip_l = part(o.files, "clip_l_path"),
                      .t5 = part(o.files, "t5_path"),
                      .clip_tokenizer = part(o.files, "clip_tokenizer_path"),
                      .t5_tokenizer = part(o.files, "t5_tokenizer_path")},
            .t5_length = o.t5_length,
            .default_height = o.default_height,
            .default_width = o.default_width,
            .trigger_word = o.trigger_word,
            .stored_prompts = o.stored_prompts});
      },
      .from_noise = [](LatentImageSampler& s, DiffusionModel& m, const std::vector<std::string>& prompts,
                       const Tensor& noise, const SampleSettings& settings) {
        return as<flux::FluxImageSampler>(s).generate_from_noise(dynamic_cast<flux::FluxTransformer&>(m), prompts,
                                                                 noise, settings);
      },
      .sampling_files = [](const ModelConfig& model) -> std::pair<std::string, SamplerFiles> {
        const flux::FluxSamplingFiles f = flux::sampling_files(model);
        return {f.pipeline, {{"vae_path", f.vae}, {"clip_l_path", f.clip_l}, {"t5_path", f.t5},
                             {"clip_tokenizer_path", f.clip_tokenizer}, {"t5_tokenizer_path", f.t5_tokenizer}}};
      },
      .encode = [](const LatentImageSampler& s, const std::vector<std::string>& captions) {
        return flux::encode_flux_prompts(*as<flux::FluxImageSampler>(s).encoders(), captions, {.t5_length = 16});
      },
      .has_encoders = [](const LatentImageSampler& s) { return as<flux::FluxImageSampler>(s).encoders() != nullptr; },
      .is_stored = [](const LatentImageSampler& s,
                      const std::string& prompt) { return as<flux::FluxImageSampler>(s).is_stored(prompt, 16); },
      .check_pipeline_model =
          [](DiffusionModel& m, const PipelineRun& run) {
            EXPECT_EQ(dynamic_cast<flux::FluxTransformer&>(m).config().guidance_embed, run.name == "dev");
          },
  };
}

// SD3's CLIP-L (clip_l plus the committed text_projection) as one file, written once.
const std::string& sd3_clip_l() {
  static const std::string path = [] {
    const fs::path dir = scratch_dir("sd3_sampler_clip_l");
    std::vector<std::pair<std::string, Tensor>> tensors;
    const WeightSource clip_l = WeightSource::open(data_path("clip_text/clip_l"));
    for (const std::string& name : clip_l.names()) tensors.emplace_back(name, clip_l.get(name));
    tensors.emplace_back(
        "text_projection.weight",
        SafetensorsFile::open(data_path("prompts/sd3_clip_l_projection.safetensors")).get("text_projection.weight"));
    save_safetensors((dir / "model.safetensors").string(), tensors, {{"format", "pt"}});
    fs::copy_file(data_path("clip_text/clip_l/config.json"), dir / "config.json", fs::copy_options::overwrite_existing);
    return (dir / "model.safetensors").string();
  }();
  return path;
}

SamplerArch sd3_row() {
  return {
      .name = "sd3",
      .fixture = "sd3_sample",
      .model = "sd3_sample/transformer",
      // bigG's tokenizer: CLIP's vocabulary padded with "!".
      .tiny_files = {{"vae_path", data_path("vae/flux_tiny/vae")},
                     {"clip_l_path", sd3_clip_l()},
                     {"clip_g_path", data_path("clip_text/clip_g/model.safetensors")},
                     {"t5_path", data_path("prompts/sd3_t5/model.safetensors")},
                     {"clip_tokenizer_path", data_path(kClipVocabulary)},
                     {"t5_tokenizer_path", data_path("t5/spiece.model")}},
      .guidance = 4.5,
      .t5_length = 16,
      .pipeline_runs = {{.name = "cfg", .model = "sd3_sample/transformer", .steps = 6, .guidance = 4.5},
                        {.name = "negative",
                         .model = "sd3_sample/transformer",
                         .steps = 4,
                         .guidance = 3.0,
                         .negative_prompt = "blurry, low quality"},
                        {.name = "plain", .model = "sd3_sample/transformer", .steps = 4, .guidance = 1.0}},
      .absolute_metric = false,
      .pipeline_tolerance = 1e-4,  // measured: the printed lines and tests/data/sd3_sample/README.md
      .pipeline_line = "sd3 sampler vs diffusers StableDiffusion3Pipeline",
      .line_has_guidance = true,
      .distinct_images = {{"cfg", "plain", 0.1}},  // guidance and the negative prompt change the images
      .pipeline_name = "stable-diffusion-3.5-tiny",
      .model_part = "transformer",
      .pipeline_parts = {{"vae_path", "vae", {data_path("vae/flux_tiny/vae")}},
                         {"clip_l_path", "text_encoder", {sd3_clip_l(), data_path("clip_text/clip_l/config.json")},
                          true},
                         {"clip_g_path", "text_encoder_2", {data_path("clip_text/clip_g")}},
                         {"t5_path", "text_encoder_3", {data_path("prompts/sd3_t5")}},
                         {"clip_tokenizer_path", "tokenizer", {data_path(kClipVocabulary)}},
                         {"t5_tokenizer_path", "tokenizer_3", {data_path("t5/spiece.model")}, true}},
      .model_index = R"({"_class_name": "StableDiffusion3Pipeline"})",
      .overrides = {{"vae_path", "my_vae.safetensors"}, {"clip_g_path", "clip_g.safetensors"}},
      .bare_model_file = data_path("sd3/medium_sai.safetensors"),
      .other_size = {8, 12},
      .stored_captions = {"a red cube", "a photo of sks", ""},
      .stored_generated = {"a photo of [trigger]", "a red cube", "a photo of sks"},
      .stored_steps = 3,
      .print_stored_rounding =
          [](double difference, double) {
            std::printf("stored f16 sd3 sample prompts vs encoded on the fly: images differ by %.2e of the largest "
                        "pixel\n",
                        difference);
          },
      .size_error = {"26 x 16",
                     {.steps = 1, .width = 26, .height = 16},
                     {"image size 26 x 16", "multiples of 4 pixels", "the nearest are 28 x 16"}},
      .steps_error = "steps must be >= 1",
      .other_model = "sd3/medium_diffusers",  // context 32, pooled 64
      .other_model_error = {"widths", {.steps = 1}, {"32-wide text", "sd3_t5", "48 wide"}},
      .required_parts = {{"clip_g_path", "CLIP-G weights"}, {"vae_path", "the VAE"}},
      .make = [](const SamplerOptions& o) -> std::unique_ptr<LatentImageSampler> {
        sd3::Sd3SamplerSetup setup{
            .files = {.vae = part(o.files, "vae_path"),
                      .clip_l = part(o.files, "clip_l_path"),
                      .clip_g = part(o.files, "clip_g_path"),
                      .t5 = part(o.files, "t5_path"),
                      .clip_tokenizer = part(o.files, "clip_tokenizer_path"),
                      .clip_g_tokenizer = part(o.files, "clip_g_tokenizer_path"),
                      .t5_tokenizer = part(o.files, "t5_tokenizer_path")},
            .clip_l_pooled = o.unprojected_clip_l ? sd3::ClipLPooled::Unprojected : sd3::ClipLPooled::Projected,
            .negative_prompt = o.negative_prompt,
            .default_height = o.default_height,
            .default_width = o.default_width,
            .trigger_word = o.trigger_word,
            .stored_prompts = o.stored_prompts};
        if (o.t5_length > 0) setup.t5_length = o.t5_length;
        return std::make_unique<sd3::Sd3ImageSampler>(setup);
      },
      .from_noise = [](LatentImageSampler& s, DiffusionModel& m, const std::vector<std::string>& prompts,
                       const Tensor& noise, const SampleSettings& settings) {
        return as<sd3::Sd3ImageSampler>(s).generate_from_noise(dynamic_cast<sd3::MMDiT&>(m), prompts, noise,
                                                               settings);
      },
      .sampling_files = [](const ModelConfig& model) -> std::pair<std::string, SamplerFiles> {
        const sd3::Sd3SamplingFiles f = sd3::sampling_files(model);
        return {f.pipeline,
                {{"vae_path", f.vae}, {"clip_l_path", f.clip_l}, {"clip_g_path", f.clip_g}, {"t5_path", f.t5},
                 {"clip_tokenizer_path", f.clip_tokenizer}, {"clip_g_tokenizer_path", f.clip_g_tokenizer},
                 {"t5_tokenizer_path", f.t5_tokenizer}}};
      },
      .encode = [](const LatentImageSampler& s, const std::vector<std::string>& captions) {
        return sd3::encode_sd3_prompts(*as<sd3::Sd3ImageSampler>(s).encoders(), captions, {.t5_length = 16});
      },
      .has_encoders = [](const LatentImageSampler& s) { return as<sd3::Sd3ImageSampler>(s).encoders() != nullptr; },
      .is_stored = [](const LatentImageSampler& s,
                      const std::string& prompt) { return as<sd3::Sd3ImageSampler>(s).is_stored(prompt); },
      .check_pipeline_model =
          [](DiffusionModel& m, const PipelineRun&) {
            EXPECT_EQ(dynamic_cast<sd3::MMDiT&>(m).config().dual_attention_layers, std::vector<int64_t>{0});
          },
  };
}

SamplerArch sdxl_row() {
  return {
      .name = "sdxl",
      .fixture = "sdxl_sample",
      .model = "sdxl_sample/unet",
      // bigG's tokenizer: CLIP's vocabulary padded with "!".
      .tiny_files = {{"vae_path", data_path("vae/sdxl_tiny/vae")},
                     {"clip_l_path", data_path("clip_text/clip_l/model.safetensors")},
                     {"clip_g_path", data_path("clip_text/clip_g/model.safetensors")},
                     {"clip_tokenizer_path", data_path(kClipVocabulary)}},
      .guidance = 5.0,
      .t5_length = 0,
      .pipeline_runs = {{.name = "cfg", .model = "sdxl_sample/unet", .steps = 6, .guidance = 5.0},
                        {.name = "negative",
                         .model = "sdxl_sample/unet",
                         .steps = 4,
                         .guidance = 3.0,
                         .negative_prompt = "blurry, low quality"},
                        {.name = "encoded",
                         .model = "sdxl_sample/unet",
                         .steps = 4,
                         .guidance = 3.0,
                         .zeros_for_empty_negative = false},
                        {.name = "plain", .model = "sdxl_sample/unet", .steps = 4, .guidance = 1.0},
                        {.name = "vpred", .model = "sdxl_sample/unet", .steps = 4, .guidance = 3.0,
                         .v_prediction = true}},
      .absolute_metric = true,
      .pipeline_tolerance = 1e-5,  // measured: the printed lines and tests/data/sdxl_sample/README.md
      .pipeline_line = "sdxl sampler vs diffusers StableDiffusionXLPipeline",
      .line_has_guidance = true,
      // The zeroed and the encoded empty negative prompt, guidance and the prediction type each change the images.
      .distinct_images = {{"cfg", "encoded", 0.05},
                          {"cfg", "plain", 0.05},
                          {"cfg", "negative", 0.05},
                          {"cfg", "vpred", 0.05},
                          {"encoded", "negative", 0.01}},
      .pipeline_name = "stable-diffusion-xl-tiny",
      .model_part = "unet",
      .pipeline_parts = {{"vae_path", "vae", {data_path("vae/sdxl_tiny/vae")}},
                         {"clip_l_path", "text_encoder", {data_path("clip_text/clip_l")}},
                         {"clip_g_path", "text_encoder_2", {data_path("clip_text/clip_g")}},
                         {"clip_tokenizer_path", "tokenizer", {data_path(kClipVocabulary)}}},
      .model_index = R"({"_class_name": "StableDiffusionXLPipeline"})",
      .overrides = {{"vae_path", "my_vae.safetensors"}, {"clip_g_path", "clip_g.safetensors"}},
      .bare_model_file = data_path("sdxl_sample/unet/diffusion_pytorch_model.safetensors"),
      .other_size = {40, 8},  // non-square, multiples of 8 (the x4 VAE times the 2-level UNet's 2)
      .stored_captions = {"a red cube", "ugly"},
      .stored_generated = {"a red cube"},
      .stored_steps = 2,
      .print_stored_rounding = nullptr,
      .size_error = {"28 x 16",
                     {.steps = 1, .width = 28, .height = 16},
                     {"image size 28 x 16", "multiples of 8 pixels", "the nearest are 32 x 16"}},
      .steps_error = "steps must be",
      .other_model = "sdxl/tiny_diffusers",  // pooled 16
      .other_model_error = {"widths", {.steps = 1, .width = 32, .height = 16}, {"16-wide pooled vector",
                                                                                "pools to 32"}},
      .required_parts = {{"vae_path", "the VAE"}, {"clip_g_path", "CLIP-G weights"}},
      .make = [](const SamplerOptions& o) -> std::unique_ptr<LatentImageSampler> {
        return std::make_unique<sdxl::SdxlImageSampler>(sdxl::SdxlSamplerSetup{
            .files = {.vae = part(o.files, "vae_path"),
                      .clip_l = part(o.files, "clip_l_path"),
                      .clip_g = part(o.files, "clip_g_path"),
                      .clip_tokenizer = part(o.files, "clip_tokenizer_path"),
                      .clip_g_tokenizer = part(o.files, "clip_g_tokenizer_path")},
            .negative_prompt = o.negative_prompt,
            .zeros_for_empty_negative = o.zeros_for_empty_negative,
            .v_prediction = o.v_prediction,
            .default_height = o.default_height,
            .default_width = o.default_width,
            .trigger_word = o.trigger_word,
            .stored_prompts = o.stored_prompts});
      },
      .from_noise = [](LatentImageSampler& s, DiffusionModel& m, const std::vector<std::string>& prompts,
                       const Tensor& noise, const SampleSettings& settings) {
        return as<sdxl::SdxlImageSampler>(s).generate_from_noise(dynamic_cast<sdxl::Unet&>(m), prompts, noise,
                                                                 settings);
      },
      .sampling_files = [](const ModelConfig& model) -> std::pair<std::string, SamplerFiles> {
        const sdxl::SdxlSamplingFiles f = sdxl::sampling_files(model);
        return {f.pipeline,
                {{"vae_path", f.vae}, {"clip_l_path", f.clip_l}, {"clip_g_path", f.clip_g},
                 {"clip_tokenizer_path", f.clip_tokenizer}, {"clip_g_tokenizer_path", f.clip_g_tokenizer}}};
      },
      .encode = [](const LatentImageSampler& s, const std::vector<std::string>& captions) {
        return sdxl::encode_sdxl_prompts(*as<sdxl::SdxlImageSampler>(s).encoders(), captions);
      },
      .has_encoders = [](const LatentImageSampler& s) { return as<sdxl::SdxlImageSampler>(s).encoders() != nullptr; },
      .is_stored = [](const LatentImageSampler& s,
                      const std::string& prompt) { return as<sdxl::SdxlImageSampler>(s).is_stored(prompt); },
      .check_pipeline_model =
          [](DiffusionModel& m, const PipelineRun&) {
            const sdxl::Unet& unet = dynamic_cast<sdxl::Unet&>(m);
            EXPECT_EQ(unet.config().context_dim, 32);
            EXPECT_EQ(unet.config().pooled_dim(), 32);
          },
  };
}

// The Z-Image fixture's Qwen3 as a text_encoder/ folder holding the full file, written once.
const std::string& zimage_qwen3() {
  static const std::string folder = [] {
    const fs::path dir = scratch_dir("zimage_sampler_qwen3");
    write_full_llm_file(data_path("zimage_sample/qwen3.safetensors"), (dir / "model.safetensors").string());
    return dir.string();
  }();
  return folder;
}

SamplerArch zimage_row() {
  return {
      .name = "zimage",
      .fixture = "zimage_sample",
      .model = "zimage_sample/transformer",
      .tiny_files = {{"vae_path", data_path("vae/flux_tiny/vae")},
                     {"text_encoder_path", zimage_qwen3()},
                     {"tokenizer_path", data_path("bpe/qwen3")}},
      .guidance = 4.0,   // Base-like, with the negative prompt "" (Turbo's 1 is the pipeline runs')
      .t5_length = 64,   // Qwen3 tokens of a caption's template (max_length)
      // diffusers' guidance_scale s is wick's scale g - 1 (pos + s (pos - neg) = neg + g (pos - neg)).
      .pipeline_runs = {{.name = "turbo", .model = "zimage_sample/transformer", .steps = 8, .guidance = 1.0},
                        {.name = "base", .model = "zimage_sample/transformer", .steps = 5, .guidance = 5.0},
                        {.name = "base_negative",
                         .model = "zimage_sample/transformer",
                         .steps = 5,
                         .guidance = 4.0,
                         .negative_prompt = "blurry, low quality"}},
      .absolute_metric = false,
      // Measured (f32, 2 cores): turbo 5.3e-06, base 5.2e-06, base_negative 4.5e-06 (the images' largest value is 1).
      .pipeline_tolerance = 1e-5,
      .pipeline_line = "zimage sampler vs diffusers ZImagePipeline",
      .line_has_guidance = true,
      .distinct_images = {{"turbo", "base", 0.1}, {"base", "base_negative", 0.1}},
      .pipeline_name = "Z-Image-tiny",
      .model_part = "transformer",
      .pipeline_parts = {{"vae_path", "vae", {data_path("vae/flux_tiny/vae")}},
                         {"text_encoder_path", "text_encoder", {zimage_qwen3()}},
                         {"tokenizer_path", "tokenizer", {data_path("bpe/qwen3")}}},
      .model_index = R"({"_class_name": "ZImagePipeline"})",
      .overrides = {{"vae_path", "my_ae.safetensors"}, {"tokenizer_path", "tokenizer.json"}},
      .bare_model_file = data_path("zimage/comfyui_bf16.safetensors"),
      .other_size = {8, 12},
      .stored_captions = {"a red cube", "a photo of sks", ""},
      .stored_generated = {"a photo of [trigger]", "a red cube", "a photo of sks"},
      .stored_steps = 3,
      .print_stored_rounding =
          [](double difference, double) {
            std::printf("stored f16 zimage sample prompts vs encoded on the fly: images differ by %.2e of the largest "
                        "pixel\n",
                        difference);
          },
      .size_error = {"26 x 16",
                     {.steps = 1, .width = 26, .height = 16},
                     {"image size 26 x 16", "multiples of 4 pixels", "the nearest are 28 x 16"}},
      .steps_error = "steps must be >= 1",
      .other_model = "zimage/diffusers/transformer",  // cap_feat_dim 32
      .other_model_error = {"widths", {.steps = 1}, {"32-wide caption features", "zimage_sampler_qwen3", "16 wide"}},
      .required_parts = {{"text_encoder_path", "Qwen3's weights"}, {"vae_path", "the VAE"}},
      .make = [](const SamplerOptions& o) -> std::unique_ptr<LatentImageSampler> {
        zimage::ZImageSamplerSetup setup{.files = {.vae = part(o.files, "vae_path"),
                                                   .text_encoder = part(o.files, "text_encoder_path"),
                                                   .tokenizer = part(o.files, "tokenizer_path")},
                                         .negative_prompt = o.negative_prompt,
                                         .default_height = o.default_height,
                                         .default_width = o.default_width,
                                         .trigger_word = o.trigger_word,
                                         .stored_prompts = o.stored_prompts};
        if (o.t5_length > 0) setup.max_length = o.t5_length;
        return std::make_unique<zimage::ZImageImageSampler>(setup);
      },
      .from_noise = [](LatentImageSampler& s, DiffusionModel& m, const std::vector<std::string>& prompts,
                       const Tensor& noise, const SampleSettings& settings) {
        return as<zimage::ZImageImageSampler>(s).generate_from_noise(dynamic_cast<zimage::ZImageTransformer&>(m),
                                                                     prompts, noise, settings);
      },
      .sampling_files = [](const ModelConfig& model) -> std::pair<std::string, SamplerFiles> {
        const zimage::ZImageSamplingFiles f = zimage::sampling_files(model);
        return {f.pipeline,
                {{"vae_path", f.vae}, {"text_encoder_path", f.text_encoder}, {"tokenizer_path", f.tokenizer}}};
      },
      .encode = [](const LatentImageSampler& s, const std::vector<std::string>& captions) {
        return zimage::encode_zimage_prompts(*as<zimage::ZImageImageSampler>(s).encoder(), captions,
                                             {.max_length = 64});
      },
      .has_encoders = [](const LatentImageSampler& s) {
        return as<zimage::ZImageImageSampler>(s).encoder() != nullptr;
      },
      .is_stored = [](const LatentImageSampler& s,
                      const std::string& prompt) { return as<zimage::ZImageImageSampler>(s).is_stored(prompt, 64); },
      .check_pipeline_model =
          [](DiffusionModel& m, const PipelineRun&) {
            EXPECT_EQ(dynamic_cast<zimage::ZImageTransformer&>(m).config().cap_feat_dim, 16);
          },
  };
}

// The Qwen-Image fixture's Qwen2.5-VL as a text_encoder/ folder (the full file and its config.json, which gives the
// head width), written once.
const std::string& qwenimage_qwen25() {
  static const std::string folder = [] {
    const fs::path dir = scratch_dir("qwenimage_sampler_qwen25");
    write_full_llm_file(data_path("qwenimage_sample/from_prompts/qwen25vl.safetensors"),
                        (dir / "model.safetensors").string());
    fs::copy_file(data_path("qwenimage_sample/from_prompts/qwen25vl_config.json"), dir / "config.json");
    return dir.string();
  }();
  return folder;
}

// Qwen-Image's tokenizer/ folder: its tokenizer_config.json and added tokens with Qwen's truncated vocabulary.
const std::string& qwenimage_tokenizer() {
  static const std::string folder = [] {
    const fs::path dir = scratch_dir("qwenimage_sampler_tokenizer");
    for (const auto& entry : fs::directory_iterator(data_path("bpe/qwen_image")))
      fs::copy_file(entry.path(), dir / entry.path().filename());
    for (const char* name : {"vocab.json", "merges.txt"}) fs::copy_file(data_path("bpe/qwen3/") + name, dir / name);
    return dir.string();
  }();
  return folder;
}

// The tiny Qwen-Image transformer with 16-wide text rows (txt_norm and txt_in cut to their first 16 columns).
const std::string& qwenimage_text16() {
  static const std::string folder = [] {
    const fs::path dir = scratch_dir("qwenimage_sampler_text16");
    const std::string source = data_path("qwenimage/transformer");
    const SafetensorsFile weights = SafetensorsFile::open(source + "/diffusion_pytorch_model.safetensors");
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const std::string& name : weights.names()) {
      Tensor t = weights.get(name);
      if (name == "txt_norm.weight" || name == "txt_in.weight") t = t.narrow(t.dim() - 1, 0, 16).contiguous();
      tensors.emplace_back(name, t);
    }
    save_safetensors((dir / "diffusion_pytorch_model.safetensors").string(), tensors, {{"format", "pt"}});
    nlohmann::json config = nlohmann::json::parse(std::ifstream(source + "/config.json"));
    config["joint_attention_dim"] = 16;
    std::ofstream(dir / "config.json") << config.dump(2);
    return dir.string();
  }();
  return folder;
}

SamplerArch qwenimage_row() {
  return {
      .name = "qwenimage",
      .fixture = "qwenimage_sample/from_prompts",
      .model = "qwenimage/transformer",
      .tiny_files = {{"vae_path", data_path("qwenimage_vae/vae")},
                     {"text_encoder_path", qwenimage_qwen25()},
                     {"tokenizer_path", qwenimage_tokenizer()}},
      .guidance = 4.0,        // true_cfg_scale, against the default negative prompt ""
      .t5_length = 64,        // caption rows after the template's 34 (max_length)
      .call_size = {32, 16},  // multiples of 16 pixels: the x8 VAE times the 2 x 2 patches
      .pipeline_runs = {{.name = "plain", .model = "qwenimage/transformer", .steps = 4, .guidance = 1.0},
                        // The sampler's default negative prompt "" (wick trims prompts: the model card's " " is
                        // "" here; the fixture's cfg_space_vs_cfg_images_max says how far apart they are).
                        {.name = "cfg", .model = "qwenimage/transformer", .steps = 5, .guidance = 4.0},
                        {.name = "cfg_negative",
                         .model = "qwenimage/transformer",
                         .steps = 4,
                         .guidance = 4.0,
                         .negative_prompt = "blurry, low quality"}},
      .absolute_metric = false,
      // Measured (f32, 2 cores): plain 3.8e-05, cfg 2.3e-05, cfg_negative 5.4e-05 (the images' largest value is 1).
      // Not 1e-5: this tiny Wan VAE multiplies latent differences about six times (tests/data/qwenimage_sample).
      .pipeline_tolerance = 1e-4,
      .pipeline_line = "qwenimage sampler vs diffusers QwenImagePipeline",
      .line_has_guidance = true,
      .distinct_images = {{"plain", "cfg", 0.1}, {"cfg", "cfg_negative", 0.1}},
      .pipeline_name = "Qwen-Image-tiny",
      .model_part = "transformer",
      .pipeline_parts = {{"vae_path", "vae", {data_path("qwenimage_vae/vae")}},
                         {"text_encoder_path", "text_encoder", {qwenimage_qwen25()}},
                         {"tokenizer_path", "tokenizer", {qwenimage_tokenizer()}}},
      .model_index = R"({"_class_name": "QwenImagePipeline"})",
      .overrides = {{"vae_path", "qwen_image_vae.safetensors"}, {"tokenizer_path", "tokenizer.json"}},
      .bare_model_file = data_path("qwenimage/comfyui_bf16.safetensors"),
      .other_size = {48, 16},
      .stored_captions = {"a red cube", "a photo of sks", ""},
      .stored_generated = {"a photo of [trigger]", "a red cube", "a photo of sks"},
      .stored_steps = 3,
      // Measured 2.0e-3 (half an 8-bit level): true CFG at 4 and the tiny VAE amplify the f16 rounding of the rows.
      .stored_rounding_bound = 4e-3,
      .print_stored_rounding =
          [](double difference, double) {
            std::printf(
                "stored f16 qwenimage sample prompts vs encoded on the fly: images differ by %.2e of the "
                "largest pixel\n",
                difference);
          },
      .size_error = {"40 x 16",
                     {.steps = 1, .width = 40, .height = 16},
                     {"image size 40 x 16", "multiples of 16 pixels"}},
      .steps_error = "steps must be >= 1",
      .other_model = qwenimage_text16(),
      .other_model_error = {"widths", {.steps = 1}, {"16-wide text rows", "qwenimage_sampler_qwen25", "32 wide"}},
      .required_parts = {{"text_encoder_path", "Qwen2.5-VL"}, {"vae_path", "the VAE"}},
      .make = [](const SamplerOptions& o) -> std::unique_ptr<LatentImageSampler> {
        qwenimage::QwenImageSamplerSetup setup{.files = {.vae = part(o.files, "vae_path"),
                                                         .text_encoder = part(o.files, "text_encoder_path"),
                                                         .tokenizer = part(o.files, "tokenizer_path")},
                                               .negative_prompt = o.negative_prompt,
                                               .default_height = o.default_height,
                                               .default_width = o.default_width,
                                               .trigger_word = o.trigger_word,
                                               .stored_prompts = o.stored_prompts};
        if (o.t5_length > 0) setup.max_length = o.t5_length;
        return std::make_unique<qwenimage::QwenImageImageSampler>(setup);
      },
      .from_noise =
          [](LatentImageSampler& s, DiffusionModel& m, const std::vector<std::string>& prompts, const Tensor& noise,
             const SampleSettings& settings) {
            return as<qwenimage::QwenImageImageSampler>(s).generate_from_noise(
                dynamic_cast<qwenimage::QwenImageTransformer&>(m), prompts, noise, settings);
          },
      .sampling_files = [](const ModelConfig& model) -> std::pair<std::string, SamplerFiles> {
        const qwenimage::QwenImageSamplingFiles f = qwenimage::sampling_files(model);
        return {f.pipeline,
                {{"vae_path", f.vae}, {"text_encoder_path", f.text_encoder}, {"tokenizer_path", f.tokenizer}}};
      },
      .encode =
          [](const LatentImageSampler& s, const std::vector<std::string>& captions) {
            return qwenimage::encode_qwenimage_prompts(*as<qwenimage::QwenImageImageSampler>(s).encoder(), captions,
                                                       {.max_length = 64});
          },
      .has_encoders =
          [](const LatentImageSampler& s) { return as<qwenimage::QwenImageImageSampler>(s).encoder() != nullptr; },
      .is_stored = [](const LatentImageSampler& s,
                      const std::string& prompt) { return as<qwenimage::QwenImageImageSampler>(s).is_stored(prompt); },
      .check_pipeline_model =
          [](DiffusionModel& m, const PipelineRun&) {
            EXPECT_EQ(dynamic_cast<qwenimage::QwenImageTransformer&>(m).config().text_dim, 32);
          },
  };
}

// One row per architecture whose datasets are encoded from images; a new one adds its line.
const std::vector<std::pair<std::string, SamplerArch (*)()>> kRows = {
    {"flux", flux_row}, {"sd3", sd3_row}, {"sdxl", sdxl_row}, {"zimage", zimage_row}, {"qwenimage", qwenimage_row},
};

// ---- the tests every row runs ----

class ArchSampler : public ::testing::TestWithParam<std::string> {
 protected:
  const SamplerArch& row() const { return sampler_arch(GetParam()); }
  double difference(const Tensor& got, const Tensor& want) const {
    return row().absolute_metric ? max_abs_difference(got, want) : relative_to_max(got, want);
  }
  const SafetensorsFile& pipeline_case() const {
    static std::map<std::string, SafetensorsFile> files;
    auto it = files.find(row().fixture);
    if (it == files.end())
      it = files.emplace(row().fixture, SafetensorsFile::open(data_path(row().fixture + "/case.safetensors"))).first;
    return it->second;
  }
};

TEST_P(ArchSampler, ImagesMatchTheDiffusersPipeline) {
  const SamplerArch& a = row();
  const SafetensorsFile& fixture = pipeline_case();
  const auto prompts = nlohmann::json::parse(fixture.metadata().at("prompts")).get<std::vector<std::string>>();
  for (const PipelineRun& run : a.pipeline_runs) {
    SCOPED_TRACE(run.name);
    auto model = a.load(data_path(run.model));
    ASSERT_TRUE(model);
    a.check_pipeline_model(*model, run);
    auto sampler = a.make({.files = a.tiny_files,
                           .negative_prompt = run.negative_prompt,
                           .zeros_for_empty_negative = run.zeros_for_empty_negative,
                           .v_prediction = run.v_prediction});
    const Tensor images =
        a.from_noise(*sampler, *model, prompts, fixture.get("noise"), {.steps = run.steps, .guidance = run.guidance});
    const Tensor want = fixture.get(run.name + ".images");
    const double error = difference(images, want);
    char guidance[32] = "";
    if (a.line_has_guidance) std::snprintf(guidance, sizeof guidance, ", guidance %g", run.guidance);
    std::printf("%s, %s (%lld steps%s, %zu images %lld x %lld): %s%.2e\n", a.pipeline_line.c_str(), run.name.c_str(),
                static_cast<long long>(run.steps), guidance, prompts.size(), static_cast<long long>(want.size(3)),
                static_cast<long long>(want.size(2)), a.absolute_metric ? "max abs " : "", error);
    EXPECT_LE(error, a.pipeline_tolerance);
  }
  // The fixture is sensitive to what is tested.
  for (const DistinctImages& pair : a.distinct_images)
    EXPECT_GT(difference(fixture.get(pair.a + ".images"), fixture.get(pair.b + ".images")), pair.at_least)
        << pair.a << " vs " << pair.b;
}

TEST_P(ArchSampler, PipelineFolderGivesTheDefaultsAndKeysWin) {
  const SamplerArch& a = row();
  const fs::path pipeline = scratch_dir(a.name + "_sample_pipeline") / a.pipeline_name;
  fs::create_directories(pipeline);
  auto link = [](const fs::path& source, const fs::path& at) {
    if (fs::is_directory(source))
      fs::create_directory_symlink(fs::absolute(source), at);
    else
      fs::create_symlink(fs::absolute(source), at);
  };
  link(data_path(a.model), pipeline / a.model_part);
  for (const PipelinePart& p : a.pipeline_parts) {
    if (!p.copy) {
      link(p.sources.at(0), pipeline / p.folder);
      continue;
    }
    fs::create_directories(pipeline / p.folder);
    for (const std::string& source : p.sources)
      fs::copy_file(source, pipeline / p.folder / fs::path(source).filename());
  }

  // The folder, its model part, and a file inside a folder with model_index.json. Without model_index.json, a folder
  // is a pipeline folder only when it holds transformer/.
  const std::optional<std::string> by_transformer =
      a.model_part == "transformer" ? std::optional(pipeline.string()) : std::nullopt;
  EXPECT_EQ(pipeline_folder(pipeline.string()), by_transformer);
  EXPECT_EQ(pipeline_folder(pipeline.string() + "/"), by_transformer);
  EXPECT_EQ(pipeline_folder((pipeline / a.model_part).string()), std::nullopt);
  std::ofstream(pipeline / "model_index.json") << a.model_index;
  EXPECT_EQ(pipeline_folder(pipeline.string()), pipeline.string());
  EXPECT_EQ(pipeline_folder(pipeline.string() + "/"), pipeline.string());
  EXPECT_EQ(pipeline_folder((pipeline / a.model_part).string()), pipeline.string());
  EXPECT_EQ(pipeline_folder((pipeline / "single_file.safetensors").string()), pipeline.string());
  EXPECT_EQ(pipeline_folder(a.bare_model_file), std::nullopt);
  EXPECT_EQ(pipeline_folder(""), std::nullopt);

  // Each part the folder has is its key's default; the keys without a part stay empty.
  ModelConfig model = a.model_config((pipeline / a.model_part).string());
  std::pair<std::string, SamplerFiles> resolved = a.sampling_files(model);
  EXPECT_EQ(resolved.first, pipeline.string());
  SamplerFiles want;
  for (const PipelinePart& p : a.pipeline_parts) want[p.key] = (pipeline / p.folder).string();
  for (const auto& [key, path] : want) EXPECT_EQ(resolved.second.count(key), 1u) << key;
  for (const auto& [key, path] : resolved.second) EXPECT_EQ(path, part(want, key)) << key;
  // The keys win over the folder's parts; the others keep theirs.
  for (const auto& [key, value] : a.overrides) model.options.set(key, value);
  resolved = a.sampling_files(model);
  for (const auto& [key, path] : resolved.second)
    EXPECT_EQ(path, a.overrides.count(key) ? a.overrides.at(key) : part(want, key)) << key;
  // A model file outside any pipeline folder, without the other parts, gives none of them.
  resolved = a.sampling_files(a.model_config(a.bare_model_file));
  EXPECT_EQ(resolved.first, "");
  for (const auto& [key, path] : resolved.second) EXPECT_EQ(path, "") << key;

  // The pipeline folder's parts make the same images as the files one by one.
  auto loaded = a.load(pipeline.string());
  ASSERT_TRUE(loaded);
  const SampleSettings settings{.steps = 2, .guidance = a.guidance, .seed = 5};
  const auto [call_width, call_height] = a.call_size;
  SamplerOptions options{.t5_length = a.t5_length, .default_height = call_height, .default_width = call_width};
  options.files = a.sampling_files(a.model_config(pipeline.string())).second;
  const Tensor from_folder = a.make(options)->generate(*loaded, {"a red cube"}, settings);
  options.files = a.tiny_files;
  const Tensor from_files = a.make(options)->generate(*loaded, {"a red cube"}, settings);
  EXPECT_EQ(from_folder.shape(), (Shape{1, 3, call_height, call_width}));
  EXPECT_EQ(from_folder.to_vector<float>(), from_files.to_vector<float>());
}

TEST_P(ArchSampler, ImagesAreDeterministicPerSeedAndTheModeIsRestored) {
  const SamplerArch& a = row();
  auto model = a.load(data_path(a.model));
  ASSERT_TRUE(model);
  model->train(true);
  // The call size transposed: taller than wide.
  const auto [height, width] = a.call_size;
  auto sampler = a.make({.files = a.tiny_files,
                         .t5_length = a.t5_length,
                         .default_height = height,
                         .default_width = width,
                         .trigger_word = "sks"});
  const std::vector<std::string> prompts = {"a photo of [trigger]", "", "a photo of [trigger]"};
  const SampleSettings settings{.steps = 3, .guidance = a.guidance, .seed = 11};
  const Tensor first = sampler->generate(*model, prompts, settings);
  EXPECT_TRUE(model->is_training());
  EXPECT_EQ(first.shape(), (Shape{3, 3, height, width}));
  EXPECT_EQ(first.dtype(), DType::F32);
  std::vector<float> pixels = first.to_vector<float>();
  EXPECT_GE(*std::min_element(pixels.begin(), pixels.end()), 0.0f);
  EXPECT_LE(*std::max_element(pixels.begin(), pixels.end()), 1.0f);
  EXPECT_GT(*std::max_element(pixels.begin(), pixels.end()) - *std::min_element(pixels.begin(), pixels.end()), 0.1f);
  EXPECT_EQ(sampler->generate(*model, prompts, settings).to_vector<float>(), pixels);  // bitwise
  // Images 0 and 2 share a prompt but not their noise (derive_stream(seed, i)).
  EXPECT_GT(difference(first.narrow(0, 0, 1), first.narrow(0, 2, 1)), 1e-3);
  // The trigger word is the prompt's: "a photo of sks" written out gives the same images (a call of as many images:
  // the matrix products' blocking depends on the batch).
  EXPECT_EQ(sampler->generate(*model, {"a photo of sks", "", "a photo of sks"}, settings).to_vector<float>(), pixels);
  // Another seed, another guidance, another size, no prompts.
  const Tensor image0 = first.narrow(0, 0, 1);
  EXPECT_GT(difference(sampler->generate(*model, {prompts[0]}, {.steps = 3, .guidance = a.guidance, .seed = 12}),
                       image0),
            1e-3);
  EXPECT_GT(difference(sampler->generate(*model, {prompts[0]}, {.steps = 3, .guidance = 1.0, .seed = 11}), image0),
            1e-4);
  const auto [other_width, other_height] = a.other_size;
  EXPECT_EQ(
      sampler->generate(*model, {prompts[0]}, {.steps = 1, .seed = 11, .width = other_width, .height = other_height})
          .shape(),
      (Shape{1, 3, other_height, other_width}));
  EXPECT_EQ(sampler->generate(*model, {}, settings).shape(), (Shape{0, 3, height, width}));
}

TEST(ArchSampler, PromptTextIsWhatDatasetEncodeStores) {
  EXPECT_EQ(text::prompt_text("a photo of [trigger]", "sks"), "a photo of sks");
  EXPECT_EQ(text::prompt_text("[name] and [trigger] ", "sks"), "sks and sks");  // as apply_trigger(..., false)
  EXPECT_EQ(text::prompt_text("  a cat", ""), "a cat");
  EXPECT_EQ(text::prompt_text("[trigger] on the moon", "ohwx"), "ohwx on the moon");
}

// The dataset's /sample_prompts (caption -> the encoders' context and pooled, f16 in the file) in place of the
// encoders: with the encoders' own output stored (f32) the images are bitwise those encoded on the fly, so the stored
// path changes nothing but where the embeddings come from; rounded to f16, as the file keeps them, they differ by the
// rounding only. No encoder is opened, and a prompt that is not stored is an error naming it and the missing parts.
TEST_P(ArchSampler, StoredPromptsNeedNoEncodersAndMatchOnTheFly) {
  const SamplerArch& a = row();
  auto model = a.load(data_path(a.model));
  ASSERT_TRUE(model);
  SamplerOptions options{.files = a.tiny_files,
                         .t5_length = a.t5_length,
                         .default_height = a.call_size.second,
                         .default_width = a.call_size.first,
                         .trigger_word = "sks"};
  auto on_the_fly = a.make(options);
  const text::PromptEmbeddings e = a.encode(*on_the_fly, a.stored_captions);
  options.files = {{"vae_path", a.tiny_files.at("vae_path")}};
  options.stored_prompts = stored_prompts(a.stored_captions, e, DType::F32);
  auto exact = a.make(options);
  options.stored_prompts = stored_prompts(a.stored_captions, e, DType::F16);
  auto rounded = a.make(options);
  EXPECT_FALSE(a.has_encoders(*exact));
  const std::string description = exact->describe();
  EXPECT_THAT(description, AllOf(HasSubstr("the embeddings of the " + std::to_string(a.stored_captions.size()) +
                                           " sample prompts stored in the dataset"),
                                 HasSubstr("no text encoders")));
  for (const auto& [key, path] : a.tiny_files) {
    if (key != "vae_path") {
      EXPECT_THAT(description, HasSubstr("model." + key));
    }
  }
  for (const std::string& prompt : a.stored_generated) EXPECT_TRUE(a.is_stored(*exact, prompt)) << prompt;
  EXPECT_FALSE(a.is_stored(*exact, "a red cube."));

  const SampleSettings settings{.steps = a.stored_steps, .guidance = a.guidance, .seed = 5};
  const Tensor want = on_the_fly->generate(*model, a.stored_generated, settings);
  // The stored embeddings were encoded as one batch of stored_captions, the on-the-fly ones as stored_generated: a
  // matrix product's rows may round differently with the batch's size (seen on an AMD EPYC machine), so the
  // same images up to float rounding.
  EXPECT_LE(relative_to_max(exact->generate(*model, a.stored_generated, settings), want), 1e-5);
  const Tensor got = rounded->generate(*model, a.stored_generated, settings);
  const double rounding = relative_to_max(got, want);
  if (a.print_stored_rounding) a.print_stored_rounding(rounding, max_abs_difference(got, want));
  EXPECT_GT(rounding, 0.0);  // the rounding is there...
  EXPECT_LT(rounding, a.stored_rounding_bound);  // ...and small

  // Not stored, no encoders: the prompt, the stored captions and the missing parts are named.
  std::string captions;
  for (const std::string& caption : a.stored_captions)
    captions += (captions.empty() ? "" : ", ") + ("\"" + caption + "\"");
  const std::string message = error_of([&] { exact->generate(*model, {"a blue ball"}, settings); });
  EXPECT_THAT(message, HasSubstr("the prompt \"a blue ball\" is not among the sample prompts stored in the dataset (" +
                                 captions + ")"));
  for (const auto& [key, path] : a.tiny_files) {
    if (key != "vae_path") {
      EXPECT_THAT(message, HasSubstr("model." + key));
    }
  }
}

TEST_P(ArchSampler, ErrorsNameTheProblem) {
  const SamplerArch& a = row();
  auto model = a.load(data_path(a.model));
  ASSERT_TRUE(model);
  auto sampler = a.make({.files = a.tiny_files,
                         .t5_length = a.t5_length,
                         .default_height = a.call_size.second,
                         .default_width = a.call_size.first});
  auto expect_message = [](const std::string& message, const std::vector<std::string>& parts) {
    for (const std::string& p : parts) EXPECT_THAT(message, HasSubstr(p));
  };
  expect_message(error_of([&] { sampler->generate(*model, {"x"}, a.size_error.settings); }), a.size_error.message);
  EXPECT_THAT(error_of([&] { sampler->generate(*model, {"x"}, {.steps = 0}); }), HasSubstr(a.steps_error));
  // A model whose widths do not fit the encoders.
  auto other = a.load(fs::path(a.other_model).is_absolute() ? a.other_model : data_path(a.other_model));
  ASSERT_TRUE(other);
  expect_message(error_of([&] { sampler->generate(*other, {"x"}, a.other_model_error.settings); }),
                 a.other_model_error.message);
  // Parts that are not given, or not what they should be.
  for (const auto& [key, named] : a.required_parts) {
    SamplerFiles files = a.tiny_files;
    files[key] = "";
    EXPECT_THAT(error_of([&] { a.make({.files = files}); }), HasSubstr(named)) << key;
  }
  SamplerFiles swapped = a.tiny_files;
  swapped["vae_path"] = data_path("clip_text/clip_l/model.safetensors");
  EXPECT_THAT(error_of([&] { a.make({.files = swapped}); }), HasSubstr("model.safetensors"));
}

std::vector<std::string> encodable_names() {
  std::vector<std::string> names;
  for (const Architecture* arch : encodable_architectures()) names.push_back(arch->name());
  return names;
}

INSTANTIATE_TEST_SUITE_P(Registry, ArchSampler, ::testing::ValuesIn(encodable_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace

// ---- arch_sampler.h ----

std::shared_ptr<DiffusionModel> SamplerArch::load(const std::string& path) const {
  return find_architecture(name).build({.model = model_config(path), .dtype = DType::F32});
}

ModelConfig SamplerArch::model_config(const std::string& path) const {
  return {.arch = name, .name_or_path = path,
          .options = ModelOptions::defaults(find_architecture(name).schema().keys)};
}

const SamplerArch& sampler_arch(const std::string& name) {
  static std::map<std::string, SamplerArch> made;
  auto it = made.find(name);
  if (it != made.end()) return it->second;
  for (const auto& [row_name, make_row] : kRows)
    if (row_name == name) return made.emplace(name, make_row()).first->second;
  ADD_FAILURE() << "tests/models/arch_sampler_test.cpp has no row for the architecture '" << name
                << "': add one to kRows";
  throw std::runtime_error("no sampler row for " + name);
}

SamplePrompts stored_prompts(const std::vector<std::string>& captions, const text::PromptEmbeddings& e, DType dtype) {
  return {.captions = captions,
          .embeds = e.context.to(dtype).to(DType::F32),
          .pooled = e.pooled.to(dtype).to(DType::F32),
          .mask = e.mask.to(DType::U8)};
}

}  // namespace wick::testing
