#include "models/llm/llm_memory.h"

#include "runtime/error.h"

namespace wick::llm {
namespace {

int64_t layers_of(const LlmConfig& c, const LlmWeightsPlan& plan) {
  const int64_t n = plan.n_layers < 0 ? c.n_layers : plan.n_layers;
  WICK_CHECK_KIND(Config, n <= c.n_layers, "language model memory: ", n, " layers of ", c.n_layers);
  return n;
}

}  // namespace

int64_t parameter_count(const LlmConfig& c, const LlmWeightsPlan& plan) {
  int64_t n = 0;
  for (const auto& [name, shape] : parameter_shapes(c, layers_of(c, plan), plan.final_norm)) n += numel(shape);
  return n;
}

int64_t weight_bytes(const LlmConfig& c, const LlmWeightsPlan& plan) {
  const int64_t element = static_cast<int64_t>(dtype_size(plan.dtype));
  int64_t bytes = 0;
  for (const auto& [name, shape] : parameter_shapes(c, layers_of(c, plan), plan.final_norm)) {
    const bool linear_weight = shape.size() == 2 && name.rfind("layers.", 0) == 0;
    if (plan.float8 && linear_weight)
      bytes += numel(shape) + 4 * (plan.scaling == Float8Scaling::PerRow ? shape[0] : 1);
    else bytes += numel(shape) * element;
  }
  return bytes;
}

}  // namespace wick::llm
