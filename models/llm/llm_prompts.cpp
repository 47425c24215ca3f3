#include "models/llm/llm_prompts.h"

#include <cstdint>
#include <vector>

#include "models/bpe/prompt_layouts.h"
#include "runtime/error.h"

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

}  // namespace

LlmOutput zimage_text_output() { return LlmOutput::hidden_state(-2); }

LlmOutput flux2_klein_text_output() { return LlmOutput::stack({9, 18, 27}); }

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
  std::vector<const std::vector<int32_t>*> ids, masks;
  for (const bpe::PromptTokens& row : rows) {
    WICK_CHECK(static_cast<int64_t>(row.ids.size()) == max_length, "flux2_klein_prompt_embeds: the layout gave ",
               row.ids.size(), " ids, not ", max_length);
    ids.push_back(&row.ids);
    masks.push_back(&row.mask);
  }
  return encoder.forward(batch_of(ids, max_length), batch_of(masks, max_length), flux2_klein_text_output());
}

}  // namespace wick::llm
