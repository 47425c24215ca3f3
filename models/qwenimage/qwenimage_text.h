// What Qwen-Image takes from its text encoder (diffusers' QwenImagePipeline.encode_prompt): Qwen2.5-VL-7B's language
// model, its last hidden state (final norm applied) over the pipeline's system template, the template's first 34 rows
// dropped and at most max_length rows kept (models/llm/llm_prompts.h qwen_image_prompt_embeds). No pooled vector.
//
//   auto te = qwenimage::QwenImageTextEncoder::from_pipeline("Qwen-Image", {.device = Device::cuda()});  // headers
//   text::PromptEmbeddings e = qwenimage::encode_qwenimage_prompts(te, {"A cat", ""}, {.max_length = 512});
//   e.context;   // [2, 512, 3584]: prompt i's rows first, then zeros
//   e.mask;      // [2, 512] I64: 1 on prompt i's rows, 0 after
//   e.pooled;    // [2, 0]
//   auto comfy = qwenimage::QwenImageTextEncoder::from_files("qwen_2.5_vl_7b.safetensors", "Qwen-Image/tokenizer");
//
// The rows are padded to max_length so that every caption of a dataset has one shape; the dataset's text/mask says
// where each ends and the transformer masks the rest as keys, which gives what the pipeline's batch padded to its
// longest gives (tests/data/qwenimage: padded and unpadded agree to 3e-7). The vision tower of Qwen2.5-VL (what the
// Edit pipelines feed the control image through) is not implemented: text-to-image captions only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/bpe/qwen_tokenizer.h"
#include "models/text/prompt_embeddings.h"
#include "models/text/prompt_encoder.h"
#include "models/text/text_encoder_slot.h"

namespace wick::qwenimage {

// The dataset's text_embeds_encoder for Qwen-Image's caption rows (what samplers check stored prompts against).
inline constexpr const char* kTextEmbedsEncoder = "qwen2.5-vl hidden_states[-1] (drop 34)";

struct QwenImageTextEncoder {
  std::shared_ptr<const bpe::QwenTokenizer> tokenizer;
  text::LlmEncoderSlot qwen25;
  text::EncoderLoading loading;

  // A diffusers pipeline folder (Qwen-Image/): tokenizer/ and text_encoder/. Only headers are read here; the model
  // loads when encoding needs it. WickError (Data) naming the file: a missing or malformed tokenizer, weights that are
  // not a Qwen2 language model.
  static QwenImageTextEncoder from_pipeline(const std::string& folder, const text::EncoderLoading& loading = {});
  // The weights (ComfyUI's qwen_2.5_vl_7b.safetensors, a text_encoder/ folder) and the tokenizer (a tokenizer/ folder
  // or tokenizer.json); WickError (Config) naming a part not given, else as from_pipeline.
  static QwenImageTextEncoder from_files(const std::string& text_encoder, const std::string& tokenizer,
                                         const text::EncoderLoading& loading = {});
  void unload() const { qwen25.unload(); }
};

struct QwenImagePromptOptions {
  int64_t max_length = 512;  // the pipeline's max_sequence_length (at most 1024): rows kept, and the padded length
  int64_t batch_size = 8;    // not used: each prompt runs alone, unpadded (qwen_image_prompt_embeds)
};

// prompts (N >= 1, UTF-8, "" allowed) -> context [N, max_length, hidden], mask [N, max_length] I64, pooled [N, 0], in
// the loading's dtype on its device. The model is freed after the call unless loading.keep_loaded.
text::PromptEmbeddings encode_qwenimage_prompts(const QwenImageTextEncoder& encoder,
                                                const std::vector<std::string>& prompts,
                                                const QwenImagePromptOptions& options = {});

// What Qwen-Image's prompt encoder takes (text::PromptSpec): parts text_encoder and tokenizer; option max_length (512).
text::PromptSpec qwenimage_prompt_spec();
// QwenImageTextEncoder (from the pipeline folder, else the files) behind text::PromptEncoder.
std::unique_ptr<text::PromptEncoder> make_qwenimage_prompt_encoder(const text::PromptEncoderRequest& request);

}  // namespace wick::qwenimage
