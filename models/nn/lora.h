// LoRA and DoRA adapters: wrappers around a frozen Linear that add a trainable low-rank update.
//
//   auto lora = std::make_shared<nn::LoRALinear>(base, /*rank=*/16, /*alpha=*/16.0);
//   replace_module(*model, "blocks.3.attn.qkv", lora);     // or apply_adapters (models/nn/adapters.h)
//   y = lora->forward(x);        // base(x) + (alpha / rank) · up(down(dropout(x)))
//   lora->merge();               // W += (alpha / rank) · up @ down, in place; forward is then base(x)
//
// Parameter names (under the wrapped module's own path, so the base keeps its names):
//   weight, bias            the base layer's tensors, frozen
//   lora_down.weight [r, in] (fan-in uniform init), lora_up.weight [out, r] (zeros)
//   dora_scale [1, in]       DoRA only: the magnitude, one per input column (kohya/ComfyUI layout)
// Adapter weights are f32 and trainable; the path runs in the input's dtype.
//
// DoRA (kohya/LyCORIS convention): Wc = W + s·up@down; W' = Wc · dora_scale / ||Wc||, the norm taken
// per input column over the output dimension and treated as a constant in backward (as the DoRA
// paper and PEFT do); dora_scale starts at ||W||. DoRA applies no dropout.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/module.h"
#include "models/nn/linear.h"
#include "runtime/philox.h"

namespace wick::nn {

struct AdapterOptions {
  int64_t rank = 16;
  double alpha = 16.0;
  double dropout = 0.0;  // LoRA only; numbers from the engine's RNG cursor (rng_state.h)
};

class LoRALinear : public Module {
 public:
  LoRALinear(std::shared_ptr<Linear> base, AdapterOptions options);
  std::string type_name() const override { return "LoRALinear"; }
  Tensor forward(const Tensor& x) override;

  double scale() const { return options_.alpha / static_cast<double>(options_.rank); }
  const AdapterOptions& options() const { return options_; }
  // W += scale · up @ down (in W's dtype, in place); forward then skips the adapter path.
  // In 16-bit weights merge rounds, so unmerge restores W only up to that rounding.
  virtual void merge();
  virtual void unmerge();
  bool merged() const { return merged_; }
  Linear& base() { return *base_; }
  Tensor& down_weight() { return down_->weight_; }
  Tensor& up_weight() { return up_->weight_; }

 protected:
  // scale · up @ down as a [out, in] tensor in `dtype` (recorded when adapters require grad).
  Tensor delta_weight(DType dtype) const;

  std::shared_ptr<Linear> base_;
  std::shared_ptr<Linear> down_, up_;
  AdapterOptions options_;
  bool merged_ = false;
};

class DoRALinear : public LoRALinear {
 public:
  DoRALinear(std::shared_ptr<Linear> base, AdapterOptions options);
  std::string type_name() const override { return "DoRALinear"; }
  Tensor forward(const Tensor& x) override;
  // The effective weight W' = (W + s·up@down) · dora_scale / ||W + s·up@down||_column.
  Tensor effective_weight(DType dtype) const;
  // W := W' (keeping a copy of W so unmerge restores it exactly).
  void merge() override;
  void unmerge() override;

  Tensor dora_scale_;  // [1, in]

 private:
  Tensor original_weight_;
};

}  // namespace wick::nn
