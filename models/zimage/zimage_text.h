// What Z-Image takes from its text encoder (diffusers' ZImagePipeline._encode_prompt, the authors' pipeline):
// Qwen3-4B's hidden_states[-2] (layer 35 of 36, no final norm) over the prompt's chat template, the padding rows
// dropped, so each caption is as long as its tokens (models/llm/llm_prompts.h zimage_prompt_embeds). Z-Image has no
// pooled vector.
//
//   auto te = zimage::ZImageTextEncoder::from_pipeline("Z-Image-Turbo", {.device = Device::cuda()});   // headers only
//   text::PromptEmbeddings e = zimage::encode_zimage_prompts(te, {"A cat", ""}, {.max_length = 512});
//   e.context;   // [2, 512, 2560]: prompt i's rows first, then zeros
//   e.mask;      // [2, 512] I64: 1 on prompt i's rows (10 and 8 here), 0 after
//   e.pooled;    // [2, 0]
//   auto comfy = zimage::ZImageTextEncoder::from_files("qwen_3_4b.safetensors", "Z-Image-Turbo/tokenizer");
//
// The rows are padded to max_length so that every prompt of a dataset has one shape (the dataset's text/mask says
// where each caption ends, and the transformer drops the rest: zimage.h predict). max_length also truncates the
// template's tokens, as the pipeline's max_sequence_length (512).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/bpe/qwen_tokenizer.h"
#include "models/text/prompt_embeddings.h"
#include "models/text/prompt_encoder.h"
#include "models/text/text_encoder_slot.h"

namespace wick::zimage {

// The dataset's text_embeds_encoder for Z-Image's caption features (what samplers check stored prompts against).
inline constexpr const char* kTextEmbedsEncoder = "qwen3 hidden_states[-2]";

struct ZImageTextEncoder {
  std::shared_ptr<const bpe::QwenTokenizer> tokenizer;
  text::LlmEncoderSlot qwen3;
  text::EncoderLoading loading;

  // A diffusers pipeline folder (Z-Image-Turbo/): tokenizer/ and text_encoder/. Only headers are read here; Qwen3
  // loads when encoding needs it. WickError (Data) naming the file: a missing or malformed tokenizer, weights that are
  // not a Qwen3 model.
  static ZImageTextEncoder from_pipeline(const std::string& folder, const text::EncoderLoading& loading = {});
  // Qwen3's weights (ComfyUI's qwen_3_4b.safetensors, a text_encoder/ folder) and its tokenizer (a tokenizer/ folder
  // or tokenizer.json); WickError (Config) naming a part not given, else as from_pipeline.
  static ZImageTextEncoder from_files(const std::string& text_encoder, const std::string& tokenizer,
                                     const text::EncoderLoading& loading = {});
  // Frees Qwen3 when kept loaded (loading.keep_loaded).
  void unload() const { qwen3.unload(); }
};

struct ZImagePromptOptions {
  int64_t max_length = 512;  // the pipeline's max_sequence_length: template tokens kept, and the rows' padded length
  int64_t batch_size = 8;    // not used: each prompt runs alone, unpadded (zimage_prompt_embeds)
};

// prompts (N >= 1, UTF-8, "" allowed) -> context [N, max_length, hidden], mask [N, max_length] I64, pooled [N, 0],
// tokens "qwen_ids" [N, max_length] (the template's ids, padded with <|endoftext|>) and "qwen_mask"; in the
// loading's dtype on its device. Qwen3 is freed after the call unless loading.keep_loaded.
text::PromptEmbeddings encode_zimage_prompts(const ZImageTextEncoder& encoder, const std::vector<std::string>& prompts,
                                             const ZImagePromptOptions& options = {});

// What Z-Image's prompt encoder takes (text::PromptSpec): parts text_encoder and tokenizer; option max_length (512).
text::PromptSpec zimage_prompt_spec();
// ZImageTextEncoder (from the pipeline folder, else the files) behind text::PromptEncoder
// (Architecture::make_prompt_encoder).
std::unique_ptr<text::PromptEncoder> make_zimage_prompt_encoder(const text::PromptEncoderRequest& request);

}  // namespace wick::zimage
