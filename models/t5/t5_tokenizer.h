// The T5 tokenizer: a SentencePiece Unigram model (`spiece.model`) with T5's sequence layout, giving the ids of
// transformers' fast T5Tokenizer (what diffusers' Flux and SD3 pipelines run).
//
//   T5Tokenizer tokenizer = T5Tokenizer::open("FLUX.1-dev");              // tokenizer_3/ or tokenizer_2/
//   std::vector<int32_t> pieces = tokenizer.pieces("a photo of a cat");   // SentencePiece ids, no EOS
//   T5Tokens one = tokenizer.encode("a photo of a cat", 256);            // pieces + EOS, padded with 0
//   T5Batch batch = tokenizer.encode_batch({"a cat", "a dog"}, 512);      // ids, mask [2, 512] I64
//   Tensor context = encoder->forward(batch.ids, batch.mask);            // models/t5/t5_encoder.h
//
// Layout (T5, as transformers and diffusers build it): ids = pieces + [EOS 1]; a sequence longer than
// max_length keeps its first max_length - 1 pieces, then EOS; shorter ones are padded with PAD 0 to max_length;
// mask = 1 on the pieces and the EOS, 0 on the padding. There is no BOS.
// The pieces, as transformers makes them: typed special tokens ("</s>", "<pad>", "<unk>", "<extra_id_k>") are
// their ids; the text between them is normalised by libsentencepiece (nmt_nfkc, whitespace, dummy prefix) and
// segmented word by word by UnigramModel (models/t5/unigram_model.h: transformers' tie rule, which Debian's
// libsentencepiece 0.1.97 does not share). tests/models/t5_tokenizer_test.cpp checks them against transformers on
// 3,293 captions; docs/text_encoders.md lists the one known difference (NFD-decomposed Hangul, kana and stacked
// combining marks, which transformers' normaliser leaves apart). The 100 sentinel tokens `<extra_id_k>` that
// transformers appends are produced only when typed; extra_id(k) gives their ids.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace wick::t5 {

struct T5Tokens {
  std::vector<int64_t> ids;   // [max_length]
  std::vector<int64_t> mask;  // [max_length], 1 for pieces and EOS, 0 for padding
};

struct T5Batch {
  Tensor ids;   // [B, max_length] I64 on the CPU
  Tensor mask;  // [B, max_length] I64 on the CPU
};

class T5Tokenizer {
 public:
  static constexpr int32_t kPadId = 0;
  static constexpr int32_t kEosId = 1;
  static constexpr int32_t kUnkId = 2;

  // `path`: a spiece.model file; a folder holding spiece.model; or a diffusers pipeline folder whose
  // tokenizer_3/ (SD3) or else tokenizer_2/ (Flux) holds it. WickError (Data) naming the path for a missing
  // file, a file libsentencepiece cannot read, or a model whose pad / EOS / unk ids are not T5's 0 / 1 / 2.
  static T5Tokenizer open(const std::string& path);

  // The ids of `text` (UTF-8), without EOS: transformers' fast T5Tokenizer's (see above). Thread-safe.
  std::vector<int32_t> pieces(const std::string& text) const;
  // T5's layout of `text` at max_length (>= 1): see the header comment.
  T5Tokens encode(const std::string& text, int64_t max_length) const;
  // encode() of every text, as [B, max_length] I64 tensors on the CPU (B >= 1).
  T5Batch encode_batch(const std::vector<std::string>& texts, int64_t max_length) const;

  // Pieces in the model (32000 for T5; the encoder's embedding has more rows: 32128).
  int64_t vocab_size() const;
  // The id transformers gives `<extra_id_k>` (0 <= k < n_extra): vocab_size + n_extra - 1 - k (T5-XXL: 32099 for
  // <extra_id_0>, 32000 for <extra_id_99>).
  int64_t extra_id(int64_t k, int64_t n_extra = 100) const;
  // The piece text of an id < vocab_size ("▁cat", "</s>").
  std::string piece(int32_t id) const;
  // The spiece.model file that was loaded.
  const std::string& path() const { return path_; }

 private:
  struct Processor;
  T5Tokenizer(std::shared_ptr<const Processor> processor, std::string path);

  std::shared_ptr<const Processor> processor_;  // shared by copies; const methods only
  std::string path_;
};

// T5's layout of already tokenized pieces (the rule encode() applies): pieces + EOS, truncated and padded to
// max_length (>= 1).
T5Tokens t5_layout(const std::vector<int32_t>& pieces, int64_t max_length);

}  // namespace wick::t5
