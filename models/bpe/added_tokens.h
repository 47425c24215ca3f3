// Added (special) tokens of a byte-level BPE tokenizer, split off a caption before anything else, as
// tokenizers' AddedVocabulary does: exact, case-sensitive matches, leftmost-longest, on the raw text.
//
//   AddedTokens added({{"<|im_start|>", 151644, true}, {"<|im_end|>", 151645, true}});
//   added.split("<|im_start|>user\nhi", [&](std::string_view text) { ... },   // "user\nhi"
//               [&](int32_t id) { ... });                                    // 151644
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace wick::bpe {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = true;  // tokenizers' flag (Qwen3's <think> is an added token that is not special)
};

class AddedTokens {
 public:
  AddedTokens() = default;
  explicit AddedTokens(std::vector<AddedToken> tokens);

  // Calls on_text for each stretch between matches (never empty) and on_token for each match, in order.
  void split(std::string_view text, const std::function<void(std::string_view)>& on_text,
             const std::function<void(int32_t)>& on_token) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  // The id of the added token spelled `content`, or -1.
  int32_t id_of(std::string_view content) const;

 private:
  std::vector<AddedToken> tokens_;
  std::array<std::vector<int32_t>, 256> by_first_byte_;  // indexes into tokens_, longest first
};

}  // namespace wick::bpe
