// wick's hashed word encoder: a frozen "text encoder" with no trained weights, used by the
// quickstart dataset (docs/dataset.md "The quickstart dataset").
//
//   HashedTextEncoder encoder;                       // L = 8 tokens, D = 64
//   TextEncoding e = encoder.encode({"Ankle boot", "Bag"});
//   // e.embeds f32 [2, 8, 64], e.mask u8 [2, 8], e.pooled f32 [2, 64]
//
// Words: ASCII-lowercased caption split at bytes that are not ASCII letters or digits (bytes >= 0x80
// are kept inside words). Word w -> vector v with v[i] = stream_normal(derive_stream(fnv1a64(w), 0, 0,
// RngPurpose::Init), i) / sqrt(D). Token t = word t (words past L dropped); padding is zero with
// mask 0; pooled = mean of the real tokens (zero for an empty caption). Deterministic everywhere.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace wick {

struct TextEncoding {
  Tensor embeds;  // f32 [n, L, D]
  Tensor mask;    // u8 [n, L]
  Tensor pooled;  // f32 [n, D]
};

class HashedTextEncoder {
 public:
  static constexpr const char* name = "wick-hashed-words-v1";
  explicit HashedTextEncoder(int64_t max_tokens = 8, int64_t dim = 64);

  int64_t max_tokens() const { return max_tokens_; }
  int64_t dim() const { return dim_; }
  TextEncoding encode(const std::vector<std::string>& captions) const;
  // The words of a caption, as the encoder sees them (before truncation to max_tokens).
  static std::vector<std::string> words(const std::string& caption);
  // The fixed vector of one word (dim floats).
  std::vector<float> word_vector(const std::string& word) const;

 private:
  int64_t max_tokens_, dim_;
};

// FNV-1a, 64-bit, over the bytes of text.
uint64_t fnv1a64(const std::string& text);

}  // namespace wick
