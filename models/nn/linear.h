// Linear layer: y = x W^T + b, W [out, in], b [out] (torch.nn.Linear's layout and initialization).
//
//   auto fc = std::make_shared<nn::Linear>(784, 128);             // f32, trainable, with bias
//   Tensor y = fc->forward(x);                                    // x [..., 784] -> [..., 128]
//   auto frozen = std::make_shared<nn::Linear>(3072, 3072, nn::LinearOptions{.dtype = DType::BF16, .trainable = false});
//   frozen->quantize_float8(Float8Scaling::PerRow);               // weight: u8 e4m3 codes + weight_scale
//
// Float8 storage (a frozen base, docs/models.md "Float8 base"): the `weight` slot holds U8 codes
// [out, in] (the bytes of torch.float8_e4m3fn) and `weight_scale` their f32 scales ([out] per row,
// one value per tensor); forward and backward dequantize to the input's dtype on the fly
// (autograd::float8_linear). LoRA / DoRA adapters wrap such a Linear as any other.
#pragma once

#include "engine/module.h"
#include "runtime/ops/float8.h"

namespace wick::nn {

struct LinearOptions {
  bool bias = true;
  DType dtype = DType::F32;
  Device device = Device::cpu();
  bool trainable = true;
  // false: the parameters are allocated but not initialized (their values come from a weights file
  // loaded right after; saves the random initialization of billions of parameters).
  bool initialize = true;
};

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, LinearOptions options = {});
  std::string type_name() const override { return is_float8() ? "Linear(float8)" : "Linear"; }
  Tensor forward(const Tensor& x) override;

  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }
  bool has_bias() const { return bias_.defined(); }

  // Replaces the weight by its float8 codes and scales (runtime/ops/float8.h quantize_float8) on
  // its device, and registers `weight_scale`. The weight must be frozen and floating; a no-op for a
  // float8 Linear.
  void quantize_float8(Float8Scaling scaling);
  // Prepares the slots for a float8 file's tensors, loaded next (models/weights/float8_weights.h):
  // weight U8 [out, in] (uninitialized) and weight_scale f32 of `scale_shape` (1 value or `out`),
  // filled with ones (a file without scales has scale 1), on `device`.
  void expect_float8(const Shape& scale_shape, Device device);
  bool is_float8() const { return weight_scale_.defined(); }
  // The weight as a dense [out, in] tensor in `dtype`, detached: dequantized for float8, a cast
  // (or the weight itself) otherwise.
  Tensor dense_weight(DType dtype) const;

  Tensor weight_;        // [out, in]; U8 codes when float8
  Tensor bias_;          // [out] or undefined
  Tensor weight_scale_;  // float8 only: f32 [out] or one value

 private:
  int64_t in_features_, out_features_;
};

}  // namespace wick::nn
