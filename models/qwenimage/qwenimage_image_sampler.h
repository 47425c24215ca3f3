// Qwen-Image sample images for a run: prompts -> Qwen2.5-VL (encode_qwenimage_prompts) -> noise at the chosen size ->
// the pipeline's denoising loop (qwenimage_sampler.h: the dynamic exponential shift with its terminal stretch, true
// CFG with the per-token rescale when sample.guidance > 1) -> the Qwen-Image VAE's decoder -> images in [0, 1]. What
// `wick train`'s sample grids and `wick sample` run for model.arch qwenimage (Architecture::make_sampler); diffusers'
// QwenImagePipeline gives the same images (tests/models/arch_sampler_test.cpp).
//
//   QwenImageSamplingFiles files = sampling_files(config.model);  // the keys, else the pipeline folder's parts
//   QwenImageImageSampler sampler({.files = files, .default_height = 1024, .default_width = 1024});   // headers only
//   Tensor images = sampler.generate(model, {"a photo of a cat"}, {.steps = 50, .guidance = 4.0, .seed = 7});
//
// Guidance: sample.guidance is the pipeline's true_cfg_scale: > 1 runs the negative prompt (sample.negative_prompt,
// "" by default: the template with an empty user turn) beside each prompt and combines them as neg + g·(pos − neg)
// rescaled per token to the positive's norm; 1 (or less) is one forward per step without it. The text rows are cut
// to the longest prompt's before the loop (the mask hides the rest either way).
//
// A call loads Qwen2.5-VL (freed after its pass) before the transformer runs, then the VAE for the decoding, freed
// after it; `keep_loaded` keeps both between calls. Prompts a dataset stored (`wick dataset encode --config`) take
// their stored rows instead of the encoder's output.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/data/latent_dataset.h"
#include "models/diffusion/latent_image_sampler.h"
#include "models/image_sampler.h"
#include "models/qwenimage/qwenimage.h"
#include "models/qwenimage/qwenimage_sampler.h"
#include "models/qwenimage/qwenimage_text.h"

namespace wick::qwenimage {

// Where a run's VAE, text encoder and tokenizer are ("" = not given and no default).
struct QwenImageSamplingFiles {
  std::string vae;           // model.vae_path: qwen_image_vae.safetensors, a diffusers vae/ folder or a pipeline folder
  std::string text_encoder;  // model.text_encoder_path: qwen_2.5_vl_7b.safetensors or a text_encoder/ folder
  std::string tokenizer;     // model.tokenizer_path: a tokenizer/ folder or its tokenizer.json
  std::string pipeline;      // the diffusers pipeline folder the defaults came from ("" when none)
};

// Each file the model keys name, else the pipeline folder's part when model.name_or_path gives one: vae/,
// text_encoder/, tokenizer/. Nothing is opened.
QwenImageSamplingFiles sampling_files(const ModelConfig& model);

// The schedule of a pipeline folder's scheduler/scheduler_config.json (base_image_seq_len, max_image_seq_len,
// base_shift, max_shift, shift_terminal; each absent one Qwen-Image's), else Qwen-Image's. WickError (Data) for a
// malformed file.
QwenImageSchedule pipeline_schedule(const std::string& pipeline);

struct QwenImageSamplerSetup {
  QwenImageSamplingFiles files;  // vae is required; the text parts unless stored prompts hold every prompt
  int64_t max_length = 512;      // caption rows (the pipeline's max_sequence_length)
  QwenImageSchedule schedule;
  std::string negative_prompt;  // true CFG's negative prompt ("" by default)
  vae::LatentNormalization normalization = {.scaling_factor = 1.0, .shift_factor = 0.0};  // no scalar factor
  int64_t default_height = 0, default_width = 0;  // pixels when a call gives none (> 0)
  std::string trigger_word;                       // replaces "[trigger]" and "[name]" in prompts
  Device device = Device::cpu();                  // Qwen2.5-VL and the VAE (bf16 on CUDA, f32 on the CPU)
  bool keep_loaded = false;                       // keep Qwen2.5-VL and the VAE between calls
  std::optional<SamplePrompts> stored_prompts;    // a dataset's /sample_prompts, made with the same max_length
};

class QwenImageImageSampler : public LatentImageSampler {
 public:
  // Opens the tokenizer and the encoder and VAE headers (no weight is read): WickError (Config) naming the field left
  // empty, (Data) naming a file that is not what it should be. With stored prompts and a text part left empty, no
  // encoder is opened.
  explicit QwenImageImageSampler(QwenImageSamplerSetup setup);

  // The images from given starting noise f32 [N, 16, h, w] (h and w even) on `model` (checked against the VAE, the
  // encoder and the stored prompts' widths).
  Tensor generate_from_noise(QwenImageTransformer& model, const std::vector<std::string>& prompts, const Tensor& noise,
                             const SampleSettings& settings);

  // Whether `prompt` (trigger word put in) would take stored embeddings.
  bool is_stored(const std::string& prompt) const {
    return holds(prompt) && stored()->embeds.size(1) == qwen_.max_length;
  }
  // Qwen2.5-VL and its tokenizer; null when none were opened (stored prompts only).
  const QwenImageTextEncoder* encoder() const { return encoder_ ? &*encoder_ : nullptr; }

 private:
  SizeRule size_rule(DiffusionModel& model) const override;
  Tensor sample(DiffusionModel& model, const std::vector<std::string>& prompts, const Tensor& noise,
                const SampleSettings& settings) override;
  bool has_encoders() const override { return encoder_.has_value(); }
  void unload_encoders() override { encoder_->unload(); }
  std::string describe_text() const override;
  std::string describe_choices() const override;
  void check_fits(const QwenImageTransformer& model) const;

  QwenImageSamplerSetup qwen_;
  std::optional<QwenImageTextEncoder> encoder_;
};

// The sampler for a run (SamplerRequest): sampling_files(config.model); the dataset's recorded max_length when its
// embeddings are Qwen-Image's, else model.max_length; the pipeline folder's schedule; sample.negative_prompt; the
// dataset's first bucket's size in pixels, model.keep_encoders_loaded, and the dataset's /sample_prompts when they are
// Qwen-Image's. Config errors naming every missing part and the key that gives it; the VAE's per-channel latent
// normalization checked against the dataset's.
std::unique_ptr<ImageSampler> make_qwenimage_sampler(const SamplerRequest& request);

}  // namespace wick::qwenimage
