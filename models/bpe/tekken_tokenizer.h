// Mistral's Tekken tokenizer (tekken.json; FLUX.2 dev's Mistral-Small-3.x text encoder): tiktoken-style
// byte-level BPE over ranked byte strings, with the pre-token pattern stored in the file. A token's id
// is its rank + the number of special tokens; the special tokens hold ids 0..N-1 (<unk> 0, <s> 1,
// </s> 2, [INST] 3, [/INST] 4, [IMG] 10, <pad> 11, [SYSTEM_PROMPT] 17, [/SYSTEM_PROMPT] 18, ...).
//
//   TekkenTokenizer tekken = TekkenTokenizer::from_file("FLUX.2-dev/tokenizer/tekken.json");
//   tekken.encode("A cat");                                  // 1065 7990 (mistral_common's encode)
//   tekken.encode("[INST]hi", SpecialText::AsTokens);        // 3 ...: transformers' converted tokenizer
//
// Thread safety: encoding is const and may run on many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "models/bpe/added_tokens.h"
#include "models/bpe/pre_tokenizer.h"

namespace wick::bpe {

// What a special token's text typed in a caption becomes.
enum class SpecialText {
  AsText,    // ordinary text, as mistral_common's Tekkenizer.encode (tiktoken with no special tokens)
  AsTokens,  // its id, as transformers' tokenizer converted from tekken.json (what diffusers' FLUX.2 runs)
};

class TekkenTokenizer {
 public:
  // A tekken.json, or a folder holding one. Special tokens: the file's "special_tokens" list, else
  // mistral_common's 20 defaults; both padded with "<SPECIAL_i>" up to default_num_special_tokens.
  // The vocabulary is cut to default_vocab_size - default_num_special_tokens ranks, as mistral_common
  // does. Throws WickError (Data) naming the file for a missing or malformed file, a Hugging Face
  // tokenizer.json or vocab.json (another family), or a vocabulary whose first 256 ranks are not the bytes.
  static TekkenTokenizer from_file(const std::string& path);

  // Token ids of a UTF-8 text; no BOS/EOS. Ill-formed UTF-8 is read as U+FFFD.
  std::vector<int32_t> encode(std::string_view text, SpecialText special = SpecialText::AsText) const;
  // Bytes of the tokens; special tokens as their text.
  std::string decode(const std::vector<int32_t>& ids) const;

  int32_t n_special_tokens() const { return n_special_; }
  int64_t vocab_size() const { return n_special_ + static_cast<int64_t>(rank_bytes_.size()); }
  // Id of a special token's text ("<pad>" -> 11), or -1.
  int32_t special_id(std::string_view text) const { return specials_.id_of(text); }
  int32_t bos_id() const { return bos_id_; }
  int32_t pad_id() const { return pad_id_; }
  const std::string& version() const { return version_; }
  const std::string& source() const { return source_; }

 private:
  struct WordCache {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>> words;
  };

  TekkenTokenizer() = default;
  void append_word(std::string_view bytes, std::vector<int32_t>& out) const;
  int32_t rank_of(std::string_view bytes) const;

  std::string source_, version_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::vector<std::string> rank_bytes_;             // rank -> bytes
  std::unordered_map<std::string, int32_t> ranks_;  // bytes -> rank
  AddedTokens specials_;
  int32_t n_special_ = 0, bos_id_ = -1, pad_id_ = -1;
  std::unique_ptr<WordCache> cache_ = std::make_unique<WordCache>();
};

}  // namespace wick::bpe
