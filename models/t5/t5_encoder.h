// The T5 v1.1 encoder (T5-XXL: Flux's and SD3's text encoder) with transformers' T5EncoderModel parameter names,
// so diffusers' text_encoder_3/ / text_encoder_2/ folders and ComfyUI's t5xxl_*.safetensors load as they are; and
// umT5 (Wan's umt5-xxl, UMT5EncoderModel: a relative-bias table per block, read from the weights) the same way.
//
//   auto encoder = t5::T5Encoder::load("FLUX.1-dev", {.dtype = DType::BF16});   // text_encoder_2/, frozen
//   t5::T5Tokenizer tokenizer = t5::T5Tokenizer::open("FLUX.1-dev");             // tokenizer_2/spiece.model
//   t5::T5Batch batch = tokenizer.encode_batch({"a photo of a cat"}, 512);
//   autograd::NoGradGuard no_grad;                                              // inference: no graph
//   Tensor context = encoder->forward(batch.ids);             // [1, 512, 4096] bf16; Flux passes no mask
//   Tensor masked = encoder->forward(batch.ids, batch.mask);  // padding keys not attended to
//
// Maths (transformers 5.24 modeling_t5.py): x = shared[ids]; per block x += o(attention(norm(x))) with
// softmax(q k^T + position_bias + mask) v, no 1/sqrt(d_kv) scaling, the bidirectional relative-position bias
// (n_buckets over distances up to max_distance) computed from block 0's table once and used by every block;
// then x += wo(GELU_tanh(wi_0 norm(x)) * wi_1 norm(x)); output final_layer_norm(x). Norms are T5LayerNorm
// (RMS: no mean, no bias, eps 1e-6). Masked keys get the lowest f32 instead of their bias, as transformers'
// SDPA path: a row whose keys are all masked attends uniformly, not to nothing.
// Precision: config.dtype is F32 or BF16 (F16 is refused: T5-XXL overflows float16; a float16 file loads into
// either by conversion). The residual stream and the norms are f32 in both; in BF16 the matmuls and attention
// take bf16 operands with f32 accumulation and each sub-layer's output is rounded to bf16 before the f32 residual
// add (transformers' bf16 model keeps the residual stream itself in bf16; wick's bf16 output is as close to the
// f32 one as transformers' or closer: numbers in docs/text_encoders.md). The output has config.dtype.
#pragma once

#include <memory>
#include <string>

#include "engine/module.h"
#include "models/t5/t5_config.h"

namespace wick::t5 {

struct T5LoadOptions {
  DType dtype = DType::BF16;  // parameter and compute dtype: BF16 or F32
  Device device = Device::cpu();
};

class T5Encoder : public Module {
 public:
  // Checks the config (t5_config.h validate) and builds the layers with uninitialized, frozen parameters in
  // config.dtype on config.device (norm weights start at 1): the weights are meant to be loaded next.
  explicit T5Encoder(T5Config config);
  std::string type_name() const override { return "T5Encoder"; }

  // Reads the sizes from the weights and loads them (frozen; zero-copy when the file's dtype is options.dtype and
  // the device is the CPU). `path`: a safetensors file, a sharded folder with *.safetensors.index.json, or a
  // diffusers pipeline folder (its text_encoder_3/, else text_encoder_2/); names as t5_weights.h lists. Throws
  // WickError (Data) naming the file for a missing path, unknown naming, a missing or unexpected tensor or a
  // shape that does not fit, and WickError (Config) for options.dtype F16.
  static std::shared_ptr<T5Encoder> load(const std::string& path, const T5LoadOptions& options = {});

  // ids [B, L] I32/I64 token ids (< vocab_size), L >= 1, on any device; mask [B, L] (any dtype, nonzero = keep)
  // or undefined (every token attended, padding included) -> last_hidden_state [B, L, d_model] in config.dtype
  // on config.device. Differentiable in the parameters, but nothing is recorded for frozen parameters or under
  // autograd::NoGradGuard.
  Tensor forward(const Tensor& ids, const Tensor& mask);
  Tensor forward(const Tensor& ids) override { return forward(ids, Tensor()); }

  const T5Config& config() const { return config_; }

 private:
  T5Config config_;
};

}  // namespace wick::t5
