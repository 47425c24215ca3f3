// A SentencePiece Unigram model's segmentation, as the Rust `tokenizers` library (transformers' fast tokenizers,
// which diffusers' Flux and SD3 pipelines run) does it: the best-scoring split of each word into pieces.
//
//   UnigramModel model(pieces, /*unk_id=*/2);             // pieces: {text, score} in id order, from spiece.model
//   std::vector<int32_t> ids = model.encode("▁a▁cat");    // normalised text, words split at "▁": {ids of ▁a, ▁cat}
//
// Why not libsentencepiece's own Viterbi: it sums scores in float over the whole text, so paths whose scores are
// equal in exact arithmetic ("0 . 00 00 0 1" vs "0 . 0 00 00 1", "ww w" vs "w ww") are decided by rounding,
// which differs between builds (Debian's 0.1.97 and the 0.2.x wheels disagree on ~2% of real captions).
// `tokenizers` sums in double, word by word, and keeps the first-found path on a tie; this class does the same:
//   * words: the text is split before every "▁" (U+2581) and at every Unicode White_Space character (dropped);
//     a word that does not start with "▁" gets one (the Metaspace pre-tokenizer, prepend "always", split);
//   * every piece of the model, control pieces included, can match (as in `tokenizers`' trie);
//   * per word, best[end] = max over pieces p = text[start, end) of best[start] + score(p), in double, start
//     ascending, a later candidate replacing an earlier one only when strictly greater;
//   * a character that no piece starts with gets the unknown score min(score) - 10; adjacent unknown
//     characters fuse into one unknown token, which becomes its bytes' <0xXX> pieces with byte fallback when the
//     model has each of them, and the unknown id otherwise.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace wick::t5 {

struct UnigramPiece {
  std::string text;
  float score = 0;
};

class UnigramModel {
 public:
  // `pieces` in id order; `unk_id` indexes them. `byte_fallback`: replace unknown tokens with byte pieces.
  UnigramModel(const std::vector<UnigramPiece>& pieces, int32_t unk_id, bool byte_fallback = false);

  // The ids of normalised UTF-8 `text` (whitespace already "▁"), word by word as described above.
  std::vector<int32_t> encode(std::string_view text) const;
  // The ids of one word (no splitting).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  int64_t size() const { return static_cast<int64_t>(scores_.size()); }
  int64_t n_trie_nodes() const { return static_cast<int64_t>(node_piece_.size()); }

 private:
  void build_trie(const std::vector<UnigramPiece>& pieces);
  // The trie node reached from `node` by `byte`, or -1.
  int32_t child(int32_t node, uint8_t byte) const;
  void append_unknown(std::string_view token, std::vector<int32_t>& out) const;

  std::vector<double> scores_;
  // The trie of piece texts, bytewise: node k's children are edge_byte_ / edge_child_[edge_begin_[k],
  // edge_begin_[k + 1]), sorted by byte; node 0 is the root.
  std::vector<uint32_t> edge_begin_;
  std::vector<uint8_t> edge_byte_;
  std::vector<int32_t> edge_child_;
  std::vector<int32_t> node_piece_;  // the piece id a node spells, or -1
  int32_t unk_id_;
  double unk_score_;
  std::vector<int32_t> byte_ids_;  // with byte fallback: the id of <0xXX> for each byte (-1: none); else empty
};

}  // namespace wick::t5
