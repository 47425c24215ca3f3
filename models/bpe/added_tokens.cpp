#include "models/bpe/added_tokens.h"

#include <algorithm>

namespace wick::bpe {

AddedTokens::AddedTokens(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (!tokens_[i].content.empty())
      by_first_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(static_cast<int32_t>(i));
  for (auto& candidates : by_first_byte_)
    std::stable_sort(candidates.begin(), candidates.end(), [&](int32_t a, int32_t b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
}

int32_t AddedTokens::id_of(std::string_view content) const {
  for (const AddedToken& token : tokens_)
    if (token.content == content) return token.id;
  return -1;
}

void AddedTokens::split(std::string_view text, const std::function<void(std::string_view)>& on_text,
                        const std::function<void(int32_t)>& on_token) const {
  size_t begin = 0;
  for (size_t i = 0; i < text.size();) {
    const AddedToken* match = nullptr;
    for (int32_t index : by_first_byte_[static_cast<unsigned char>(text[i])]) {
      const std::string& content = tokens_[index].content;
      if (text.compare(i, content.size(), content) == 0) {
        match = &tokens_[index];  // the longest, as candidates are sorted by length
        break;
      }
    }
    if (!match) {
      ++i;
      continue;
    }
    if (i > begin) on_text(text.substr(begin, i - begin));
    on_token(match->id);
    i += match->content.size();
    begin = i;
  }
  if (begin < text.size()) on_text(text.substr(begin));
}

}  // namespace wick::bpe
