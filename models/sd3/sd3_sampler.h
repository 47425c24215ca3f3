// SD3 / SD3.5 sample images, as diffusers' StableDiffusion3Pipeline makes them: prompts and the negative prompt ->
// CLIP-L, bigG and T5 (encode_sd3_prompts) -> noise at the chosen size -> Euler over FlowMatchEulerDiscreteScheduler's
// schedule with SD3's shift (sd3_sigmas) and classifier-free guidance (uncond + g·(cond − uncond), one forward of
// batch 2B per step) -> latents / scaling + shift -> the SD3 VAE decoder -> images in [0, 1]. What `wick train`'s
// sample grids and `wick sample` run for model.arch sd3 (Architecture::make_sampler).
//
//   Sd3SamplingFiles files = sampling_files(config.model);      // the keys, else the pipeline folder's / file's parts
//   Sd3ImageSampler sampler({.files = files, .default_height = 1024, .default_width = 1024});   // headers only
//   Tensor images = sampler.generate(model, {"a photo of a cat"}, {.steps = 28, .guidance = 4.5, .seed = 7});
//   std::vector<double> s = sd3_sigmas(28, 3.0);   // 1 .. 0: diffusers' and SAI's schedule for SD3.5
//
// Guidance g != 1 runs the model on the prompt and on the negative prompt (SD3Setup::negative_prompt, "" by default,
// encoded like any prompt: diffusers and SAI); g == 1 runs the prompt only. diffusers skips the negative prompt for
// every g <= 1; SAI's sd3_infer.py always mixes; both agree with this for g >= 1.
//
// A call loads CLIP-L, bigG, then T5, each freed after its pass, before the MMDiT runs; then the VAE, freed after the
// decoding. `keep_loaded` keeps all four between calls.
//
// Stored prompts: a dataset made by `wick dataset encode --model sd3 --config` holds the training config's sample
// prompts and its negative prompt already encoded (/sample_prompts). A prompt whose text (trigger word put in, ends
// trimmed) is byte for byte one of the stored captions takes that row; the others are encoded. With stored prompts
// the text encoders are needed only for prompts the dataset does not hold.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/data/latent_dataset.h"
#include "models/diffusion/latent_image_sampler.h"
#include "models/image_sampler.h"
#include "models/sd3/sd3.h"
#include "models/sd3/sd3_text.h"
#include "models/vae/vae.h"

namespace wick::sd3 {

// The latent normalization of the SD3 VAE (MODELS.md 1.5): latents = (z - shift) * scale.
inline constexpr vae::LatentNormalization kVaeNormalization = {.scaling_factor = 1.5305, .shift_factor = 0.0609};

// Where a run's SD3 VAE, text encoders and tokenizers are ("" = not given and no default).
struct Sd3SamplingFiles {
  std::string vae;               // model.vae_path: a diffusers vae/ folder, a VAE file, or an SD3.5 single file
  std::string clip_l;            // model.clip_l_path: a file, an index or a text_encoder/ folder
  std::string clip_g;            // model.clip_g_path: a file, an index or a text_encoder_2/ folder
  std::string t5;                // model.t5_path: a file, an index or a text_encoder_3/ folder
  std::string clip_tokenizer;    // model.clip_tokenizer_path: a tokenizer/ folder or bpe_simple_vocab_16e6.txt.gz
  std::string clip_g_tokenizer;  // model.clip_g_tokenizer_path: a tokenizer_2/ folder; "" = clip_tokenizer, pad "!"
  std::string t5_tokenizer;      // model.t5_tokenizer_path: spiece.model or a tokenizer_3/ folder
  std::string pipeline;          // the diffusers pipeline folder the defaults came from ("" when none)
};

// Each file the model keys name (vae_path, clip_l_path, clip_g_path, t5_path, clip_tokenizer_path,
// clip_g_tokenizer_path, t5_tokenizer_path), else, when model.name_or_path lies in a diffusers pipeline folder
// (models/weights/pipeline_folder.h), that folder's vae/, text_encoder/, text_encoder_2/, text_encoder_3/, tokenizer/,
// tokenizer_2/, tokenizer_3/; else, when it is a single file, the file itself for each part it carries
// (first_stage_model.: the VAE; text_encoders.clip_l / clip_g / t5xxl.transformer.: the encoders). Headers only.
Sd3SamplingFiles sampling_files(const ModelConfig& model);

// FlowMatchEulerDiscreteScheduler(shift).set_timesteps(steps) as SD3 pipelines run it (and SAI's get_sigmas): t_k =
// linspace(1, σ_min, steps) with σ_min = shift(1/1000), each σ_k = shift(t_k) with shift(t) = s·t / (1 + (s − 1)·t),
// then 0: steps + 1 values. (Not linspace(1, 0, steps + 1) shifted: the last σ before 0 is shift(shift(1/1000)).)
std::vector<double> sd3_sigmas(int64_t steps, double shift);

struct Sd3SamplerSetup {
  Sd3SamplingFiles files;  // vae is required; the text parts unless stored prompts hold every prompt
  int64_t t5_length = 256;  // T5 tokens (diffusers' max_sequence_length)
  ClipLPooled clip_l_pooled = ClipLPooled::Projected;  // what the training embeddings used (sd3_text.h)
  double shift = 3.0;       // the schedule's shift (SD3.5's scheduler_config.json, SAI's SHIFT)
  std::string negative_prompt;  // the unconditional prompt of classifier-free guidance ("" as diffusers)
  // latents -> latents / scaling + shift before decoding: what the training latents were normalized with.
  vae::LatentNormalization normalization = kVaeNormalization;
  int64_t default_height = 0, default_width = 0;  // pixels when a call gives none (> 0)
  std::string trigger_word;                       // replaces "[trigger]" and "[name]" in prompts
  Device device = Device::cpu();                  // encoders and VAE (bf16 on CUDA, f32 on the CPU)
  bool keep_loaded = false;                       // keep the encoders and the VAE between calls
  // Prompts encoded ahead of time (a dataset's /sample_prompts, made with the same T5 length and pooling).
  std::optional<SamplePrompts> stored_prompts;
};

class Sd3ImageSampler : public LatentImageSampler {
 public:
  // Opens the tokenizers and the encoder and VAE headers (no weight is read): WickError (Config) naming the field
  // left empty, (Data) naming a file that is not what it should be. With stored prompts and any text part left
  // empty, no encoder is opened.
  explicit Sd3ImageSampler(Sd3SamplerSetup setup);

  // (generate, from LatentImageSampler: `model` must be an sd3::MMDiT whose widths fit the encoders and the VAE
  // (Config error otherwise); settings.width / height: pixels, multiples of 2·f (16 for the real VAE), within the
  // model's position table; 0 = the setup's default; settings.guidance: the classifier-free scale. Images are made 4
  // at a time. A prompt (or the negative prompt) that is not stored, without text encoders, is a Config error naming
  // it and the parts that are missing.)
  // The same from given starting noise f32 [N, C, h, w] (N = prompts, C = the VAE's latent channels, h and w even):
  // the image size is (h·f, w·f) and settings.seed / width / height are not used.
  Tensor generate_from_noise(MMDiT& model, const std::vector<std::string>& prompts, const Tensor& noise,
                             const SampleSettings& settings);

  // The text encoders; null when none were opened (stored prompts only).
  const Sd3TextEncoders* encoders() const { return encoders_ ? &*encoders_ : nullptr; }
  // Whether `prompt` (trigger word put in) would take stored embeddings.
  bool is_stored(const std::string& prompt) const;

 private:
  SizeRule size_rule(DiffusionModel& model) const override;
  Tensor sample(DiffusionModel& model, const std::vector<std::string>& prompts, const Tensor& noise,
                const SampleSettings& settings) override;
  bool has_encoders() const override { return encoders_.has_value(); }
  void unload_encoders() override;
  std::string describe_text() const override;
  std::string describe_choices() const override;
  void check_fits(const MMDiT& model) const;
  bool usable(int64_t stored_length) const;  // stored rows as long as encoded ones (any without encoders)

  Sd3SamplerSetup sd3_;
  std::optional<Sd3TextEncoders> encoders_;
};

// The sampler for a run (SamplerRequest): sampling_files(config.model); model.t5_length, else the dataset's recorded T5
// length, else 256; CLIP-L's pooled vector projected or not as the dataset's text_pooled_encoder says; the shift
// model.sample_shift, else the pipeline's scheduler/scheduler_config.json, else 3.0; sample.negative_prompt; the
// dataset's latent normalization (SD3's when the dataset is not of model_family sd3), its first bucket's size in
// pixels, model.keep_encoders_loaded, and the dataset's /sample_prompts when they are SD3's embeddings. Config errors
// naming every missing part and the key that gives it (the text encoders and tokenizers are not required when the
// stored prompts hold every prompt of the grid and, when sample.guidance != 1, the negative prompt); the VAE's and
// encoders' widths checked against the dataset's.
std::unique_ptr<ImageSampler> make_sd3_sampler(const SamplerRequest& request);

}  // namespace wick::sd3
