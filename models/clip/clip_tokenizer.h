// The CLIP byte-level BPE tokenizer (CLIP-L, OpenCLIP bigG; SD1.x, SDXL, SD3, Flux), token for token
// equal to transformers' CLIPTokenizer on the same vocabulary. See docs/text_encoders.md.
//
//   ClipTokenizer clip_l = ClipTokenizer::from_folder("sdxl/tokenizer");      // vocab.json + merges.txt
//   ClipTokenizer big_g = ClipTokenizer::from_folder("sdxl/tokenizer_2");     // pad "!" -> id 0
//   ClipTokenizer offline = ClipTokenizer::from_open_clip_bpe("bpe_simple_vocab_16e6.txt.gz",
//                                                             {.pad_token = "!"});
//   TokenWindow w = clip_l.encode_window("a photo of a cat");  // 49406 320 1125 539 320 2368 49407 49407...
//   std::vector<int32_t> ids = clip_l.encode("a photo of a cat");  // 320 1125 539 320 2368 (no BOS/EOS)
//   TokenBatch batch = big_g.encode_batch(captions);            // [n, 77] ids and mask, row-major
//
// Thread safety: encoding is const and may run on many threads at once (the BPE cache has a lock).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace wick::clip {

// Whose text handling to reproduce. The vocabulary and the BPE are the same in both.
enum class Reference {
  // transformers' CLIPTokenizer (what diffusers runs): NFC, whitespace runs -> ' ', lowercase; the
  // special tokens typed in a caption become their ids (see ClipTokenizer::encode).
  Transformers,
  // open_clip's SimpleTokenizer with only the NFC step of ftfy.fix_text: NFC, html.unescape twice,
  // Python whitespace split, Python lower(), a case-insensitive pattern, typed "<start_of_text>" /
  // "<end_of_text>" as their ids.
  // Equal to open_clip wherever ftfy.fix_text leaves the caption unchanged; docs list the rest.
  OpenClip,
};

struct ClipTokenizerOptions {
  // Padding token, as written in a tokenizer_config.json: "<|endoftext|>" (id 49407: CLIP-L) or "!"
  // (id 0: bigG, SDXL's tokenizer_2). Unset: the folder's files, else "<|endoftext|>". With
  // Reference::Transformers a pad token other than BOS/EOS is also a special token in captions
  // (transformers: "wow!!!" -> wow, 0, 0, 0).
  std::optional<std::string> pad_token;
  // Window length (BOS + content + EOS + padding). Unset: tokenizer_config.json's
  // model_max_length when it is below 1e6, else 77.
  std::optional<int64_t> context_length;
  Reference reference = Reference::Transformers;
};

// One caption's window: BOS, up to context_length - 2 content tokens, EOS, then padding.
struct TokenWindow {
  std::vector<int32_t> ids;             // [context_length]
  std::vector<int32_t> attention_mask;  // [context_length]: 1 on BOS..EOS, 0 on padding
  int64_t eos_position = 0;             // index of the appended EOS (= tokens kept + 1)
  // Where transformers and open_clip pool the text features: the first EOS id in `ids` (earlier than
  // eos_position only when the caption typed the EOS token itself).
  int64_t pool_position = 0;
  int64_t n_content_tokens = 0;  // content tokens before truncation
  bool truncated() const { return eos_position < n_content_tokens + 1; }
};

// Windows of many captions, row-major [n, context_length].
struct TokenBatch {
  int64_t n = 0, context_length = 0;
  std::vector<int32_t> ids, attention_mask;
  std::vector<int64_t> eos_positions, pool_positions;  // [n]
};

// A special token: matched in the caption before (normalized = false) or after (true) cleaning.
struct SpecialToken {
  std::string content;
  int32_t id = 0;
  bool normalized = false;
};

class ClipTokenizer {
 public:
  // open_clip's bpe_simple_vocab_16e6.txt.gz (gzip; line 0 a "#version" header, then merges): the
  // 49,408-entry vocabulary built as open_clip does (256 byte symbols, the same with </w>, the first
  // 48,894 merges, then "<|startoftext|>" 49406 and "<|endoftext|>" 49407; HF's spellings). Throws
  // WickError (Data) naming the file when it is missing, not gzip, or too short.
  static ClipTokenizer from_open_clip_bpe(const std::string& gz_path, const ClipTokenizerOptions& options = {});
  // A model folder's tokenizer (HF layout): folder/vocab.json, folder/merges.txt, and when present
  // tokenizer_config.json and special_tokens_map.json (BOS/EOS/UNK/PAD, their "normalized" flags and
  // model_max_length, read as transformers 5 reads them). `options` override the files. Throws
  // WickError (Data) naming the file for a missing or corrupt file, a merge whose parts or result
  // are not in the vocabulary, or a special token missing from the vocabulary.
  static ClipTokenizer from_folder(const std::string& folder, const ClipTokenizerOptions& options = {});

  // Content token ids of one UTF-8 caption: no BOS/EOS, no truncation. Ill-formed UTF-8 is read as
  // U+FFFD. Special tokens typed in the caption become their ids: with Reference::Transformers the
  // exact (case-sensitive) text of BOS, EOS and a distinct pad token, matched before cleaning, or
  // after it for those the folder marks "normalized" (SDXL's tokenizer_2: "<|ENDOFTEXT|>" too).
  std::vector<int32_t> encode(std::string_view text) const;
  // BOS + the first context_length - 2 content tokens + EOS, padded with pad_id().
  TokenWindow encode_window(std::string_view text) const;
  TokenBatch encode_batch(const std::vector<std::string>& texts) const;
  // Token strings joined, bytes decoded, "</w>" -> ' ', stripped; special and pad ids are skipped.
  std::string decode(const std::vector<int32_t>& ids) const;

  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  int32_t pad_id() const { return pad_id_; }
  int64_t context_length() const { return context_length_; }
  int64_t vocab_size() const { return static_cast<int64_t>(id_to_token_.size()); }
  int64_t n_merges() const { return static_cast<int64_t>(merges_.size()); }
  Reference reference() const { return reference_; }
  const std::vector<SpecialToken>& special_tokens() const { return special_tokens_; }
  // Id of a vocabulary entry (byte-level spelling, e.g. "cat</w>"), or -1.
  int32_t token_id(const std::string& token) const;
  const std::string& token(int32_t id) const;

 private:
  struct Merge {
    int32_t rank, merged_id;
  };
  struct BpeCache {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>> words;
  };

  ClipTokenizer() = default;
  // vocab: token -> id; merges: pairs of token strings in rank order. `source` names the files.
  void build(std::unordered_map<std::string, int32_t> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
             const std::string& source);
  void finish(const std::string& source, const std::string& bos, const std::string& eos, const std::string& pad,
              const std::vector<SpecialToken>& flagged, int64_t context_length);
  void append_word(std::string_view word_utf8, std::vector<int32_t>& out) const;
  void append_text(std::u32string_view text, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> token_to_id_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> rank, result
  int32_t byte_id_[256] = {}, byte_end_id_[256] = {};  // byte symbol without / with </w>
  int32_t bos_id_ = 0, eos_id_ = 0, pad_id_ = 0;
  int64_t context_length_ = 77;
  Reference reference_ = Reference::Transformers;
  std::vector<SpecialToken> special_tokens_;
  std::vector<std::u32string> raw_specials_, normalized_specials_;  // matched before / after cleaning
  std::vector<int32_t> raw_special_ids_, normalized_special_ids_;
  std::unique_ptr<BpeCache> cache_ = std::make_unique<BpeCache>();
};

}  // namespace wick::clip
