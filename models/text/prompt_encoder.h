// A model's prompt encoder behind one interface: what an architecture makes (Architecture::make_prompt_encoder,
// models/architecture.h) for `wick encode-prompt`, `wick dataset encode` and sample images. The architecture
// declares what it takes (PromptSpec: the files and the options); nothing here knows an architecture.
//
//   const Architecture& arch = find_architecture("flux");
//   const text::PromptSpec& spec = arch.dataset_spec()->prompts;              // its files and options
//   auto encoder = arch.make_prompt_encoder({.pipeline = "FLUX.1-dev",
//                                            .options = text::prompt_options(spec, {{"t5_length", "256"}}, "flux"),
//                                            .loading = {.device = Device::cuda()}});
//   text::PromptEmbeddings e = encoder->encode({"a photo of a cat"});        // context [1, 256, 4096]
//   encoder->unload();                                                         // frees encoders kept loaded
//
// Only the files' headers are read when an encoder is made (a missing or wrong file fails there, before any
// work); the encoders load when encode() needs them, as text::EncoderLoading says.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/config/model_options.h"
#include "models/text/prompt_embeddings.h"
#include "models/text/text_encoder_slot.h"

namespace wick::text {

// One file a prompt encoder reads when no pipeline folder is given: a text encoder's weights or a tokenizer
// (ComfyUI's layout: clip_l.safetensors, t5xxl_fp16.safetensors, ...).
struct PromptPart {
  std::string name;  // "clip_l": the command line's --clip-l
  std::string help;  // one line for --help
};

// What an architecture's prompt encoder takes.
struct PromptSpec {
  std::vector<PromptPart> parts;   // in the order the command line lists them
  std::vector<OptionKey> options;  // "t5_length" -> --t5-length; type, range and choices as the config's keys
};

struct PromptEncoderRequest {
  std::string pipeline;                      // a diffusers pipeline folder; "" to take `files`
  std::map<std::string, std::string> files;  // PromptPart name -> path ("" or absent: not given)
  ModelOptions options;                      // the spec's options (prompt_options); empty: every default
  EncoderLoading loading;
  int64_t batch_size = 8;  // prompts per encoder call
};

class PromptEncoder {
 public:
  virtual ~PromptEncoder() = default;
  // prompts (N >= 1, UTF-8, "" allowed) -> the embeddings the model takes, in loading's dtype on its device.
  virtual PromptEmbeddings encode(const std::vector<std::string>& prompts) const = 0;
  // Frees every encoder kept loaded (loading.keep_loaded).
  virtual void unload() const = 0;
};

// text::PromptEncoder over an architecture's set of encoders (FluxTextEncoders, ...): encode() is
// `encode_fn(encoders, prompts, options)`, unload() the set's unload() (it frees the encoders kept loaded).
template <typename Encoders, typename Options>
class EncoderSetPromptEncoder : public PromptEncoder {
 public:
  using EncodeFn = PromptEmbeddings (*)(const Encoders&, const std::vector<std::string>&, const Options&);
  EncoderSetPromptEncoder(Encoders encoders, Options options, EncodeFn encode_fn)
      : encoders_(std::move(encoders)), options_(options), encode_fn_(encode_fn) {}
  PromptEmbeddings encode(const std::vector<std::string>& prompts) const override {
    return encode_fn_(encoders_, prompts, options_);
  }
  void unload() const override { encoders_.unload(); }

 private:
  Encoders encoders_;
  Options options_;
  EncodeFn encode_fn_;
};

// "--clip-l" for "clip_l": the command-line spelling of a part or an option.
std::string option_flag(const std::string& name);

// The spec's options at their defaults, with `given` (option name -> the command line's text; "true" / "false" for
// booleans) parsed and checked (type, range, choices). WickError (Config) naming the flag: a value that does not
// parse or fit, or a name the spec lacks ("<model> takes no --t5-length (its prompt options: ...)").
ModelOptions prompt_options(const PromptSpec& spec, const std::map<std::string, std::string>& given,
                            const std::string& model);
// WickError (Config) for a given (non-empty) file whose part the spec lacks ("<model>'s text encoders take no --t5
// (they take --clip-l, ...)"), for a pipeline folder together with files, and for neither.
void check_prompt_files(const PromptSpec& spec, const PromptEncoderRequest& request, const std::string& model);
// The request's file for `part`, "" when not given.
const std::string& prompt_file(const PromptEncoderRequest& request, const std::string& part);
// request.options, or the spec's defaults when it holds none.
ModelOptions resolved_options(const PromptSpec& spec, const PromptEncoderRequest& request);

}  // namespace wick::text
