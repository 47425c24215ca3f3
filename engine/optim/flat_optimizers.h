// Fused optimizer steps over flat f32 buffers (a parameter's contiguous f32 master copy and its
// gradient), on the CPU (OpenMP) or CUDA, on the current stream of the tensors' device.
//
//   AdamWState state = AdamWState::zeros(p.numel(), use_8bit_state(p.numel()), p.device());
//   AdamWHyper hyper{.lr = 1e-4f};
//   for (int64_t t = 1; ...; ++t) { hyper.step = t; int64_t skipped = adamw_step(p, g, state, hyper); }
//   NamedTensors saved = adamw_state_tensors(state);   // "m_codes", "v_codes", "absmax_m", "absmax_v"
//   load_adamw_state(state, saved);                    // copies back, validating names/shapes/dtypes
//
// Inputs are wick::Tensor views: p, g (and m, v, momentum) contiguous f32 of n elements, codes u8
// [n], absmax f32 [ceil(n/256)], all on one device. Rules (docs/optimizers.md): a gradient element
// that is NaN/Inf (or whose updated state overflows) leaves its parameter unchanged and zeroes its
// state; each step returns how many such elements it skipped.
// Counting: with `nonfinite_count` undefined the count is returned (on CUDA this synchronizes the
// stream); with an i64 0-d tensor on the same device it is added there, nothing synchronizes, and
// the function returns -1.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor.h"

namespace wick {

inline constexpr int64_t quantization_block_size = 256;
inline constexpr int64_t min_8bit_state_elements = 4096;

// True when a parameter of this many elements (the whole parameter, not a shard) keeps 8-bit
// Adam state; smaller parameters keep 32-bit m and v (bitsandbytes' min_8bit_size rule).
bool use_8bit_state(int64_t n_elements_of_whole_parameter);
// ceil(n / 256): quantization blocks of an n-element 8-bit state (the last may be partial).
int64_t n_quantization_blocks(int64_t n);

// Adam/AdamW hyperparameters; step is t, 1-based (bias corrections use it).
struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 1e-2f;
  int64_t step = 1;
};

// PyTorch SGD hyperparameters; step == 1 initializes the momentum buffer with the gradient.
struct SgdHyper {
  float lr = 1e-2f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  int64_t step = 1;
};

// torch.optim.SGD(foreach=False) step. momentum_buffer: f32 [n], may be undefined when
// momentum == 0. Nesterov needs momentum > 0 and dampening == 0 (as PyTorch).
int64_t sgd_step(const Tensor& p, const Tensor& g, const Tensor& momentum_buffer, const SgdHyper& hyper,
                 const Tensor& nonfinite_count = Tensor());

// torch.optim.AdamW(foreach=False) step with 32-bit state: decay p *= 1 - lr*wd first, then the
// bias-corrected Adam update with eps added to sqrt(v_hat). m, v: f32 [n].
int64_t adamw_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamWHyper& hyper,
                   const Tensor& nonfinite_count = Tensor());

// bitsandbytes 8-bit blockwise AdamW step (its CUDA kernel's order: dequantize, update m and v in
// f32, new absmax per 256-block, p update with eps·sqrt(1-beta2^t), decay after the step,
// requantize to the nearest code with the sign fix). m_codes, v_codes: u8 [n]; absmax_m,
// absmax_v: f32 [ceil(n/256)]. Zero codes and zero absmax are the initial state.
int64_t adamw8bit_step(const Tensor& p, const Tensor& g, const Tensor& m_codes, const Tensor& v_codes,
                       const Tensor& absmax_m, const Tensor& absmax_v, const AdamWHyper& hyper,
                       const Tensor& nonfinite_count = Tensor());

// ---- state ----
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// AdamW state of one flat parameter: 32-bit ("m", "v") or 8-bit ("m_codes", "v_codes",
// "absmax_m", "absmax_v"). Bytes per parameter: 8 (32-bit), 2 + 8/256 = 2.03125 (8-bit).
struct AdamWState {
  bool eight_bit = false;
  Tensor m, v;                // f32 [n]            (32-bit)
  Tensor m_codes, v_codes;    // u8 [n]             (8-bit)
  Tensor absmax_m, absmax_v;  // f32 [ceil(n/256)]  (8-bit)

  // Zero state for n elements on `device` (8-bit: codes 0 and absmax 0, which dequantize to 0).
  static AdamWState zeros(int64_t n, bool eight_bit, Device device);
  int64_t numel() const;
  int64_t nbytes() const;
};

// Dispatches to adamw8bit_step or the 32-bit adamw_step by state.eight_bit.
int64_t adamw_step(const Tensor& p, const Tensor& g, AdamWState& state, const AdamWHyper& hyper,
                   const Tensor& nonfinite_count = Tensor());

// The state as named tensors sharing its memory (save them elsewhere; copy if they must outlive
// later steps unchanged).
NamedTensors adamw_state_tensors(const AdamWState& state);
// Copies named tensors (any device) into `state`; the names, shapes and dtypes must be exactly
// those adamw_state_tensors gives for this state, else throws naming the mismatch.
void load_adamw_state(AdamWState& state, const NamedTensors& tensors);

// SGD momentum state: "momentum" f32 [n] (undefined when momentum == 0: no tensors).
NamedTensors sgd_state_tensors(const Tensor& momentum_buffer);
void load_sgd_state(const Tensor& momentum_buffer, const NamedTensors& tensors);

}  // namespace wick
