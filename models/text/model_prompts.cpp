#include "models/text/model_prompts.h"

#include <optional>

#include "models/flux/flux_text.h"
#include "models/sd3/sd3_text.h"
#include "models/sdxl/sdxl_text.h"
#include "runtime/error.h"

namespace wick::text {

struct ModelPromptEncoder::Held {
  ModelPromptOptions options;
  std::optional<flux::FluxTextEncoders> flux;
  std::optional<sd3::Sd3TextEncoders> sd3;
  std::optional<sdxl::SdxlTextEncoders> sdxl;
  sd3::ClipLPooled clip_l_pooled = sd3::ClipLPooled::Projected;
};

const std::vector<std::string>& prompt_model_names() {
  static const std::vector<std::string> names = {"flux", "sd3", "sdxl"};
  return names;
}

int64_t default_t5_length(const std::string& model) {
  if (model == "flux") return 512;
  if (model == "sd3") return 256;
  return 0;
}

ModelPromptEncoder::ModelPromptEncoder(const ModelPromptOptions& options) : held_(std::make_shared<Held>()) {
  Held& h = *held_;
  h.options = options;
  const std::string& model = options.model;
  WICK_CHECK_KIND(Config, model == "flux" || model == "sd3" || model == "sdxl", "text encoders: unknown model '",
                  model, "' (known: flux, sd3, sdxl)");
  const bool folder = !options.pipeline.empty();
  WICK_CHECK_KIND(Config, folder || !options.files.clip_l.empty(),
                  "text encoders: give a diffusers pipeline folder (--path) or the encoder files (--clip-l, "
                  "--clip-g, --t5 with --clip-vocab, --t5-tokenizer)");
  if (model != "sdxl")
    WICK_CHECK_KIND(Config, !options.zeros_for_empty_prompt, "text encoders: zeros_for_empty_prompt "
                    "(--zeros-for-empty-prompt) is SDXL's");
  if (model == "sdxl") {
    WICK_CHECK_KIND(Config, options.t5_length == 0, "text encoders: sdxl has no T5 (--t5-length)");
    h.sdxl = folder ? sdxl::SdxlTextEncoders::from_pipeline(options.pipeline, options.loading)
                    : sdxl::SdxlTextEncoders::from_files(options.files, options.loading);
    return;
  }
  if (h.options.t5_length == 0) h.options.t5_length = default_t5_length(model);
  if (model == "sd3") {
    h.clip_l_pooled = sd3::parse_clip_l_pooled(options.clip_l_pooled);
    h.sd3 = folder ? sd3::Sd3TextEncoders::from_pipeline(options.pipeline, options.loading)
                   : sd3::Sd3TextEncoders::from_files(options.files, options.loading);
    return;
  }
  h.flux = folder ? flux::FluxTextEncoders::from_pipeline(options.pipeline, options.loading)
                  : flux::FluxTextEncoders::from_files(options.files, options.loading);
}

PromptEmbeddings ModelPromptEncoder::encode(const std::vector<std::string>& prompts) const {
  const Held& h = *held_;
  const ModelPromptOptions& o = h.options;
  if (h.flux)
    return flux::encode_flux_prompts(*h.flux, prompts, {.t5_length = o.t5_length, .batch_size = o.batch_size});
  if (h.sd3)
    return sd3::encode_sd3_prompts(*h.sd3, prompts,
                                   {.t5_length = o.t5_length, .clip_l_pooled = h.clip_l_pooled,
                                    .batch_size = o.batch_size});
  return sdxl::encode_sdxl_prompts(*h.sdxl, prompts,
                                   {.zeros_for_empty_prompt = o.zeros_for_empty_prompt, .batch_size = o.batch_size});
}

void ModelPromptEncoder::unload() const {
  const Held& h = *held_;
  if (h.flux) {
    h.flux->clip_l.unload();
    h.flux->t5.unload();
  }
  if (h.sd3) {
    h.sd3->clip_l.unload();
    h.sd3->clip_g.unload();
    h.sd3->t5.unload();
  }
  if (h.sdxl) {
    h.sdxl->clip_l.unload();
    h.sdxl->clip_g.unload();
  }
}

const ModelPromptOptions& ModelPromptEncoder::options() const { return held_->options; }

}  // namespace wick::text
