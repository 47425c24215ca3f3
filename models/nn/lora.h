// LoRA and DoRA adapters on a frozen Linear: wrappers that add a trainable low-rank update.
//
//   auto lora = std::make_shared<nn::LoRALinear>(base, nn::AdapterOptions{.rank = 16, .alpha = 16.0});
//   replace_module(*model, "blocks.3.attn.qkv", lora);     // or apply_adapters (models/nn/adapters.h)
//   y = lora->forward(x);        // base(x) + (alpha / rank) · up(down(dropout(x)))
//   lora->merge();               // W += (alpha / rank) · up @ down, in place; forward is then base(x)
//
// Parameter names (under the wrapped module's own path, so the base keeps its names):
//   weight, bias            the base layer's tensors, frozen
//   lora_down.weight [r, in] (fan-in uniform init), lora_up.weight [out, r] (zeros)
//   dora_scale [1, in]       DoRA, DoraAxis::Input: one magnitude per input column (kohya/ComfyUI)
//   magnitude [out]          DoRA, DoraAxis::Output: one magnitude per output row (PEFT/diffusers)
// Adapter weights are f32 and trainable; the path runs in the input's dtype.
//
// DoRA, with Wc = W + s·up@down and the norm ||Wc|| treated as a constant in backward (detached, as
// the DoRA paper and PEFT do); the magnitude starts at ||W|| so a fresh DoRA is the base layer.
//   Input axis (kohya/LyCORIS): W' = Wc · dora_scale / ||Wc||_column (norm over the output dim);
//     y = x W'^T + b. No dropout (refused).
//   Output axis (PEFT tuners/lora/dora.py): y = (m / ||Wc||_row) ⊙ (x Wc^T) + b, the bias not scaled.
//     With dropout in training PEFT applies the DoRA part to the dropped input only:
//     y = base(x) + x_d (W' - W)^T, x_d = dropout(x), W' = (m / ||Wc||_row) ⊙ Wc; so do we.
//     Each output row's norm involves only that row of up, so on a fused layer (Flux's qkv,
//     linear1) the output-axis DoRA equals PEFT's separate q/k/v DoRAs exactly when their
//     down (lora_A) matrices are equal and up (lora_B) is the row-wise concatenation of theirs.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/module.h"
#include "models/nn/adapter.h"
#include "models/nn/linear.h"

namespace wick::nn {

class LoRALinear : public Adapter {
 public:
  LoRALinear(std::shared_ptr<Linear> base, AdapterOptions options);
  std::string type_name() const override { return "LoRALinear"; }
  Tensor forward(const Tensor& x) override;

  // W += scale · up @ down (in W's dtype, in place); forward then skips the adapter path.
  void merge() override;
  void unmerge() override;
  Linear& base() { return *base_; }
  Module& base_module() override { return *base_; }
  Tensor& down_weight() override { return down_->weight_; }
  Tensor& up_weight() override { return up_->weight_; }
  // scale · up @ down as a [out, in] tensor in `dtype`.
  Tensor delta_weight(DType dtype) const override;

 protected:
  std::shared_ptr<Linear> base_;
  std::shared_ptr<Linear> down_, up_;
};

class DoRALinear : public LoRALinear {
 public:
  // options.dora_axis picks the orientation; dropout only with DoraAxis::Output.
  DoRALinear(std::shared_ptr<Linear> base, AdapterOptions options);
  std::string type_name() const override { return "DoRALinear"; }
  Tensor forward(const Tensor& x) override;
  DoraAxis axis() const { return options_.dora_axis; }
  // The effective weight W' [out, in] in `dtype` (the formulas above; computed in f32, or f64 for
  // f64 on the output axis).
  Tensor effective_weight(DType dtype) const;
  // The magnitude slot of this axis: dora_scale_ [1, in] or magnitude_ [out].
  Tensor& magnitude() { return options_.dora_axis == DoraAxis::Input ? dora_scale_ : magnitude_; }
  // W := W' (keeping a copy of W so unmerge restores it exactly).
  void merge() override;
  void unmerge() override;

  Tensor dora_scale_;  // [1, in], DoraAxis::Input only
  Tensor magnitude_;   // [out], DoraAxis::Output only

 private:
  Tensor original_weight_;
};

}  // namespace wick::nn
