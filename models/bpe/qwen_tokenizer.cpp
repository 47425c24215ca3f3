#include "models/bpe/qwen_tokenizer.h"

#include "runtime/error.h"

namespace wick::bpe {

void QwenTokenizer::finish() {
  endoftext_id_ = added_.id_of("<|endoftext|>");
  im_start_id_ = added_.id_of("<|im_start|>");
  im_end_id_ = added_.id_of("<|im_end|>");
  for (const char* required : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"})
    WICK_CHECK_KIND(Data, added_.id_of(required) >= 0, "Qwen tokenizer: ", source_, ": no added token \"", required,
                    "\" (a Qwen tokenizer has <|endoftext|>, <|im_start|> and <|im_end|>; is this another model's "
                    "tokenizer?)");
  for (const auto& [spelling, id] : bpe_->vocab()) spelling_of_id_.emplace(id, spelling);
}

int32_t QwenTokenizer::token_id(std::string_view token) const {
  int32_t added = added_.id_of(token);
  return added >= 0 ? added : bpe_->id_of(std::string(token));
}

std::vector<int32_t> QwenTokenizer::encode(std::string_view text_utf8) const {
  std::vector<int32_t> out;
  const std::string text = well_formed_utf8(text_utf8);
  added_.split(
      text,
      [&](std::string_view segment) {
        const std::string normalized = nfc_ ? nfc_utf8(segment) : std::string(segment);
        for (std::string_view piece : pre_tokenizer_->split(normalized, /*keep_gaps=*/true))
          bpe_->append_word(piece, out);
      },
      [&](int32_t id) { out.push_back(id); });
  return out;
}

std::string QwenTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string bytes;
  for (int32_t id : ids) {
    bool added = false;
    for (const AddedToken& token : added_.tokens())
      if (token.id == id) {
        bytes += token.content;
        added = true;
        break;
      }
    if (added) continue;
    auto it = spelling_of_id_.find(id);
    WICK_CHECK(it != spelling_of_id_.end(), "Qwen tokenizer: token id ", id, " is not in the vocabulary of ", source_);
    WICK_CHECK(gpt2_bytes(it->second, bytes), "Qwen tokenizer: token ", id, " is not a byte-level spelling");
  }
  return well_formed_utf8(bytes);
}

}  // namespace wick::bpe
