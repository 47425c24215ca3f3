// Prompt encoding for a model named at run time: Flux, SD3 or SDXL (models/flux/flux_text.h,
// models/sd3/sd3_text.h, models/sdxl/sdxl_text.h) behind one call, for `wick encode-prompt` and
// `wick dataset encode`.
//
//   text::ModelPromptEncoder encoder({.model = "flux", .pipeline = "FLUX.1-dev", .loading = {.device = Device::cuda()}});
//   text::PromptEmbeddings e = encoder.encode({"a photo of a cat"});   // the model's defaults: Flux T5 512
//   encoder.unload();                                                   // frees encoders kept by keep_loaded
//
// Only the files' headers are read when it is made (a missing or wrong file fails there, before any work);
// the encoders load when encode() needs them, as text::EncoderLoading says.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/text/prompt_embeddings.h"
#include "models/text/text_encoder_slot.h"

namespace wick::text {

struct ModelPromptOptions {
  std::string model;         // "flux", "sd3" or "sdxl"
  std::string pipeline;      // a diffusers pipeline folder; "" to take `files`
  TextEncoderFiles files;    // the encoders and tokenizers one by one (ComfyUI's layout)
  EncoderLoading loading;
  int64_t t5_length = 0;     // 0: the model's default (Flux 512, SD3 256); SDXL has no T5 (must stay 0)
  std::string clip_l_pooled = "projected";  // SD3: "projected" (diffusers, kohya) or "unprojected" (SAI, ComfyUI)
  bool zeros_for_empty_prompt = false;      // SDXL: "" prompts get zero embeddings
  int64_t batch_size = 8;                   // prompts per encoder call
};

// "flux", "sd3", "sdxl".
const std::vector<std::string>& prompt_model_names();
// The T5 length a model uses when ModelPromptOptions::t5_length is 0 (Flux 512, SD3 256, SDXL 0).
int64_t default_t5_length(const std::string& model);

class ModelPromptEncoder {
 public:
  // Opens the tokenizers and the encoders' headers. WickError (Config): an unknown model (listing the
  // known ones), neither a pipeline nor files, an option of another model (t5_length for SDXL,
  // zeros_for_empty_prompt for Flux or SD3, a bad clip_l_pooled); (Data): the per-model loaders' checks.
  explicit ModelPromptEncoder(const ModelPromptOptions& options);

  // The model's encode_*_prompts on `prompts` (N >= 1).
  PromptEmbeddings encode(const std::vector<std::string>& prompts) const;
  // Frees every encoder kept loaded (loading.keep_loaded).
  void unload() const;
  const ModelPromptOptions& options() const;

 private:
  struct Held;
  std::shared_ptr<Held> held_;
};

}  // namespace wick::text
