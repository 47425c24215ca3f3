// T5 v1.1 encoder sizes (T5-XXL by default) and umT5's (Wan's text encoder: the same encoder with a
// relative-attention-bias table in every block), and reading them from a checkpoint's tensor shapes in
// transformers' T5EncoderModel / UMT5EncoderModel names.
//
//   T5Config xxl;                                                     // 4096 wide, 24 blocks, 64 heads of 64
//   WeightSource source = WeightSource::open("FLUX.1-dev", "text_encoder_2");
//   T5Config c = t5::config_from_shapes(mapped_shapes(source, t5::detect_weight_format(source)));
//   std::map<std::string, Shape> names = t5::parameter_shapes(c);   // the model's parameters
//
// The relative-attention max distance and the norm epsilon are not in the weights: they keep T5's values
// (128, 1e-6), which every T5 v1.1 / Flux / SD3 checkpoint uses.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/shape.h"

namespace wick::t5 {

// Defaults are T5-XXL v1.1's (google/t5-v1_1-xxl, the encoder of Flux and SD3).
struct T5Config {
  int64_t vocab_size = 32128;  // embedding rows (32000 pieces + 100 sentinels + 28 unused)
  int64_t d_model = 4096;
  int64_t d_kv = 64;           // head width
  int64_t n_heads = 64;
  int64_t d_ff = 10240;        // gated-GELU FFN width
  int64_t n_layers = 24;
  int64_t n_buckets = 32;      // relative-position buckets (both directions)
  int64_t max_distance = 128;  // relative distances at or past this share the last bucket
  double eps = 1e-6;           // T5LayerNorm's variance epsilon
  // umT5 (google/umt5-xxl, Wan 2.x): every block has its own relative_attention_bias table; T5 v1.1 computes the
  // bias once from block 0's and reuses it.
  bool bias_per_block = false;
  // Parameter and compute dtype: F32 or BF16. F16 is refused (validate): T5-XXL's activations overflow it.
  DType dtype = DType::BF16;
  Device device = Device::cpu();

  int64_t inner_dim() const { return n_heads * d_kv; }
};

// Throws WickError (Config) naming the field when the sizes do not make a T5 encoder (non-positive sizes,
// odd bucket count, max_distance not above the exact buckets, a dtype other than F32 / BF16).
void validate(const T5Config& config);

// Every size from tensor shapes in transformers' names, no prefix (mapped_shapes of any T5 format gives
// these): vocab_size and d_model from shared.weight, n_heads and n_buckets from block 0's
// relative_attention_bias [buckets, heads], d_kv from q's rows / heads, d_ff from wi_0, n_layers from the
// encoder.block.N indices, bias_per_block (umT5) from a relative_attention_bias in block 1. Then every
// parameter's shape is checked. Missing or contradictory shapes throw WickError (Data) naming the tensor (a
// non-gated FFN `wi`, T5 v1.0, is named as unsupported); dtype and device keep their defaults.
T5Config config_from_shapes(const std::map<std::string, Shape>& shapes);

// The parameters a T5Encoder with `config` has, by name, with their shapes.
std::map<std::string, Shape> parameter_shapes(const T5Config& config);

}  // namespace wick::t5
