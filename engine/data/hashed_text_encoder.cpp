#include "engine/data/hashed_text_encoder.h"

#include <cmath>
#include <cstring>

#include "runtime/philox.h"

namespace wick {

uint64_t fnv1a64(const std::string& text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char byte : text) {
    hash ^= byte;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

HashedTextEncoder::HashedTextEncoder(int64_t max_tokens, int64_t dim) : max_tokens_(max_tokens), dim_(dim) {
  WICK_CHECK(max_tokens > 0 && dim > 0, "HashedTextEncoder: max_tokens and dim must be > 0, got ", max_tokens, ", ",
             dim);
}

std::vector<std::string> HashedTextEncoder::words(const std::string& caption) {
  std::vector<std::string> out;
  std::string word;
  for (unsigned char byte : caption) {
    bool inside = (byte >= 'a' && byte <= 'z') || (byte >= 'A' && byte <= 'Z') || (byte >= '0' && byte <= '9') ||
                  byte >= 0x80;
    if (inside) {
      word.push_back(static_cast<char>(byte >= 'A' && byte <= 'Z' ? byte - 'A' + 'a' : byte));
    } else if (!word.empty()) {
      out.push_back(word);
      word.clear();
    }
  }
  if (!word.empty()) out.push_back(word);
  return out;
}

std::vector<float> HashedTextEncoder::word_vector(const std::string& word) const {
  RngStream stream = derive_stream(fnv1a64(word), 0, 0, RngPurpose::Init);
  float scale = 1.0f / std::sqrt(static_cast<float>(dim_));
  std::vector<float> out(static_cast<size_t>(dim_));
  for (int64_t i = 0; i < dim_; ++i) out[static_cast<size_t>(i)] = stream_normal(stream, static_cast<uint64_t>(i)) * scale;
  return out;
}

TextEncoding HashedTextEncoder::encode(const std::vector<std::string>& captions) const {
  int64_t n = static_cast<int64_t>(captions.size()), L = max_tokens_, D = dim_;
  TextEncoding out;
  out.embeds = Tensor::empty({n, L, D}, DType::F32);
  out.mask = Tensor::empty({n, L}, DType::U8);
  out.pooled = Tensor::empty({n, D}, DType::F32);
  float* embeds = out.embeds.data_as<float>();
  uint8_t* mask = static_cast<uint8_t*>(out.mask.data());
  float* pooled = out.pooled.data_as<float>();
  std::memset(embeds, 0, static_cast<size_t>(n * L * D) * sizeof(float));
  std::memset(mask, 0, static_cast<size_t>(n * L));
  std::memset(pooled, 0, static_cast<size_t>(n * D) * sizeof(float));
  for (int64_t s = 0; s < n; ++s) {
    std::vector<std::string> tokens = words(captions[static_cast<size_t>(s)]);
    int64_t used = std::min<int64_t>(L, static_cast<int64_t>(tokens.size()));
    for (int64_t t = 0; t < used; ++t) {
      std::vector<float> v = word_vector(tokens[static_cast<size_t>(t)]);
      std::memcpy(embeds + (s * L + t) * D, v.data(), static_cast<size_t>(D) * sizeof(float));
      mask[s * L + t] = 1;
      for (int64_t i = 0; i < D; ++i) pooled[s * D + i] += v[static_cast<size_t>(i)];
    }
    if (used > 0)
      for (int64_t i = 0; i < D; ++i) pooled[s * D + i] /= static_cast<float>(used);
  }
  return out;
}

}  // namespace wick
