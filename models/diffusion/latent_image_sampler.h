// What every architecture's sampler shares (Architecture::make_sampler, models/image_sampler.h): the VAE (its
// header read at set-up, loaded for the decoding, kept or freed), the prompts a dataset stored (/sample_prompts) used
// in place of the text encoders, the image size and the starting noise, and the messages when a part is missing.
// An architecture keeps only its schedule loop and guidance (generate_from_noise) and its text encoders.
//
//   class FluxImageSampler : public LatentImageSampler {          // models/flux/flux_sampler.h
//     SizeRule size_rule(DiffusionModel& model) const override;   // "Flux images must be multiples of 16 pixels"
//     Tensor sample(DiffusionModel& model, ...) override;         // embed(...), the Euler loop, decode(...)
//   };
//   Tensor images = sampler.generate(model, {"a photo of a cat"}, {.steps = 28, .seed = 7});   // [1, 3, H, W]
//
// For a run (make_sampler): resolve_sampler_files reads the `model:` keys (else the pipeline folder's parts, else a
// single file's), stored_prompts_for takes the dataset's /sample_prompts when they fit, and check_sampler_parts
// refuses a run that cannot make its images (exit status 2) before its first step.
//
// Video will reuse it: frames out instead of one image.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/data/latent_dataset.h"
#include "models/image_sampler.h"
#include "models/text/prompt_embeddings.h"
#include "models/text/stored_prompts.h"
#include "models/vae/image_vae.h"
#include "models/vae/vae.h"
#include "models/vae/vae_weights.h"

namespace wick {

// One file a sampler reads, named by its `model:` key.
struct SamplerFile {
  std::string label;  // "CLIP-L", "the T5 tokenizer"
  std::string key;    // "clip_l_path": the config key (model.<key>)
  std::string hint;   // "clip_l.safetensors or a text_encoder/ folder": what to give, for the refusal of a run
  std::vector<std::string> pipeline_parts = {};  // its place in a diffusers pipeline folder, first that exists
  std::string single_file_prefix = {};  // a single checkpoint file given as name_or_path holds it under this prefix
  bool required = true;  // false: may stay empty (bigG's own tokenizer)
};

// Paths of `files` (by key): each key's value, else the first of its pipeline_parts in the diffusers pipeline folder
// model.name_or_path lies in, else model.name_or_path itself when it is a file holding single_file_prefix. "" where
// none gives it. Reads headers only. `pipeline`: the folder the defaults came from ("" when none).
std::map<std::string, std::string> resolve_sampler_files(const ModelConfig& model,
                                                         const std::vector<SamplerFile>& files,
                                                         std::string* pipeline = nullptr);

// The texts of a run's sample grid: sample.prompts, then the dataset's class names when sample.n_per_class > 0, then
// `negative` when given (a guided architecture's negative prompt).
std::vector<std::string> grid_texts(const SamplerRequest& request, const std::optional<std::string>& negative);

// The dataset's /sample_prompts when `fits` (the architecture's check of how they were encoded) and they hold any.
std::optional<SamplePrompts> stored_prompts_for(const LatentDataset& dataset, bool fits);

// The refusal of a run whose sampler cannot make images (WickError Config), then a check that each given path exists:
// "<model> sample images need <the missing parts>, and they are not given (<where_all>)<why the stored prompts do not
// do>". The text parts are not needed when the stored prompts hold every text of the grid.
struct SamplerPartsCheck {
  std::string model;  // "Flux"
  SamplerFile vae;
  std::string vae_path;
  std::vector<std::pair<SamplerFile, std::string>> text;  // each text part with its path
  std::string where_all;  // "a diffusers pipeline folder as model.name_or_path, such as FLUX.1-dev/, gives all five"
  const std::optional<SamplePrompts>* stored = nullptr;
  std::vector<std::string> not_stored;  // grid texts the stored prompts lack (text::texts_not_stored)
  std::string dataset_path;
  std::string stored_rule;  // "sample.prompts with the trigger word put in must equal them byte for byte ..."
};
void check_sampler_parts(const SamplerPartsCheck& check);

// The VAE's sizes from its header; errors name model.vae_path and the file.
vae::VaeConfig sampler_vae_config(const std::string& vae_path);

// What a run's sampler takes from its dataset: the latent normalization the model learned (the dataset's factors when
// it is of model_family `model`, else `preset`), the default image size (its first bucket's, in pixels). Data error for
// a dataset without buckets; Config error when its latents are not `sizes.z_channels` wide (naming model.vae_path).
struct SamplerDataset {
  vae::LatentNormalization normalization;
  int64_t default_height = 0, default_width = 0;
};
SamplerDataset sampler_dataset(const LatentDataset& dataset, const std::string& model, vae::LatentNormalization preset,
                               const vae::VaeConfig& sizes, const std::string& vae_path);
// The same for a VAE behind vae::ImageVae (its z channels and downscale); a dataset normalized per channel must have
// the VAE's own lists (Config error otherwise), and is refused (Data) by a VAE without per-channel lists.
SamplerDataset sampler_dataset(const LatentDataset& dataset, const std::string& model, vae::LatentNormalization preset,
                               const vae::ImageVaeInfo& sizes, const std::string& vae_path);

// `make` (a sampler's constructor), its errors prefixed with "<model> text encoders (model.<key> <path>, ...): ".
template <typename Sampler, typename Make>
std::unique_ptr<Sampler> make_naming_text_parts(const std::string& model,
                                                const std::vector<std::pair<SamplerFile, std::string>>& text,
                                                const Make& make) {
  try {
    return make();
  } catch (const WickError& error) {
    std::string parts;
    for (const auto& [file, path] : text)
      if (file.required) parts += (parts.empty() ? "" : ", ") + ("model." + file.key + " " + path);
    throw WickError(error.kind(), model + " text encoders (" + parts + "): " + message_of(error));
  }
}

// ("<label> (model.<key>)", path) of each required text part: LatentSamplerSetup::text_parts.
std::vector<std::pair<std::string, std::string>> text_part_labels(
    const std::vector<std::pair<SamplerFile, std::string>>& text);

// Whether the text encoders are optional: stored prompts hold every text of the grid.
bool text_optional(const std::optional<SamplePrompts>& stored, const std::vector<std::string>& not_stored);

// The common set-up of a latent-image sampler.
struct LatentSamplerSetup {
  std::string model;                 // "Flux": in messages ("the Flux sampler needs a Flux model")
  std::string vae;                   // the VAE's file or folder
  vae::ModelNormalization vae_model;  // the architecture's normalization, for VAE files without config.json
  vae::LatentNormalization normalization;  // what the training latents were normalized with (undone before decoding)
  int64_t default_height = 0, default_width = 0;  // pixels when a call gives none (> 0)
  std::string trigger_word;                       // replaces "[trigger]" and "[name]" in prompts
  Device device = Device::cpu();                  // encoders and VAE (bf16 on CUDA, f32 on the CPU)
  bool keep_loaded = false;                       // keep the encoders and the VAE between calls
  std::optional<SamplePrompts> stored_prompts;    // prompts encoded ahead of time (a dataset's /sample_prompts)
  std::vector<std::pair<std::string, std::string>> text_parts;  // (label (model.key), path) of the text encoders
  vae::OpenImageVae open_vae = &vae::open_kl_image_vae;  // the architecture's VAE (an AutoencoderKL by default)
};

// The common set-up from an architecture's own: `arch` has the fields files.vae, normalization, default_height,
// default_width, trigger_word, device, keep_loaded and stored_prompts (FluxSamplerSetup and the like).
template <typename ArchSetup>
LatentSamplerSetup latent_setup_of(const ArchSetup& arch, const std::string& model, vae::ModelNormalization vae_model,
                                   const std::vector<std::pair<SamplerFile, std::string>>& text) {
  return {.model = model,
          .vae = arch.files.vae,
          .vae_model = std::move(vae_model),
          .normalization = arch.normalization,
          .default_height = arch.default_height,
          .default_width = arch.default_width,
          .trigger_word = arch.trigger_word,
          .device = arch.device,
          .keep_loaded = arch.keep_loaded,
          .stored_prompts = arch.stored_prompts,
          .text_parts = text_part_labels(text)};
}

class LatentImageSampler : public ImageSampler {
 public:
  // prompts -> images f32 [N, C, H, W] in [0, 1]: the size settings.width x height (else the setup's default), checked
  // against size_rule; the noise of image i from derive_stream(seed, i, 0, Noise) on the model's device; then sample.
  Tensor generate(DiffusionModel& model, const std::vector<std::string>& prompts,
                  const SampleSettings& settings) override;
  // "<model>: VAE <file><describe_text()><describe_choices()>; the embeddings of the K sample prompts stored in the
  // dataset[, no text encoders (other prompts need ...)]".
  std::string describe() const override;

  // The VAE's sizes (z channels, downscale) from its headers.
  const vae::ImageVaeInfo& vae_sizes() const { return vae_->info(); }
  // Frees the kept VAE and the kept encoders.
  void unload();

 protected:
  // Opens the VAE (setup.open_vae: headers only) and indexes the stored prompts (Config errors name setup.model).
  explicit LatentImageSampler(LatentSamplerSetup setup);

  // ---- the architecture's part ----
  // Image sides must be multiples of the VAE's downscale times `latent_multiple`; `why` ends the refusal's "(the VAE's
  // 8 x <why>)".
  struct SizeRule {
    int64_t latent_multiple = 1;
    std::string why;
  };
  // `model` as this architecture's (a Config error naming it otherwise), and its size rule.
  virtual SizeRule size_rule(DiffusionModel& model) const = 0;
  // The images of `prompts` from `noise` f32 [N, C, h, w] (the model checked by size_rule).
  virtual Tensor sample(DiffusionModel& model, const std::vector<std::string>& prompts, const Tensor& noise,
                        const SampleSettings& settings) = 0;
  virtual bool has_encoders() const = 0;
  virtual void unload_encoders() = 0;
  virtual std::string describe_text() const = 0;     // ", CLIP-L <file>, T5 <file>" (when open) and text choices
  virtual std::string describe_choices() const = 0;  // the rest: ", shift 3, negative prompt \"\""

  // ---- what sample() uses ----
  // The rows of `texts` (trigger word put in): the stored row where `usable(stored_length)` and the stored prompts
  // hold the text, else `encode`d (each distinct text once): context [N, L, D], pooled [N, P] and mask [N, L] (1 on
  // tokens) f32 on the CPU. A text to encode without encoders is a Config error naming it ("the negative prompt" when
  // it is `negative`), the stored captions, `length_note` and the missing parts.
  text::PromptRows embed(const std::vector<std::string>& texts, const std::function<bool(int64_t)>& usable,
                         const std::function<text::PromptEmbeddings(const std::vector<std::string>&)>& encode,
                         const std::optional<std::string>& negative = std::nullopt, const std::string& length_note = "");
  // Whether the stored prompts hold `prompt` (trigger word put in).
  bool holds(const std::string& prompt) const;
  // latents f32 [N, C, h, w] -> images in [0, 1] through the VAE (loaded now, kept when keep_loaded): the setup's
  // normalization undone (vae::ImageVae::decode_to_images).
  Tensor decode(const Tensor& latents);
  // "CLIP-L (model.clip_l_path), ...": the text parts not given.
  std::string missing_text_parts() const;
  // Config errors when the stored prompts are not `context_dim` wide (`context_what`: "text (txt_in)") or their pooled
  // vectors not `pooled_dim` (`pooled_what`).
  void check_stored_widths(int64_t context_dim, const std::string& context_what, int64_t pooled_dim,
                           const std::string& pooled_what) const;
  // The prompts with the trigger word put in.
  std::vector<std::string> texts_of(const std::vector<std::string>& prompts) const;
  const LatentSamplerSetup& setup() const { return setup_; }
  const std::optional<SamplePrompts>& stored() const { return setup_.stored_prompts; }

 private:
  LatentSamplerSetup setup_;
  std::map<std::string, int64_t> stored_row_;  // stored caption -> its first row
  std::unique_ptr<vae::ImageVae> vae_;         // its weights loaded while kept
};

// Images per denoiser call (twice as many rows with classifier-free guidance).
inline constexpr int64_t kSampleBatch = 4;

// The device a module's parameters are on (the CPU for none).
Device device_of(const Module& model);

}  // namespace wick
