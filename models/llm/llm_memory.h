// Parameter counts and weight bytes of the language-model text encoders, from the config alone (no file needed):
// what loading Qwen3-4B, Qwen2.5-VL-7B's language model or Mistral Small 3's text tower costs, in full or cut at
// the deepest layer a pipeline uses, in bf16 or with float8 Linear weights. Numbers in docs/text_encoders.md.
//
//   int64_t n = llm::parameter_count(llm::qwen3_4b());                 // 4,022,468,096 (Qwen3Model)
//   int64_t b = llm::weight_bytes(llm::mistral_small_3(), {.n_layers = 30, .final_norm = false,
//                                                          .float8 = true});   // FLUX.2 dev's 30 layers in float8
#pragma once

#include <cstdint>

#include "models/llm/llm_config.h"
#include "runtime/ops/float8.h"

namespace wick::llm {

struct LlmWeightsPlan {
  int64_t n_layers = -1;   // decoder layers loaded; -1: all of config.n_layers
  bool final_norm = true;  // norm.weight loaded
  bool float8 = false;     // decoder Linear weights as e4m3 codes (1 byte) + f32 scales; the rest in `dtype`
  Float8Scaling scaling = Float8Scaling::PerRow;  // float8 scales: one per output row, or one per tensor
  DType dtype = DType::BF16;                      // everything not float8 (embedding, norms, biases, or all)
};

// Parameters of the text model (embedding, layers, final norm; no lm_head) as plan.n_layers / final_norm select.
int64_t parameter_count(const LlmConfig& config, const LlmWeightsPlan& plan = {});
// Bytes those parameters take in memory as `plan` stores them (float8: codes plus their f32 scales).
int64_t weight_bytes(const LlmConfig& config, const LlmWeightsPlan& plan = {});

}  // namespace wick::llm
