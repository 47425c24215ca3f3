#include "models/llm/llm_prompts.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "models/bpe/prompt_layouts.h"
#include "runtime/error.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/join.h"

namespace wick::llm {
namespace {

void check_request(const LlmEncoder& encoder, const std::vector<std::string>& prompts, int64_t max_length,
                   LlmFamily family, const char* who) {
  WICK_CHECK_KIND(Config, !prompts.empty(), who, ": no prompts");
  WICK_CHECK_KIND(Config, max_length >= 1, who, ": max_length must be at least 1, got ", max_length);
  WICK_CHECK_KIND(Data, encoder.config().family == family, who, ": the text encoder is a ",
                  family_name(encoder.config().family), " model, the pipeline needs ", family_name(family));
}

// [rows.size(), length] I64 of the rows' first `length` ids (or mask values).
Tensor batch_of(const std::vector<const std::vector<int32_t>*>& rows, int64_t length) {
  std::vector<int64_t> flat;
  flat.reserve(rows.size() * static_cast<size_t>(length));
  for (const std::vector<int32_t>* row : rows) flat.insert(flat.end(), row->begin(), row->begin() + length);
  return Tensor::from_vector(flat, {static_cast<int64_t>(rows.size()), length});
}

// The padded rows as one [B, max_length] batch with their mask through the encoder.
Tensor run_padded(LlmEncoder& encoder, const std::vector<bpe::PromptTokens>& rows, int64_t max_length,
                  const LlmOutput& output, const char* who) {
  std::vector<const std::vector<int32_t>*> ids, masks;
  for (const bpe::PromptTokens& row : rows) {
    WICK_CHECK(static_cast<int64_t>(row.ids.size()) == max_length && row.mask.size() == row.ids.size(), who,
               ": the layout gave ", row.ids.size(), " ids, not ", max_length);
    ids.push_back(&row.ids);
    masks.push_back(&row.mask);
  }
  return encoder.forward(batch_of(ids, max_length), batch_of(masks, max_length), output);
}

}  // namespace

LlmOutput zimage_text_output() { return LlmOutput::hidden_state(-2); }

LlmOutput flux2_klein_text_output() { return LlmOutput::stack({9, 18, 27}); }

LlmOutput flux2_dev_text_output() { return LlmOutput::stack({10, 20, 30}); }

LlmOutput qwen_image_text_output() { return LlmOutput::last_hidden_state(); }

std::vector<Tensor> zimage_prompt_embeds(const bpe::QwenTokenizer& tokenizer, LlmEncoder& encoder,
                                         const std::vector<std::string>& prompts, int64_t max_length) {
  check_request(encoder, prompts, max_length, LlmFamily::Qwen3, "zimage_prompt_embeds");
  std::vector<Tensor> out;
  out.reserve(prompts.size());
  for (const std::string& prompt : prompts) {
    const bpe::PromptTokens tokens = bpe::zimage_prompt(tokenizer, prompt, max_length);
    const int64_t n = tokens.n_real();  // right padding: the real ids come first
    WICK_CHECK(n >= 1, "zimage_prompt_embeds: the chat template gave no real token");
    const Tensor hidden = encoder.forward(batch_of({&tokens.ids}, n), Tensor(), zimage_text_output());
    out.push_back(hidden.select(0, 0));
  }
  return out;
}

Tensor flux2_klein_prompt_embeds(const bpe::QwenTokenizer& tokenizer, LlmEncoder& encoder,
                                 const std::vector<std::string>& prompts, int64_t max_length) {
  check_request(encoder, prompts, max_length, LlmFamily::Qwen3, "flux2_klein_prompt_embeds");
  std::vector<bpe::PromptTokens> rows;
  rows.reserve(prompts.size());
  for (const std::string& prompt : prompts) rows.push_back(bpe::flux2_klein_prompt(tokenizer, prompt, max_length));
  return run_padded(encoder, rows, max_length, flux2_klein_text_output(), "flux2_klein_prompt_embeds");
}

Tensor flux2_dev_prompt_embeds(const bpe::TekkenTokenizer& tokenizer, LlmEncoder& encoder,
                               const std::vector<std::string>& prompts, int64_t max_length) {
  check_request(encoder, prompts, max_length, LlmFamily::Mistral, "flux2_dev_prompt_embeds");
  std::vector<bpe::PromptTokens> rows;
  rows.reserve(prompts.size());
  for (const std::string& prompt : prompts) rows.push_back(bpe::flux2_dev_prompt(tokenizer, prompt, max_length));
  return run_padded(encoder, rows, max_length, flux2_dev_text_output(), "flux2_dev_prompt_embeds");
}

QwenImagePromptEmbeds qwen_image_prompt_embeds(const bpe::QwenTokenizer& tokenizer, LlmEncoder& encoder,
                                               const std::vector<std::string>& prompts, int64_t max_sequence_length) {
  check_request(encoder, prompts, max_sequence_length, LlmFamily::Qwen2, "qwen_image_prompt_embeds");
  WICK_CHECK_KIND(Config, max_sequence_length <= 1024,
                  "qwen_image_prompt_embeds: max_sequence_length must be at most 1024, got ", max_sequence_length);
  std::vector<Tensor> kept;
  std::vector<int64_t> lengths;
  int64_t longest = 0;
  for (const std::string& prompt : prompts) {
    const bpe::PromptTokens tokens = bpe::qwen_image_prompt(tokenizer, prompt, max_sequence_length);
    const int64_t first = tokens.first_kept(), n = tokens.n_kept();
    WICK_CHECK(n >= 1, "qwen_image_prompt_embeds: the template left no row to keep");
    const Tensor hidden = encoder.forward(batch_of({&tokens.ids}, first + n), Tensor(), qwen_image_text_output());
    kept.push_back(hidden.select(0, 0).narrow(0, first, n));
    lengths.push_back(n);
    longest = std::max(longest, n);
  }
  std::vector<Tensor> padded;
  std::vector<int64_t> mask;
  for (size_t i = 0; i < kept.size(); ++i) {
    padded.push_back(pad(kept[i], {0, 0, 0, longest - lengths[i]}));
    for (int64_t j = 0; j < longest; ++j) mask.push_back(j < lengths[i] ? 1 : 0);
  }
  return {stack(padded, 0), Tensor::from_vector(mask, {static_cast<int64_t>(kept.size()), longest})};
}

}  // namespace wick::llm
