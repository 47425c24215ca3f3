// A decoder-only language model (Qwen3, Qwen2.5-VL's language model, Mistral Small 3) run as a text encoder: token
// ids and a mask in, the hidden states a pipeline conditions on out. Parameter names are transformers'
// Qwen3Model / Qwen2Model / MistralModel ones, so the published files load as they are (llm_weights.h).
//
//   auto encoder = llm::LlmEncoder::load("qwen_3_4b.safetensors",
//                                        {.output = llm::LlmOutput::hidden_state(-2)});   // Z-Image
//   autograd::NoGradGuard no_grad;                                                        // inference: no graph
//   Tensor context = encoder->forward(ids, mask);   // [B, L, 2560] bf16: output of layer 35 of 36, no final norm
//   auto flux2 = llm::LlmEncoder::load(folder, {.output = llm::LlmOutput::stack({10, 20, 30})});
//   Tensor features = flux2->forward(ids, mask);    // [B, L, 3 x 5120]: layers 10 | 20 | 30 per token
//
// Maths (transformers 5.24 modeling_qwen3.py / modeling_qwen2_5_vl.py text model / modeling_mistral.py):
// x = embed_tokens[ids]; per layer x += o_proj(attention(input_layernorm(x))), then
// x += down_proj(silu(gate_proj(h)) * up_proj(h)) with h = post_attention_layernorm(x); output norm(x) for the last
// hidden state. Attention: q/k/v projections (Qwen2: with biases), Qwen3's per-head q_norm / k_norm, rotate_half
// RoPE at positions 0 .. L - 1 (padding does not move them: Qwen2.5-VL's M-RoPE on text alone is this 1-D RoPE),
// grouped-query heads, causal, padded keys dropped; a query with no key left (left padding) gives 0 as torch's
// SDPA, so real tokens' states do not depend on the padding side. Details in llm_blocks.h.
// Only the layers the output needs are built and loaded (FLUX.2's Mistral stops after layer 30 of 40; Z-Image's
// Qwen3 after 35 of 36, without the final norm).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/module.h"
#include "models/llm/llm_config.h"
#include "runtime/ops/float8.h"

namespace wick::llm {

// Which hidden states come out, numbered as transformers' output_hidden_states numbers them: hidden_states[0] =
// the embeddings, [k] = the output of decoder layer k (1-based; before the final norm) for k < n_layers, and
// [n_layers] (= [-1]) = the last layer's output WITH the final norm (last_hidden_state). Negative indices count
// from the end as in Python ([-2] = layer n_layers - 1's raw output). Several indices are concatenated per token
// along the features, in the order given. A truncated file (LlmConfig::truncated: no final norm) is numbered from
// the start only: [n_layers] is its last layer's raw output, and negative indices are refused.
struct LlmOutput {
  std::vector<int64_t> hidden_states = {-1};

  static LlmOutput hidden_state(int64_t k) { return {{k}}; }
  static LlmOutput last_hidden_state() { return {{-1}}; }
  static LlmOutput stack(std::vector<int64_t> ks) { return {std::move(ks)}; }
  // The indices resolved for a model of n_layers (each in [0, n_layers]); throws WickError (Config) for an empty
  // list, an index outside [-(n_layers + 1), n_layers], or a negative index when `truncated`.
  std::vector<int64_t> resolve(int64_t n_layers, bool truncated = false) const;
};

struct LlmLoadOptions {
  LlmOutput output;           // decides how many layers are built and loaded
  DType dtype = DType::BF16;  // parameter and compute dtype: BF16 or F32
  Device device = Device::cpu();
  std::optional<LlmFamily> family;        // required family (Data error when the weights are another)
  int64_t required_hidden_size = 0;       // > 0: Data error when the weights' hidden size differs (Qwen3-8B for 4B)
  int64_t head_dim = 0;                   // > 0: the head width (else config.json beside the weights, q_norm, or 128)
  std::optional<double> eps, rope_theta;  // else config.json beside the weights, else the family's defaults
  // Quantize the decoder layers' Linear weights to float8 (e4m3 codes + f32 scales) after loading, as a float8
  // file would hold them (models/weights/float8_weights.h quantize_linears); embedding and norms keep `dtype`.
  std::optional<Float8Scaling> quantize_float8;
};

class LlmEncoder : public Module {
 public:
  // Checks the config (llm_config.h validate) and builds embed_tokens, the first `n_layers_built` decoder layers
  // (1 .. config.n_layers) and, when `final_norm`, norm, with uninitialized frozen parameters in config.dtype on
  // config.device (norm weights start at 1).
  LlmEncoder(LlmConfig config, int64_t n_layers_built, bool final_norm);
  // All layers and the final norm (none when config.truncated).
  explicit LlmEncoder(LlmConfig config) : LlmEncoder(config, config.n_layers, !config.truncated) {}
  std::string type_name() const override { return "LlmEncoder"; }

  // Reads family and sizes from the weights (and config.json beside them), builds the layers options.output
  // needs and loads them (frozen; zero-copy when the file's dtype is options.dtype on the CPU; F8_E4M3 Linear
  // weights stay float8, other F8 tensors are decoded). `path`: a safetensors file, a sharded folder with its
  // index, or a folder holding one of those (names as llm_weights.h lists). Throws WickError (Data) naming the
  // file for a missing path, an unknown naming, a missing / unexpected / misshapen tensor, a family or hidden size
  // other than required; WickError (Config) for an output index the model does not have or dtype F16.
  static std::shared_ptr<LlmEncoder> load(const std::string& path, const LlmLoadOptions& options = {});

  // ids [B, L] I32/I64 (< vocab_size), L >= 1, any device; mask [B, L] (any dtype, nonzero = real token) or
  // undefined (every token real) -> the requested hidden states [B, L, hidden x n_requested] in config.dtype on
  // config.device. Throws WickError (Config) when an index needs a layer (or the final norm) not built.
  Tensor forward(const Tensor& ids, const Tensor& mask, const LlmOutput& output);
  Tensor forward(const Tensor& ids, const Tensor& mask) { return forward(ids, mask, output_); }
  Tensor forward(const Tensor& ids) override { return forward(ids, Tensor(), output_); }

  const LlmConfig& config() const { return config_; }
  int64_t n_layers_built() const { return n_layers_built_; }
  bool has_final_norm() const { return child("norm") != nullptr; }
  // The output forward(ids, mask) gives: load's options.output, else the last hidden state.
  const LlmOutput& default_output() const { return output_; }

 private:
  LlmConfig config_;
  int64_t n_layers_built_;
  LlmOutput output_;
};

}  // namespace wick::llm
