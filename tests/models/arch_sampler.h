// The sampler tests' row of an architecture (arch_sampler_test.cpp holds the table and the tests every row runs;
// <arch>_sampler_test.cpp what only that architecture has). A row says where its tiny parts and its diffusers
// pipeline fixture are, how to make its LatentImageSampler from SamplerOptions, and what differs in its numbers.
//
//   const SamplerArch& sd3 = sampler_arch("sd3");
//   std::shared_ptr<DiffusionModel> model = sd3.load(data_path(sd3.model));      // through the registry
//   auto sampler = sd3.make({.files = sd3.tiny_files, .t5_length = 16, .default_height = 16, .default_width = 24});
//   Tensor images = sampler->generate(*model, {"a red cube"}, {.steps = 2, .guidance = sd3.guidance, .seed = 5});
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
#include "models/architecture.h"
#include "models/diffusion/latent_image_sampler.h"
#include "models/text/prompt_embeddings.h"
#include "runtime/tensor.h"

namespace wick::testing {

// A sampler's files by their `model:` key ("vae_path", "clip_l_path", ...); a key left out is not given.
using SamplerFiles = std::map<std::string, std::string>;

// What a test asks of a sampler; each row turns it into its architecture's setup (the fields another architecture
// has no use for are ignored).
struct SamplerOptions {
  SamplerFiles files;
  int64_t t5_length = 0;                // T5 tokens; 0: the architecture's default (Flux: the variant's; SD3 256)
  std::string negative_prompt;          // SD3, SDXL
  bool zeros_for_empty_negative = true;  // SDXL: "" -> zero embeddings (force_zeros_for_empty_prompt)
  bool v_prediction = false;            // SDXL
  bool unprojected_clip_l = false;      // SD3: CLIP-L's pooled vector without text_projection (SAI, ComfyUI)
  int64_t default_height = 0, default_width = 0;
  std::string trigger_word;
  std::optional<SamplePrompts> stored_prompts;
};

// One run of the diffusers pipeline fixture (<fixture>/case.safetensors: "<name>.images" from its "noise").
struct PipelineRun {
  std::string name;   // "dev", "cfg"
  std::string model;  // the model folder under tests/data
  int64_t steps = 0;
  double guidance = 0;
  std::string negative_prompt;
  bool zeros_for_empty_negative = true;
  bool v_prediction = false;
};

// A part of a diffusers pipeline folder made for the test: a link to `sources[0]` (a file or a folder), or, when
// `copy`, a folder holding copies of the sources.
struct PipelinePart {
  std::string key;     // the `model:` key it is the default of; "" for a folder no key reads
  std::string folder;  // "text_encoder"
  std::vector<std::string> sources;
  bool copy = false;
};

// Two images of the fixture that must differ by more than `at_least` (the fixture is sensitive to what is tested).
struct DistinctImages {
  std::string a, b;
  double at_least = 0;
};

// An error the sampler or its construction must give, and what its message holds.
struct SamplerError {
  std::string what;  // for the trace
  SampleSettings settings;
  std::vector<std::string> message;
};

struct SamplerArch {
  std::string name;     // the registry's name: "flux"
  std::string fixture;  // the pipeline fixture's folder under tests/data: "flux_sample"
  std::string model;    // the tiny model the calls use, under tests/data: "flux_sample/transformer"
  SamplerFiles tiny_files;  // the committed tiny VAE, encoders and tokenizers, as files one by one
  double guidance = 0;      // the guidance of the calls
  int64_t t5_length = 0;    // the T5 length of the calls (0 where there is no T5)
  // The size of the calls without one (width, height; the determinism test transposes it).
  std::pair<int64_t, int64_t> call_size = {24, 16};

  // The pipeline fixture: its runs, the metric (max |difference| relative to the largest pixel, else absolute),
  // the tolerance, the line printed per run ("<pipeline_line>, dev (6 steps[, guidance 3.5], 2 images 40 x 24):
  // [max abs ]9.54e-07") and the pairs of its images that must differ.
  std::vector<PipelineRun> pipeline_runs;
  bool absolute_metric = false;
  double pipeline_tolerance = 0;
  std::string pipeline_line;
  bool line_has_guidance = false;
  std::vector<DistinctImages> distinct_images;

  // A diffusers pipeline folder of the tiny parts: its name, its model part ("transformer"), the other parts,
  // model_index.json, and the keys whose values replace two of the parts' defaults.
  std::string pipeline_name;
  std::string model_part;
  std::vector<PipelinePart> pipeline_parts;
  std::string model_index;
  SamplerFiles overrides;
  std::string bare_model_file;  // a model file outside any pipeline folder and holding no other part

  // Calls: the size another call asks for (width, height), the stored prompts of the stored-prompts test, what
  // generates from them, the bound on and the line printing their f16 rounding (none when empty).
  std::pair<int64_t, int64_t> other_size;
  std::vector<std::string> stored_captions;
  std::vector<std::string> stored_generated;
  int64_t stored_steps = 0;
  double stored_rounding_bound = 1e-3;  // the images' largest difference (relative) from the rows' f16 rounding
  std::function<void(double difference, double largest)> print_stored_rounding;

  // Errors: a size that does not fit, steps 0, a model whose widths do not fit the tiny parts, each part whose
  // absence is named (key -> message).
  SamplerError size_error;
  std::string steps_error;
  std::string other_model;  // under tests/data, or an absolute path (a model the row writes)
  SamplerError other_model_error;
  std::vector<std::pair<std::string, std::string>> required_parts;

  // ---- the architecture's calls ----
  std::function<std::unique_ptr<LatentImageSampler>(const SamplerOptions&)> make;
  // The pipeline's images from given noise (LatentImageSampler subclasses' generate_from_noise).
  std::function<Tensor(LatentImageSampler&, DiffusionModel&, const std::vector<std::string>&, const Tensor&,
                       const SampleSettings&)>
      from_noise;
  // sampling_files(model): the pipeline folder ("" when none) and the files by key.
  std::function<std::pair<std::string, SamplerFiles>(const ModelConfig&)> sampling_files;
  // The sampler's own encoders' embeddings of `captions` at 16 T5 tokens (what a dataset stores).
  std::function<text::PromptEmbeddings(const LatentImageSampler&, const std::vector<std::string>&)> encode;
  std::function<bool(const LatentImageSampler&)> has_encoders;
  std::function<bool(const LatentImageSampler&, const std::string& prompt)> is_stored;
  // The fixture's model checks (widths of the tiny model the pipeline ran).
  std::function<void(DiffusionModel&, const PipelineRun&)> check_pipeline_model;

  // The model at `path` in f32, built by the registry with the architecture's default `model:` keys.
  std::shared_ptr<DiffusionModel> load(const std::string& path) const;
  ModelConfig model_config(const std::string& path) const;
};

// The row of a registered architecture.
const SamplerArch& sampler_arch(const std::string& name);

// `e` as a dataset keeps it: context and pooled rounded to `dtype` and back to f32, the mask u8.
SamplePrompts stored_prompts(const std::vector<std::string>& captions, const text::PromptEmbeddings& e, DType dtype);

}  // namespace wick::testing
