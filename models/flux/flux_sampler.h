// Flux sample images: prompts -> T5 / CLIP-L (encode_flux_prompts) -> noise at the chosen size -> Euler over
// Black Forest Labs' schedule (get_schedule: linspace(1, 0, n + 1), shifted by the image size for dev,
// unshifted for schnell), with dev's distilled guidance as an input (one forward per step, no CFG) -> the
// Flux VAE decoder -> images in [0, 1]. What `wick train`'s sample grids and `wick sample` run for
// model.arch flux (Architecture::make_sampler).
//
//   FluxSamplingFiles files = sampling_files(config.model);      // the keys, else the pipeline folder's parts
//   FluxImageSampler sampler({.files = files, .default_height = 1024, .default_width = 1024});   // headers only
//   Tensor images = sampler.generate(model, {"a photo of a cat"}, {.steps = 28, .guidance = 3.5, .seed = 7});
//   std::vector<double> s = flux_sigmas(28, 128, 128, true);   // 1 .. 0 for a 1024 x 1024 dev image
//
// A call loads CLIP-L, then T5, each freed after its pass, before the transformer runs; then the VAE for the
// decoding, freed after it. `keep_loaded` keeps all three between calls.
//
// Stored prompts: a dataset made by `wick dataset encode --config` holds the training config's sample prompts
// already encoded (/sample_prompts). Given them (FluxSamplerSetup::stored_prompts), a prompt whose text, the
// trigger word put in (`[trigger]` and `[name]` replaced, the ends trimmed: what `wick dataset encode` stores), is
// byte for byte one of the stored captions takes that row's embeddings (T5 and CLIP-L pooled, f16 in the file)
// instead of the encoders' output; the others are encoded. A sampler with stored prompts needs text encoders only
// for prompts the dataset does not hold.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/data/latent_dataset.h"
#include "models/diffusion/latent_image_sampler.h"
#include "models/flux/flux.h"
#include "models/flux/flux_text.h"
#include "models/image_sampler.h"
#include "models/vae/vae.h"
#include "models/weights/pipeline_folder.h"

namespace wick::flux {

// The latent normalization of the Flux VAE (MODELS.md 1.5): latents = (z - shift) * scale.
inline constexpr vae::LatentNormalization kVaeNormalization = {.scaling_factor = 0.3611, .shift_factor = 0.1159};

// Where a run's Flux VAE, text encoders and tokenizers are ("" = not given and no default).
struct FluxSamplingFiles {
  std::string vae;             // model.vae_path: ae.safetensors, a diffusers vae/ folder or a pipeline folder
  std::string clip_l;          // model.clip_l_path: a file, an index or a text_encoder/ folder
  std::string t5;              // model.t5_path: a file, an index or a text_encoder_2/ folder
  std::string clip_tokenizer;  // model.clip_tokenizer_path: a tokenizer/ folder or bpe_simple_vocab_16e6.txt.gz
  std::string t5_tokenizer;    // model.t5_tokenizer_path: spiece.model or a folder holding it
  std::string pipeline;        // the diffusers pipeline folder the defaults came from ("" when none)
};

// models/weights/pipeline_folder.h: the diffusers pipeline folder a path is or lies in.
using ::wick::pipeline_folder;

// Each file the model keys name (vae_path, clip_l_path, t5_path, clip_tokenizer_path, t5_tokenizer_path),
// else the pipeline folder's part when model.name_or_path gives one and it is there: vae/ (else
// ae.safetensors), text_encoder/, text_encoder_2/, tokenizer/, tokenizer_2/. Nothing is opened.
FluxSamplingFiles sampling_files(const ModelConfig& model);

// BFL's get_schedule for an image of latent_height x latent_width (unpacked latent pixels; (h / 2)·(w / 2)
// tokens): the steps + 1 values of linspace(1, 0, steps + 1), each σ -> e^μ / (e^μ + 1/σ − 1) with μ linear
// from 0.5 at 256 tokens to 1.15 at 4096 when `shift` (dev), unchanged otherwise (schnell); the last is 0.
std::vector<double> flux_sigmas(int64_t steps, int64_t latent_height, int64_t latent_width, bool shift);

struct FluxSamplerSetup {
  FluxSamplingFiles files;  // vae, clip_l, t5, clip_tokenizer and t5_tokenizer are required
  int64_t t5_length = 0;    // T5 tokens; 0: 512 for dev, 256 for schnell (BFL, diffusers, kohya)
  // latents -> latents / scaling + shift before decoding: what the training latents were normalized with.
  vae::LatentNormalization normalization = kVaeNormalization;
  int64_t default_height = 0, default_width = 0;  // pixels when a call gives none (> 0)
  std::string trigger_word;                       // replaces "[trigger]" and "[name]" in prompts
  Device device = Device::cpu();                  // encoders and VAE (bf16 on CUDA, f32 on the CPU)
  bool keep_loaded = false;                       // keep the encoders and the VAE between calls
  // Prompts encoded ahead of time (a dataset's /sample_prompts, made with the same T5 length): a prompt whose
  // text (prompt_text) equals one of the captions uses that row. With them, the text encoders are opened only
  // when clip_l, t5, clip_tokenizer and t5_tokenizer are all given; without them those four are required.
  std::optional<SamplePrompts> stored_prompts;
};


class FluxImageSampler : public LatentImageSampler {
 public:
  // Opens the tokenizers and the encoder and VAE headers (no weight is read): WickError (Config) naming the
  // FluxSamplingFiles field left empty, (Data) naming a file that is not what it should be. With stored prompts
  // and any text part left empty, no encoder is opened.
  explicit FluxImageSampler(FluxSamplerSetup setup);

  // (generate, from LatentImageSampler: `model` must be a FluxTransformer whose widths fit the encoders and the VAE
  // (Config error otherwise); settings.width / height: pixels, multiples of 2·f (16 for the real VAE); 0 = the
  // setup's default; settings.guidance is dev's guidance input (schnell has none). Images are made 4 at a time.)
  // A prompt that is not stored (or stored with another T5 length than t5_length_for(model)) without text encoders
  // is a Config error naming the prompt and the parts that are missing.
  // The same from given starting noise f32 [N, C, h, w] (N = prompts, C = the VAE's latent channels, h and w
  // even): the image size is (h·f, w·f) and settings.seed / width / height are not used.
  Tensor generate_from_noise(FluxTransformer& model, const std::vector<std::string>& prompts, const Tensor& noise,
                             const SampleSettings& settings);

  // The text encoders; null when none were opened (stored prompts only).
  const FluxTextEncoders* encoders() const { return encoders_ ? &*encoders_ : nullptr; }
  // Whether `prompt` (trigger word put in) would take stored embeddings for a model using `t5_length` tokens.
  bool is_stored(const std::string& prompt, int64_t t5_length) const;
  // The T5 length used for `model`: the setup's, else the variant's.
  int64_t t5_length_for(const FluxTransformer& model) const;

 private:
  SizeRule size_rule(DiffusionModel& model) const override;
  Tensor sample(DiffusionModel& model, const std::vector<std::string>& prompts, const Tensor& noise,
                const SampleSettings& settings) override;
  bool has_encoders() const override { return encoders_.has_value(); }
  void unload_encoders() override;
  std::string describe_text() const override;
  std::string describe_choices() const override { return ""; }
  void check_fits(const FluxTransformer& model) const;

  FluxSamplerSetup flux_;
  std::optional<FluxTextEncoders> encoders_;
};

// The sampler for a run (SamplerRequest): sampling_files(config.model), model.t5_length (else the dataset's
// recorded T5 length, else the variant's), the dataset's latent normalization (Flux's when the dataset is
// not of model_family flux), its first bucket's size in pixels, model.keep_encoders_loaded, and the dataset's
// /sample_prompts when its embeddings are T5's and CLIP-L's at the sampler's T5 length. Config errors
// naming every missing part and the key that gives it (the text encoders and tokenizers are not required when
// the stored prompts hold every prompt of the grid: sample.prompts, trigger word put in); the encoders' and
// VAE's widths checked against the dataset's text, pooled and latent widths; a model.t5_length that differs
// from the dataset's recorded one.
std::unique_ptr<ImageSampler> make_flux_sampler(const SamplerRequest& request);

}  // namespace wick::flux
