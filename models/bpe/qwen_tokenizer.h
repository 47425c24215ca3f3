// Qwen's byte-level BPE tokenizer (Qwen3 for Z-Image and FLUX.2 klein, Qwen2.5-VL for Qwen-Image), id
// for id equal to transformers' Qwen2Tokenizer (tokenizers' fast tokenizer). See docs/text_encoders.md.
//
//   QwenTokenizer qwen = QwenTokenizer::from_folder("Z-Image-Turbo/tokenizer");  // or .../tokenizer.json
//   std::vector<int32_t> ids = qwen.encode("A cat");                             // 32 8251 (no BOS/EOS)
//   qwen.encode("<|im_start|>user\n");                                           // 151644 872 198
//
// A caption goes through: added tokens split off (exact, leftmost-longest) -> NFC -> the pre-token
// pattern -> GPT-2 byte symbols -> BPE by merge rank. Ill-formed UTF-8 is read as U+FFFD.
// Thread safety: encoding is const and may run on many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "models/bpe/added_tokens.h"
#include "models/bpe/byte_level_bpe.h"
#include "models/bpe/pre_tokenizer.h"

namespace wick::bpe {

class QwenTokenizer {
 public:
  // A tokenizer folder or a tokenizer.json path. A folder is read from its tokenizer.json when it has
  // one, else from vocab.json + merges.txt, with the added tokens of tokenizer_config.json's
  // added_tokens_decoder and added_tokens.json. Throws WickError (Data) naming the file for a missing
  // or malformed file, a Mistral Tekken file or another family's tokenizer, an unsupported normalizer
  // or pre-tokenizer, or a vocabulary without <|endoftext|>, <|im_start|> and <|im_end|>.
  static QwenTokenizer from_folder(const std::string& path);
  // The same for tokenizer.json alone.
  static QwenTokenizer from_tokenizer_json(const std::string& path);

  // Token ids of a UTF-8 text: no BOS/EOS, no truncation. Added tokens typed in the text become their ids.
  std::vector<int32_t> encode(std::string_view text) const;
  // Byte-level spellings joined and turned back into bytes; added tokens as their text.
  std::string decode(const std::vector<int32_t>& ids) const;

  int32_t endoftext_id() const { return endoftext_id_; }  // 151643: the padding id
  int32_t im_start_id() const { return im_start_id_; }    // 151644
  int32_t im_end_id() const { return im_end_id_; }        // 151645
  // The id of a vocabulary spelling ("Ġcat") or an added token ("<think>"), or -1.
  int32_t token_id(std::string_view token) const;
  const std::vector<AddedToken>& added_tokens() const { return added_.tokens(); }
  int64_t n_merges() const { return bpe_->n_merges(); }
  const std::string& source() const { return source_; }

 private:
  QwenTokenizer() = default;
  void finish();
  static QwenTokenizer from_vocab_and_merges(const std::string& folder);

  std::string source_;
  std::unique_ptr<ByteLevelBpe> bpe_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  AddedTokens added_;
  std::unordered_map<int32_t, std::string> spelling_of_id_;  // for decode
  bool nfc_ = true;
  int32_t endoftext_id_ = -1, im_start_id_ = -1, im_end_id_ = -1;
};

}  // namespace wick::bpe
