// AdamW / SGD state: allocation, the dispatching step, and named-tensor save/restore (in memory;
// writing the tensors to a file is the checkpoint layer's job).
#include <algorithm>

#include "engine/optim/flat_optimizers.h"
#include "runtime/ops/copy.h"

namespace wick {

namespace {

Tensor zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  copy_into(t, Tensor::scalar(0.0, dtype));
  return t;
}

std::string names_of(const NamedTensors& tensors) {
  std::string out;
  for (const auto& [name, tensor] : tensors) out += (out.empty() ? "" : ", ") + name;
  return out.empty() ? "(none)" : out;
}

// Copies tensors[name] into each of `expected`'s tensors, checking the set of names, the shapes
// and the dtypes.
void load_named(const char* op, const NamedTensors& expected, const NamedTensors& tensors) {
  WICK_CHECK(tensors.size() == expected.size(), op, ": expected tensors {", names_of(expected), "}, got {",
             names_of(tensors), "}");
  for (const auto& [name, target] : expected) {
    auto found = std::find_if(tensors.begin(), tensors.end(), [&](const auto& entry) { return entry.first == name; });
    WICK_CHECK(found != tensors.end(), op, ": missing tensor \"", name, "\" (got {", names_of(tensors), "})");
    const Tensor& source = found->second;
    WICK_CHECK(source.defined(), op, ": tensor \"", name, "\" is undefined");
    WICK_CHECK(source.shape() == target.shape() && source.dtype() == target.dtype(), op, ": tensor \"", name,
               "\" is ", source.describe(), ", the state needs ", target.describe());
  }
  for (const auto& [name, target] : expected) {
    auto found = std::find_if(tensors.begin(), tensors.end(), [&](const auto& entry) { return entry.first == name; });
    copy_into(target, found->second);
  }
}

}  // namespace

AdamWState AdamWState::zeros(int64_t n, bool eight_bit, Device device) {
  WICK_CHECK(n >= 0, "AdamWState::zeros: negative element count ", n);
  AdamWState state;
  state.eight_bit = eight_bit;
  if (eight_bit) {
    int64_t n_blocks = n_quantization_blocks(n);
    state.m_codes = wick::zeros({n}, DType::U8, device);
    state.v_codes = wick::zeros({n}, DType::U8, device);
    state.absmax_m = wick::zeros({n_blocks}, DType::F32, device);
    state.absmax_v = wick::zeros({n_blocks}, DType::F32, device);
  } else {
    state.m = wick::zeros({n}, DType::F32, device);
    state.v = wick::zeros({n}, DType::F32, device);
  }
  return state;
}

int64_t AdamWState::numel() const { return eight_bit ? m_codes.numel() : m.numel(); }

int64_t AdamWState::nbytes() const {
  if (eight_bit)
    return static_cast<int64_t>(m_codes.nbytes() + v_codes.nbytes() + absmax_m.nbytes() + absmax_v.nbytes());
  return static_cast<int64_t>(m.nbytes() + v.nbytes());
}

int64_t adamw_step(const Tensor& p, const Tensor& g, AdamWState& state, const AdamWHyper& hyper,
                   const Tensor& nonfinite_count) {
  if (state.eight_bit)
    return adamw8bit_step(p, g, state.m_codes, state.v_codes, state.absmax_m, state.absmax_v, hyper,
                          nonfinite_count);
  return adamw_step(p, g, state.m, state.v, hyper, nonfinite_count);
}

NamedTensors adamw_state_tensors(const AdamWState& state) {
  if (state.eight_bit)
    return {{"m_codes", state.m_codes}, {"v_codes", state.v_codes}, {"absmax_m", state.absmax_m},
            {"absmax_v", state.absmax_v}};
  return {{"m", state.m}, {"v", state.v}};
}

void load_adamw_state(AdamWState& state, const NamedTensors& tensors) {
  load_named("load_adamw_state", adamw_state_tensors(state), tensors);
}

NamedTensors sgd_state_tensors(const Tensor& momentum_buffer) {
  if (!momentum_buffer.defined()) return {};
  return {{"momentum", momentum_buffer}};
}

void load_sgd_state(const Tensor& momentum_buffer, const NamedTensors& tensors) {
  load_named("load_sgd_state", sgd_state_tensors(momentum_buffer), tensors);
}

}  // namespace wick
