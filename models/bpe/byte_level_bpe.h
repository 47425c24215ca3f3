// Byte-level BPE by merge rank (GPT-2's scheme, as Qwen ships it in vocab.json + merges.txt or a
// tokenizer.json): a pre-token's UTF-8 bytes become GPT-2's byte symbols, then the adjacent pair of
// lowest merge rank is merged until none is left.
//
//   ByteLevelBpe bpe(std::move(vocab), merges, "qwen/vocab.json");   // vocab: spelling -> id
//   std::vector<int32_t> ids;
//   bpe.append_word(" cat", ids);                                    // 8251 ("Ġcat")
//
// Thread safety: append_word is const and may run on many threads at once (the word cache has a lock).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace wick::bpe {

// GPT-2's reversible byte -> character map: printable Latin-1 bytes map to themselves, the other 68
// to U+0100 onwards in byte order (space -> U+0120 'Ġ', '\n' -> U+010A 'Ċ').
const std::array<char32_t, 256>& gpt2_byte_to_unicode();
// The byte-level spelling (UTF-8) of raw bytes, e.g. " cat" -> "Ġcat".
std::string gpt2_spelling(std::string_view bytes);
// The raw bytes of a byte-level spelling; false when a character is not one of the 256 symbols.
bool gpt2_bytes(std::string_view spelling, std::string& bytes);

class ByteLevelBpe {
 public:
  ByteLevelBpe() = default;
  // vocab: byte-level spelling -> id (ids need not be contiguous); merges: (left, right) spellings in
  // rank order. ignore_merges: a pre-token whose whole spelling is in the vocabulary is that token
  // (tokenizers' BPE flag). Throws WickError (Data) naming `source` when a byte symbol is missing or a
  // merge's parts or result are not in the vocabulary.
  ByteLevelBpe(std::unordered_map<std::string, int32_t> vocab,
               const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
               const std::string& source);

  // Appends the ids of one pre-token (raw UTF-8 bytes).
  void append_word(std::string_view bytes, std::vector<int32_t>& out) const;

  // Id of a spelling, or -1.
  int32_t id_of(const std::string& spelling) const;
  const std::unordered_map<std::string, int32_t>& vocab() const { return token_to_id_; }
  int64_t n_merges() const { return static_cast<int64_t>(merges_.size()); }

 private:
  struct Merge {
    int32_t rank, merged_id;
  };
  struct WordCache {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>> words;
  };

  std::unordered_map<std::string, int32_t> token_to_id_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> rank, result
  std::array<int32_t, 256> byte_id_{};
  bool ignore_merges_ = false;
  std::unique_ptr<WordCache> cache_ = std::make_unique<WordCache>();
};

}  // namespace wick::bpe
