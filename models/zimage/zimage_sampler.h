// Z-Image sample images: prompts -> Qwen3 (encode_zimage_prompts) -> noise at the chosen size -> Euler over the
// pipeline's schedule (σ = linspace(1, 1/N, N) with the static shift, then 0), with classifier-free guidance when
// sample.guidance is not 1 (Base) and none when it is (Turbo) -> the Flux VAE decoder -> images in [0, 1]. What
// `wick train`'s sample grids and `wick sample` run for model.arch zimage (Architecture::make_sampler); diffusers'
// ZImagePipeline gives the same images (tests/data/zimage_sample).
//
//   ZImageSamplingFiles files = sampling_files(config.model);    // the keys, else the pipeline folder's parts
//   ZImageImageSampler sampler({.files = files, .default_height = 1024, .default_width = 1024});   // headers only
//   Tensor turbo = sampler.generate(model, {"a photo of a cat"}, {.steps = 8, .guidance = 1.0, .seed = 7});
//   Tensor base = sampler.generate(model, {"a photo of a cat"}, {.steps = 28, .guidance = 5.0, .seed = 7});
//
// Guidance: sample.guidance g is the usual classifier-free scale, neg + g·(pos − neg) (1 = off, one forward per
// step). diffusers' ZImagePipeline writes the same as pos + s·(pos − neg) with guidance_scale s = g − 1, so its
// guidance_scale=0.0 (Turbo) is g = 1 here and its 4.0 is g = 5; ai-toolkit's cfg is g.
//
// A call loads Qwen3 (freed after its pass) before the transformer runs, then the VAE for the decoding, freed after
// it; `keep_loaded` keeps both between calls. Prompts a dataset stored (`wick dataset encode --config`) take their
// stored rows instead of Qwen3's output, as for Flux (models/flux/flux_sampler.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/data/latent_dataset.h"
#include "models/diffusion/latent_image_sampler.h"
#include "models/image_sampler.h"
#include "models/vae/vae.h"
#include "models/zimage/zimage.h"
#include "models/zimage/zimage_text.h"

namespace wick::zimage {

// The latent normalization of the Flux VAE Z-Image uses (MODELS2 section 1.4): latents = (z - shift) * scale.
inline constexpr vae::LatentNormalization kVaeNormalization = {.scaling_factor = 0.3611, .shift_factor = 0.1159};

// Where a run's VAE, text encoder and tokenizer are ("" = not given and no default).
struct ZImageSamplingFiles {
  std::string vae;           // model.vae_path: ae.safetensors, a diffusers vae/ folder or a pipeline folder
  std::string text_encoder;  // model.text_encoder_path: qwen_3_4b.safetensors or a text_encoder/ folder
  std::string tokenizer;     // model.tokenizer_path: a tokenizer/ folder or its tokenizer.json
  std::string pipeline;      // the diffusers pipeline folder the defaults came from ("" when none)
};

// Each file the model keys name (vae_path, text_encoder_path, tokenizer_path), else the pipeline folder's part when
// model.name_or_path gives one: vae/, text_encoder/, tokenizer/. Nothing is opened.
ZImageSamplingFiles sampling_files(const ModelConfig& model);

// The pipeline's schedule for `steps` Euler steps: σ_k of linspace(1, 1/steps, steps), each shifted to
// s·σ / (1 + (s − 1)·σ), then 0 (steps + 1 values), computed in float32 as diffusers' ZImagePipeline and its
// FlowMatchEulerDiscreteScheduler compute them. Turbo's 8 steps at shift 3: 1, .9545, .9, .8333, .75, .6429, .5, .3, 0.
std::vector<double> zimage_sigmas(int64_t steps, double shift);

struct ZImageSamplerSetup {
  ZImageSamplingFiles files;  // vae is required; the text parts unless stored prompts hold every prompt
  int64_t max_length = 512;   // Qwen3 tokens of a caption's template (the pipeline's max_sequence_length)
  double shift = 3.0;         // the schedule's static shift (Z-Image-Turbo's scheduler_config.json)
  std::string negative_prompt;  // the unconditional prompt of classifier-free guidance ("" as the pipeline)
  vae::LatentNormalization normalization = kVaeNormalization;  // undone before decoding
  int64_t default_height = 0, default_width = 0;  // pixels when a call gives none (> 0)
  std::string trigger_word;                       // replaces "[trigger]" and "[name]" in prompts
  Device device = Device::cpu();                  // Qwen3 and the VAE (bf16 on CUDA, f32 on the CPU)
  bool keep_loaded = false;                       // keep Qwen3 and the VAE between calls
  std::optional<SamplePrompts> stored_prompts;    // a dataset's /sample_prompts, made with the same max_length
};

class ZImageImageSampler : public LatentImageSampler {
 public:
  // Opens the tokenizer and the encoder and VAE headers (no weight is read): WickError (Config) naming the field left
  // empty, (Data) naming a file that is not what it should be. With stored prompts and a text part left empty, no
  // encoder is opened.
  explicit ZImageImageSampler(ZImageSamplerSetup setup);

  // (generate, from LatentImageSampler: `model` must be a ZImageTransformer whose widths fit Qwen3 and the VAE;
  // settings.width / height: pixels, multiples of 2·f (16 for the real VAE); settings.guidance as above.)
  // The same from given starting noise f32 [N, C, h, w] (N = prompts, C = the VAE's latent channels, h and w even).
  Tensor generate_from_noise(ZImageTransformer& model, const std::vector<std::string>& prompts, const Tensor& noise,
                             const SampleSettings& settings);

  // Whether `prompt` (trigger word put in) would take stored embeddings at `max_length` tokens.
  bool is_stored(const std::string& prompt, int64_t max_length) const {
    return holds(prompt) && stored()->embeds.size(1) == max_length;
  }
  // Qwen3 and its tokenizer; null when none were opened (stored prompts only).
  const ZImageTextEncoder* encoder() const { return encoder_ ? &*encoder_ : nullptr; }

 private:
  SizeRule size_rule(DiffusionModel& model) const override;
  Tensor sample(DiffusionModel& model, const std::vector<std::string>& prompts, const Tensor& noise,
                const SampleSettings& settings) override;
  bool has_encoders() const override { return encoder_.has_value(); }
  void unload_encoders() override { encoder_->unload(); }
  std::string describe_text() const override;
  std::string describe_choices() const override;
  void check_fits(const ZImageTransformer& model) const;

  ZImageSamplerSetup zimage_;
  std::optional<ZImageTextEncoder> encoder_;
};

// The sampler for a run (SamplerRequest): sampling_files(config.model); the dataset's recorded max_length when its
// embeddings are Z-Image's, else model.max_length; the shift model.sample_shift, else the pipeline's
// scheduler/scheduler_config.json, else 3.0; sample.negative_prompt; the dataset's latent normalization, its first
// bucket's size in pixels, model.keep_encoders_loaded, and the dataset's /sample_prompts when they are Z-Image's.
// Config errors naming every missing part and the key that gives it (the text parts are not required when the stored
// prompts hold every prompt of the grid and, when sample.guidance != 1, the negative prompt); Qwen3's and the VAE's
// widths checked against the dataset's.
std::unique_ptr<ImageSampler> make_zimage_sampler(const SamplerRequest& request);

}  // namespace wick::zimage
