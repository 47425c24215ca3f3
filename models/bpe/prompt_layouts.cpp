#include "models/bpe/prompt_layouts.h"

#include <algorithm>

#include "runtime/error.h"

namespace wick::bpe {
namespace {

// diffusers QwenImagePipeline.prompt_template_encode / QwenImageEditPipeline's, split at "{}".
constexpr std::string_view kQwenImageBefore =
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, spatial "
    "relationships of the objects and background:<|im_end|>\n<|im_start|>user\n";
constexpr std::string_view kQwenImageEditBefore =
    "<|im_start|>system\nDescribe the key features of the input image (color, shape, size, texture, objects, "
    "background), then explain how the user's text instruction should alter or modify the image. Generate a new "
    "image that meets the user's requirements while maintaining consistency with the original input where "
    "appropriate.<|im_end|>\n<|im_start|>user\n";
constexpr std::string_view kQwenAfter = "<|im_end|>\n<|im_start|>assistant\n";
constexpr int64_t kQwenImageDrop = 34, kQwenImageEditDrop = 64, kQwenImageMaxLength = 1024;

// Truncated from the right to max_length, then padded to max_length on the given side.
PromptTokens fixed_length(std::vector<int32_t> ids, int64_t max_length, int32_t pad_id, bool pad_left) {
  WICK_CHECK(max_length > 0, "prompt layout: max_length must be positive, got ", max_length);
  if (static_cast<int64_t>(ids.size()) > max_length) ids.resize(static_cast<size_t>(max_length));
  PromptTokens out;
  const size_t n_pad = static_cast<size_t>(max_length) - ids.size();
  out.pad_left = pad_left;
  out.ids.assign(pad_left ? n_pad : 0, pad_id);
  out.ids.insert(out.ids.end(), ids.begin(), ids.end());
  out.ids.resize(static_cast<size_t>(max_length), pad_id);
  out.mask.assign(static_cast<size_t>(max_length), 0);
  std::fill_n(out.mask.begin() + static_cast<std::ptrdiff_t>(pad_left ? n_pad : 0), ids.size(), 1);
  return out;
}

PromptTokens unpadded(std::vector<int32_t> ids, int64_t n_drop, int64_t n_keep) {
  PromptTokens out;
  out.mask.assign(ids.size(), 1);
  out.ids = std::move(ids);
  out.n_drop = n_drop;
  out.n_keep = n_keep;
  return out;
}

std::string qwen_chat(std::string_view prompt, bool thinking_block) {
  std::string text = "<|im_start|>user\n";
  text += prompt;
  text += kQwenAfter;
  if (thinking_block) text += "<think>\n\n</think>\n\n";
  return text;
}

}  // namespace

const char* const kFlux2SystemMessage =
    "You are an AI that reasons about image descriptions. You give structured responses focusing on object "
    "relationships, object\nattribution and actions without speculation.";

int64_t PromptTokens::n_real() const { return std::count(mask.begin(), mask.end(), 1); }

int64_t PromptTokens::first_kept() const {
  const int64_t first_real = pad_left ? static_cast<int64_t>(mask.size()) - n_real() : 0;
  return first_real + std::min(n_drop, n_real());
}

int64_t PromptTokens::n_kept() const {
  const int64_t after_drop = std::max<int64_t>(0, n_real() - n_drop);
  return n_keep < 0 ? after_drop : std::min(after_drop, n_keep);
}

PromptTokens zimage_prompt(const QwenTokenizer& tokenizer, std::string_view prompt, int64_t max_length) {
  return fixed_length(tokenizer.encode(qwen_chat(prompt, false)), max_length, tokenizer.endoftext_id(), false);
}

PromptTokens flux2_klein_prompt(const QwenTokenizer& tokenizer, std::string_view prompt, int64_t max_length) {
  return fixed_length(tokenizer.encode(qwen_chat(prompt, true)), max_length, tokenizer.endoftext_id(), false);
}

PromptTokens qwen_image_prompt(const QwenTokenizer& tokenizer, std::string_view prompt,
                               int64_t max_sequence_length) {
  WICK_CHECK(max_sequence_length > 0 && max_sequence_length <= kQwenImageMaxLength,
             "Qwen-Image prompt: max_sequence_length must be in 1..1024 (the pipeline's limit), got ",
             max_sequence_length);
  std::string text(kQwenImageBefore);
  text += prompt;
  text += kQwenAfter;
  std::vector<int32_t> ids = tokenizer.encode(text);
  if (static_cast<int64_t>(ids.size()) > kQwenImageMaxLength + kQwenImageDrop)
    ids.resize(static_cast<size_t>(kQwenImageMaxLength + kQwenImageDrop));
  return unpadded(std::move(ids), kQwenImageDrop, max_sequence_length);
}

// The edit template with, before the prompt, each image's "<|vision_start|>", its image ids and
// "<|vision_end|>", each led by "Picture {i}: " when `numbered` (Edit Plus). Text between added tokens is
// tokenized on its own, so the image ids are inserted without writing them out as text.
static std::vector<int32_t> qwen_image_edit_ids(const QwenTokenizer& tokenizer, std::string_view prompt,
                                                const std::vector<int64_t>& n_image_tokens, bool numbered) {
  const int32_t image_pad = tokenizer.token_id("<|image_pad|>");
  WICK_CHECK_KIND(Data, image_pad >= 0 && tokenizer.token_id("<|vision_start|>") >= 0 &&
                  tokenizer.token_id("<|vision_end|>") >= 0, "Qwen-Image Edit prompt: ", tokenizer.source(),
                  " has no <|vision_start|>, <|image_pad|> or <|vision_end|> (not Qwen2.5-VL's tokenizer)");
  std::vector<int32_t> ids;
  std::string text(kQwenImageEditBefore);
  for (size_t i = 0; i < n_image_tokens.size(); ++i) {
    WICK_CHECK(n_image_tokens[i] > 0, "Qwen-Image Edit prompt: n_image_tokens must be positive, got ",
               n_image_tokens[i], " for image ", i + 1);
    if (numbered) text += "Picture " + std::to_string(i + 1) + ": ";
    text += "<|vision_start|>";
    std::vector<int32_t> part = tokenizer.encode(text);
    ids.insert(ids.end(), part.begin(), part.end());
    ids.insert(ids.end(), static_cast<size_t>(n_image_tokens[i]), image_pad);
    text = "<|vision_end|>";
  }
  text += prompt;
  text += kQwenAfter;
  std::vector<int32_t> tail = tokenizer.encode(text);
  ids.insert(ids.end(), tail.begin(), tail.end());
  return ids;
}

PromptTokens qwen_image_edit_prompt(const QwenTokenizer& tokenizer, std::string_view prompt, int64_t n_image_tokens) {
  return unpadded(qwen_image_edit_ids(tokenizer, prompt, {n_image_tokens}, false), kQwenImageEditDrop, -1);
}

PromptTokens qwen_image_edit_plus_prompt(const QwenTokenizer& tokenizer, std::string_view prompt,
                                         const std::vector<int64_t>& n_image_tokens) {
  return unpadded(qwen_image_edit_ids(tokenizer, prompt, n_image_tokens, true), kQwenImageEditDrop, -1);
}

PromptTokens flux2_dev_prompt(const TekkenTokenizer& tokenizer, std::string_view prompt, int64_t max_length) {
  std::string clean;  // prompt.replace("[IMG]", ""): one left-to-right pass, no rescan
  for (size_t at = 0; at < prompt.size();) {
    if (prompt.compare(at, 5, "[IMG]") == 0) at += 5;
    else clean.push_back(prompt[at++]);
  }
  std::string text = "<s>[SYSTEM_PROMPT]";
  text += kFlux2SystemMessage;
  text += "[/SYSTEM_PROMPT][INST]";
  text += clean;
  text += "[/INST]";
  return fixed_length(tokenizer.encode(text, SpecialText::AsTokens), max_length, tokenizer.pad_id(), true);
}

std::vector<PromptTokens> pad_batch(std::vector<PromptTokens> rows, int32_t pad_id) {
  size_t longest = 0;
  for (const PromptTokens& row : rows) longest = std::max(longest, row.ids.size());
  for (PromptTokens& row : rows) {
    WICK_CHECK(!row.pad_left, "pad_batch: rows must be right-padded");
    row.ids.resize(longest, pad_id);
    row.mask.resize(longest, 0);
  }
  return rows;
}

}  // namespace wick::bpe
