// LoRA on a frozen Conv2d (kohya's LoCon layout, which SDXL LoRAs use on the UNet's 3×3 convs):
// a down conv with the base's kernel, stride, padding and dilation into r channels, then a 1×1 up conv.
//
//   auto lora = std::make_shared<nn::LoRAConv2d>(conv, nn::AdapterOptions{.rank = 8, .alpha = 8.0});
//   replace_module(*unet, "input_blocks.1.0.in_layers.2", lora);   // or apply_adapters
//   y = lora->forward(x);        // base(x) + (alpha / rank) · up(down(dropout(x)))
//   lora->merge();               // W += (alpha / rank) · (up ⋅ down) as [out, in, kh, kw]
//
// Parameter names (under the wrapped conv's path; kohya writes them as lora_unet_<path>.*):
//   weight [out, in, kh, kw], bias [out]   the base conv's tensors, frozen
//   lora_down.weight [r, in, kh, kw]        fan-in uniform init (as Conv2d: U(±1/sqrt(in·kh·kw)))
//   lora_up.weight [out, r, 1, 1]           zeros, so a fresh adapter is the base conv
// The update is a rank-r factorization of W viewed as [out, in·kh·kw]: rank <= min(out, in·kh·kw).
// Grouped convs (groups > 1) are refused. Adapter weights are f32; the path runs in x's dtype.
#pragma once

#include <memory>

#include "models/nn/adapter.h"
#include "models/nn/conv.h"

namespace wick::nn {

class LoRAConv2d : public Adapter {
 public:
  LoRAConv2d(std::shared_ptr<Conv2d> base, AdapterOptions options);
  std::string type_name() const override { return "LoRAConv2d"; }
  // x [N, in, H, W] -> [N, out, H', W'] (the base conv's output shape), in x's dtype.
  Tensor forward(const Tensor& x) override;

  // W += scale · up ⋅ down (in W's dtype, in place); forward then skips the adapter path.
  void merge() override;
  void unmerge() override;
  Conv2d& base() { return *base_; }
  Module& base_module() override { return *base_; }
  Tensor& down_weight() override { return down_->weight_; }
  Tensor& up_weight() override { return up_->weight_; }
  // scale · up[out, r] @ down[r, in·kh·kw], reshaped to [out, in, kh, kw], in `dtype`.
  Tensor delta_weight(DType dtype) const override;

 private:
  std::shared_ptr<Conv2d> base_;
  std::shared_ptr<Conv2d> down_, up_;
};

}  // namespace wick::nn
