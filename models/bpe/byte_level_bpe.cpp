#include "models/bpe/byte_level_bpe.h"

#include <climits>

#include "models/clip/clip_text_normalize.h"
#include "runtime/error.h"

namespace wick::bpe {

const std::array<char32_t, 256>& gpt2_byte_to_unicode() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

std::string gpt2_spelling(std::string_view bytes) {
  std::u32string symbols;
  symbols.reserve(bytes.size());
  for (char c : bytes) symbols.push_back(gpt2_byte_to_unicode()[static_cast<unsigned char>(c)]);
  return clip::encode_utf8(symbols);
}

bool gpt2_bytes(std::string_view spelling, std::string& bytes) {
  static const std::array<int, 324> unicode_to_byte = [] {
    std::array<int, 324> t{};
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[gpt2_byte_to_unicode()[b]] = b;
    return t;
  }();
  for (char32_t c : clip::decode_utf8(spelling)) {
    if (c >= unicode_to_byte.size() || unicode_to_byte[c] < 0) return false;
    bytes.push_back(static_cast<char>(unicode_to_byte[c]));
  }
  return true;
}

ByteLevelBpe::ByteLevelBpe(std::unordered_map<std::string, int32_t> vocab,
                           const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
                           const std::string& source)
    : token_to_id_(std::move(vocab)), ignore_merges_(ignore_merges) {
  for (int b = 0; b < 256; ++b) {
    std::string symbol = gpt2_spelling(std::string(1, static_cast<char>(b)));
    byte_id_[b] = id_of(symbol);
    WICK_CHECK_KIND(Data, byte_id_[b] >= 0, "BPE tokenizer: ", source, ": the vocabulary lacks the byte symbol \"",
                    symbol, "\" (byte ", b, "): not a byte-level BPE vocabulary");
  }
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    int32_t a = id_of(left), b = id_of(right), merged = id_of(left + right);
    WICK_CHECK_KIND(Data, a >= 0 && b >= 0 && merged >= 0, "BPE tokenizer: ", source, ": merge ", rank + 1, " \"",
                    left, " ", right, "\" uses a token missing from the vocabulary");
    uint64_t key = (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
    merges_.emplace(key, Merge{static_cast<int32_t>(rank), merged});  // the first (lowest) rank wins
  }
}

int32_t ByteLevelBpe::id_of(const std::string& spelling) const {
  auto it = token_to_id_.find(spelling);
  return it == token_to_id_.end() ? -1 : it->second;
}

// Repeatedly the adjacent pair of lowest rank, merged at each non-overlapping occurrence from the left
// (tokenizers' BPE gives the same: equal ranks are the same pair, merged leftmost first).
void ByteLevelBpe::append_word(std::string_view bytes, std::vector<int32_t>& out) const {
  if (bytes.empty()) return;
  {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    auto it = cache_->words.find(std::string(bytes));
    if (it != cache_->words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> symbols;
  int32_t whole = ignore_merges_ ? id_of(gpt2_spelling(bytes)) : -1;
  if (whole >= 0) {
    symbols.push_back(whole);
  } else {
    symbols.resize(bytes.size());
    for (size_t i = 0; i < bytes.size(); ++i) symbols[i] = byte_id_[static_cast<unsigned char>(bytes[i])];
  }
  std::vector<int32_t> merged;
  while (symbols.size() > 1) {
    int32_t best_rank = INT32_MAX;
    uint64_t best_key = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      uint64_t key = (uint64_t(uint32_t(symbols[i])) << 32) | uint32_t(symbols[i + 1]);
      auto it = merges_.find(key);
      if (it != merges_.end() && it->second.rank < best_rank) best_rank = it->second.rank, best_key = key;
    }
    if (best_rank == INT32_MAX) break;
    const int32_t result = merges_.at(best_key).merged_id;
    const auto left = static_cast<int32_t>(best_key >> 32), right = static_cast<int32_t>(best_key & 0xFFFFFFFFu);
    merged.clear();
    for (size_t i = 0; i < symbols.size();) {
      if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
        merged.push_back(result);
        i += 2;
      } else {
        merged.push_back(symbols[i++]);
      }
    }
    symbols.swap(merged);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
  std::lock_guard<std::mutex> lock(cache_->mutex);
  if (cache_->words.size() >= (1u << 16)) cache_->words.clear();  // bounded: captions repeat few words
  cache_->words.emplace(std::string(bytes), std::move(symbols));
}

}  // namespace wick::bpe
