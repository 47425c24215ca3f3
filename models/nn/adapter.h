// The common base of wick's adapters (LoRALinear, DoRALinear, LoRAConv2d) and their options: a
// wrapper around one frozen layer that adds a trainable low-rank update and can be merged into it.
//
//   for (auto& [path, adapter] : nn::find_adapters(*model)) {       // models/nn/adapters.h
//     Tensor& up = adapter->up_weight();                            // [out, r] or [out, r, 1, 1]
//     adapter->merge();                                             // W += delta_weight (in place)
//   }
//
// Every adapter keeps its base's parameter names (weight, bias) and adds lora_down.weight and
// lora_up.weight (and DoRA's magnitude) under the same module path. Adapter tensors are f32.
#pragma once

#include <cstdint>

#include "engine/module.h"

namespace wick::nn {

// Where DoRA's magnitude lives (docs/models.md "Adapters").
enum class DoraAxis {
  Input,   // dora_scale [1, in]: one per input column, the norm taken over the output dimension
           // (kohya / LyCORIS / ComfyUI `.dora_scale`)
  Output,  // magnitude [out]: one per output row, the norm taken over the input dimension
           // (PEFT / diffusers `lora_magnitude_vector`)
};

struct AdapterOptions {
  int64_t rank = 16;
  double alpha = 16.0;     // scale = alpha / rank
  double dropout = 0.0;    // on the adapter's input; numbers from the engine's RNG cursor (rng_state.h)
  DoraAxis dora_axis = DoraAxis::Input;  // DoRA only
};

class Adapter : public Module {
 public:
  explicit Adapter(AdapterOptions options) : options_(options) {}

  double scale() const { return options_.alpha / static_cast<double>(options_.rank); }
  const AdapterOptions& options() const { return options_; }
  // Folds the adapter into the base weight in place (forward then runs the base alone); unmerge
  // undoes it. Both are no-ops when already in that state. In 16-bit weights merge rounds, so
  // unmerge restores W only up to that rounding (DoRA keeps a copy and restores it exactly).
  virtual void merge() = 0;
  virtual void unmerge() = 0;
  bool merged() const { return merged_; }

  // The wrapped layer (Linear or Conv2d) and the low-rank factors, f32 slots.
  virtual Module& base_module() = 0;
  virtual Tensor& down_weight() = 0;  // [r, in] or [r, in, kh, kw]
  virtual Tensor& up_weight() = 0;    // [out, r] or [out, r, 1, 1]
  // scale · up ⋅ down in the base weight's layout ([out, in] or [out, in, kh, kw]) in `dtype`;
  // recorded for backward when the factors require grad.
  virtual Tensor delta_weight(DType dtype) const = 0;

 protected:
  AdapterOptions options_;
  bool merged_ = false;
};

}  // namespace wick::nn
