// SDXL sample images, as diffusers' StableDiffusionXLPipeline makes them: prompts and the negative prompt -> CLIP-L and
// bigG (encode_sdxl_prompts: penultimate hidden states joined, bigG's projected pooled vector) -> the micro-conditioning
// (original size = target size = the image's (H, W), crop (0, 0)) -> noise · init_noise_sigma -> Euler over
// EulerDiscreteScheduler's "leading" schedule (models/diffusion/euler_discrete.h) with classifier-free guidance
// (uncond + g·(cond − uncond), one UNet forward of batch 2B per step) -> latents / 0.13025 -> the SDXL VAE decoder ->
// images in [0, 1]. What `wick train`'s sample grids and `wick sample` run for model.arch sdxl.
//
//   SdxlSamplingFiles files = sdxl::sampling_files(config.model);   // the keys, else the pipeline folder's parts
//   SdxlImageSampler sampler({.files = files, .default_height = 1024, .default_width = 1024});   // headers only
//   Tensor images = sampler.generate(unet, {"a photo of a cat"}, {.steps = 30, .guidance = 5.0, .seed = 7});
//
// The negative prompt. Guidance g != 1 runs the UNet on the prompt and on the negative prompt (SdxlSamplerSetup::
// negative_prompt); g == 1 runs the prompt only (diffusers skips the negative for every g <= 1; both agree for
// g >= 1). An EMPTY negative prompt gives zero embeddings and a zero pooled vector when zeros_for_empty_negative is
// set: diffusers' force_zeros_for_empty_prompt, which SDXL base's model_index.json sets (the pipeline applies it when
// no negative prompt is passed, and "" is wick's "none given"); without it, "" is encoded like any prompt.
//
// A call loads CLIP-L, then bigG, each freed after its pass, before the UNet runs; then the VAE, freed after the
// decoding. `keep_loaded` keeps all three between calls.
//
// Stored prompts: a dataset made by `wick dataset encode --model sdxl --config` holds the training config's sample
// prompts and its non-empty negative prompt already encoded (/sample_prompts). A prompt whose text (trigger word put
// in, ends trimmed) is byte for byte one of the stored captions takes that row; the others are encoded.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/data/latent_dataset.h"
#include "models/diffusion/latent_image_sampler.h"
#include "models/image_sampler.h"
#include "models/sdxl/sdxl_text.h"
#include "models/sdxl/sdxl_unet.h"
#include "models/vae/vae.h"

namespace wick::sdxl {

// The latent normalization of the SDXL VAE (MODELS.md 1.5): latents = (z - shift) * scale.
inline constexpr vae::LatentNormalization kVaeNormalization = {.scaling_factor = 0.13025, .shift_factor = 0.0};

// Where a run's SDXL VAE, text encoders and tokenizers are ("" = not given and no default).
struct SdxlSamplingFiles {
  std::string vae;               // model.vae_path: a diffusers vae/ folder, a VAE file, or an SDXL single file
  std::string clip_l;            // model.clip_l_path: a file, an index, a text_encoder/ folder or an SDXL single file
  std::string clip_g;            // model.clip_g_path: the same for bigG (text_encoder_2/)
  std::string clip_tokenizer;    // model.clip_tokenizer_path: a tokenizer/ folder or bpe_simple_vocab_16e6.txt.gz
  std::string clip_g_tokenizer;  // model.clip_g_tokenizer_path: a tokenizer_2/ folder; "" = clip_tokenizer, pad "!"
  std::string pipeline;          // the diffusers pipeline folder the defaults came from ("" when none)
};

// Each file the model keys name (vae_path, clip_l_path, clip_g_path, clip_tokenizer_path, clip_g_tokenizer_path), else,
// when model.name_or_path lies in a diffusers pipeline folder (models/weights/pipeline_folder.h), that folder's vae/,
// text_encoder/, text_encoder_2/, tokenizer/, tokenizer_2/; else, when it is a single file, the file itself for each
// part it carries (first_stage_model.: the VAE; conditioner.embedders.0.transformer. / .1.model.: the encoders).
// Headers only.
SdxlSamplingFiles sampling_files(const ModelConfig& model);

struct SdxlSamplerSetup {
  SdxlSamplingFiles files;       // vae is required; the text parts unless stored prompts hold every prompt
  std::string negative_prompt;   // the unconditional prompt of classifier-free guidance ("" as diffusers)
  bool zeros_for_empty_negative = true;  // "" negative -> zero embeddings (force_zeros_for_empty_prompt)
  bool v_prediction = false;     // the UNet predicts v (train.prediction_type v), else ε
  // latents -> latents / scaling + shift before decoding: what the training latents were normalized with.
  vae::LatentNormalization normalization = kVaeNormalization;
  int64_t default_height = 0, default_width = 0;  // pixels when a call gives none (> 0)
  std::string trigger_word;                       // replaces "[trigger]" and "[name]" in prompts
  Device device = Device::cpu();                  // encoders and VAE (bf16 on CUDA, f32 on the CPU)
  bool keep_loaded = false;                       // keep the encoders and the VAE between calls
  std::optional<SamplePrompts> stored_prompts;    // a dataset's /sample_prompts (SDXL's embeddings)
};

class SdxlImageSampler : public LatentImageSampler {
 public:
  // Opens the tokenizers and the encoder and VAE headers (no weight is read): WickError (Config) naming the field
  // left empty, (Data) naming a file that is not what it should be. With stored prompts and any text part left
  // empty, no encoder is opened.
  explicit SdxlImageSampler(SdxlSamplerSetup setup);

  // (generate, from LatentImageSampler: `model` must be an sdxl::Unet with label_emb (SDXL's added conditioning)
  // whose widths fit the encoders and the VAE (Config error otherwise); settings.width / height: pixels, multiples of
  // the VAE's factor times the UNet's size multiple (32 for SDXL); 0 = the setup's default; settings.steps in
  // [1, 1000]. Images are made 4 at a time.)
  // The same from given starting noise f32 [N, C, h, w] (N = prompts, C = the VAE's latent channels; unscaled
  // standard normal, as diffusers' `latents=`): the image size is (h·f, w·f); settings.seed / width / height unused.
  Tensor generate_from_noise(Unet& model, const std::vector<std::string>& prompts, const Tensor& noise,
                             const SampleSettings& settings);

  // The text encoders; null when none were opened (stored prompts only).
  const SdxlTextEncoders* encoders() const { return encoders_ ? &*encoders_ : nullptr; }
  // Whether `prompt` (trigger word put in) would take stored embeddings.
  bool is_stored(const std::string& prompt) const;
  // Whether the negative prompt (trigger word put in) is empty and gets zero embeddings.
  bool zeroes_negative() const;

 private:
  SizeRule size_rule(DiffusionModel& model) const override;
  Tensor sample(DiffusionModel& model, const std::vector<std::string>& prompts, const Tensor& noise,
                const SampleSettings& settings) override;
  bool has_encoders() const override { return encoders_.has_value(); }
  void unload_encoders() override;
  std::string describe_text() const override;
  std::string describe_choices() const override;
  void check_fits(const Unet& model) const;

  SdxlSamplerSetup sdxl_;
  std::optional<SdxlTextEncoders> encoders_;
};

// The sampler for a run (SamplerRequest): sampling_files(config.model); the empty-negative rule from the pipeline
// folder's model_index.json (true without one); ε or v from train.prediction_type; sample.negative_prompt; the
// dataset's latent normalization (SDXL's when the dataset is not of model_family sdxl), its first bucket's size in
// pixels, model.keep_encoders_loaded, and the dataset's /sample_prompts when they are SDXL's embeddings. Config errors
// naming every missing part and the key that gives it (the text encoders and tokenizers are not required when the
// stored prompts, with the zeroed empty negative, hold every prompt of the grid); sample.sampler must be auto or euler.
std::unique_ptr<ImageSampler> make_sdxl_sampler(const SamplerRequest& request);

}  // namespace wick::sdxl
