// The token layouts the diffusion pipelines build around a prompt for their language-model text
// encoders: chat template, truncation, padding, and how many leading encoder outputs they drop.
// Each equals what diffusers 0.42's pipeline builds (apply_chat_template or its template string, then
// the tokenizer call); tests/data/bpe holds the reference ids.
//
//   QwenTokenizer qwen = QwenTokenizer::from_folder("Z-Image-Turbo/tokenizer");
//   PromptTokens z = zimage_prompt(qwen, "A cat");        // 512 ids: 151644 872 198 32 8251 ... 151643...
//   encoder_rows = z.n_real();                            // Z-Image keeps the 10 real rows
//   PromptTokens q = qwen_image_prompt(qwen25, "A cat");  // 41 ids; drop 34 -> 7 conditioning rows
//   PromptTokens f = flux2_dev_prompt(tekken, "A cat");   // 512 ids, left-padded with 11
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "models/bpe/qwen_tokenizer.h"
#include "models/bpe/tekken_tokenizer.h"

namespace wick::bpe {

struct PromptTokens {
  std::vector<int32_t> ids;   // what the text encoder is given, padding included
  std::vector<int32_t> mask;  // same length: 1 on real tokens, 0 on padding
  // The conditioning is the encoder's outputs on the real tokens, minus the first n_drop of them,
  // then at most n_keep (-1: all) of the rest (Qwen-Image: drop 34 / 64, keep 512).
  int64_t n_drop = 0;
  int64_t n_keep = -1;
  bool pad_left = false;
  int64_t n_real() const;
  // The conditioning rows' positions in `ids`: [first_kept, first_kept + n_kept()).
  int64_t first_kept() const;
  int64_t n_kept() const;
};

// Z-Image: Qwen3's chat template with enable_thinking=True (no think block, no system prompt):
// "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n", truncated to max_length and right-
// padded with <|endoftext|> to max_length. All real rows are kept (hidden_states[-2]).
PromptTokens zimage_prompt(const QwenTokenizer& tokenizer, std::string_view prompt, int64_t max_length = 512);

// FLUX.2 klein: the same with enable_thinking=False, which appends "<think>\n\n</think>\n\n".
PromptTokens flux2_klein_prompt(const QwenTokenizer& tokenizer, std::string_view prompt, int64_t max_length = 512);

// Qwen-Image (text to image): diffusers' template with its system prompt, truncated to
// 1024 + 34 tokens, not padded (a batch pads to its longest: pad_batch); drop 34, keep max_sequence_length.
PromptTokens qwen_image_prompt(const QwenTokenizer& tokenizer, std::string_view prompt,
                               int64_t max_sequence_length = 512);

// Qwen-Image Edit (v1): the edit template (its own system prompt), "<|vision_start|>", "<|image_pad|>"
// repeated n_image_tokens times (the input image's merged patches, grid_h * grid_w / 4), "<|vision_end|>",
// then the prompt; not truncated, not padded (pad_batch); drop 64, keep all the rest (the edit pipelines
// accept max_sequence_length but do not cut to it).
PromptTokens qwen_image_edit_prompt(const QwenTokenizer& tokenizer, std::string_view prompt, int64_t n_image_tokens);

// Qwen-Image Edit Plus (2509, 2511): the same template with "Picture {i}: <|vision_start|>...<|vision_end|>"
// for each input image i = 1, 2, ... (n_image_tokens[i - 1] image ids each) before the prompt; drop 64.
PromptTokens qwen_image_edit_plus_prompt(const QwenTokenizer& tokenizer, std::string_view prompt,
                                         const std::vector<int64_t>& n_image_tokens);

// FLUX.2 dev: "<s>[SYSTEM_PROMPT]{system}[/SYSTEM_PROMPT][INST]{prompt}[/INST]" with the pipeline's
// system message and "[IMG]" removed from the prompt, special texts as tokens, truncated to max_length
// (from the right) and left-padded with <pad> (11) to max_length. All rows are used.
PromptTokens flux2_dev_prompt(const TekkenTokenizer& tokenizer, std::string_view prompt, int64_t max_length = 512);

// The FLUX.2 dev system message (diffusers' flux2/system_messages.py SYSTEM_MESSAGE).
extern const char* const kFlux2SystemMessage;

// Rows padded to the longest with pad_id on the right (Qwen-Image's padding=True batch); masks follow.
std::vector<PromptTokens> pad_batch(std::vector<PromptTokens> rows, int32_t pad_id);

}  // namespace wick::bpe
