// Decoder-only language models used as text encoders (Qwen3 for Z-Image and FLUX.2 klein, Qwen2.5-VL's language
// model for Qwen-Image, Mistral Small 3 for FLUX.2 dev): their sizes, the family, and reading both from a
// checkpoint's tensor shapes in transformers' Qwen3Model / Qwen2Model / MistralModel names.
//
//   LlmConfig c = llm::qwen3_4b();                                   // Z-Image's encoder, 36 layers of 2560
//   WeightSource source = WeightSource::open("qwen_3_4b.safetensors");
//   LlmConfig read = llm::config_from_shapes(mapped_shapes(source, llm::detect_weight_format(source)),
//                                            source.path(), llm::read_config_json(source.path()));
//   std::map<std::string, Shape> names = llm::parameter_shapes(read, read.n_layers, /*final_norm=*/true);
//
// The family is what the weights show: Qwen3 has per-head q_norm / k_norm, Qwen2 (Qwen2.5-VL's language model)
// has q/k/v biases, Mistral has neither. The norm epsilon and the RoPE base are not in the weights: each family
// keeps its released models' values (Qwen3 and Qwen2.5-VL: eps 1e-6, theta 1e6; Mistral Small 3.1 / 3.2: eps 1e-5,
// theta 1e9); LlmLoadOptions (llm_encoder.h) overrides them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/shape.h"

namespace wick::llm {

enum class LlmFamily { Qwen3, Qwen2, Mistral };

// "qwen3", "qwen2", "mistral".
const char* family_name(LlmFamily family);

// Defaults are Qwen3-4B's (Qwen/Qwen3-4B config.json: Z-Image's text encoder).
struct LlmConfig {
  LlmFamily family = LlmFamily::Qwen3;
  int64_t vocab_size = 151936;  // embedding rows
  int64_t hidden_size = 2560;
  int64_t intermediate_size = 9728;  // SwiGLU width
  int64_t n_layers = 36;             // decoder layers in the checkpoint
  int64_t n_heads = 32;              // query heads
  int64_t n_kv_heads = 8;            // key / value heads (grouped-query attention)
  int64_t head_dim = 128;            // explicit: n_heads * head_dim need not equal hidden_size
  double eps = 1e-6;                 // RMSNorm epsilon
  double rope_theta = 1e6;           // RoPE base
  // The weights end after n_layers decoder layers and have no final norm: a file cut for a pipeline that reads an
  // inner layer (ComfyUI's pruned FLUX.2 Mistral files keep layers 0-29). The model's real depth is unknown, so
  // hidden_states are numbered from the start only and there is no last hidden state (llm_encoder.h LlmOutput).
  bool truncated = false;
  // Parameter and compute dtype: F32 or BF16 (validate refuses F16: these models' activations overflow it).
  DType dtype = DType::BF16;
  Device device = Device::cpu();

  bool has_qk_norm() const { return family == LlmFamily::Qwen3; }
  bool has_qkv_bias() const { return family == LlmFamily::Qwen2; }
  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
};

// The real text towers (config.json of the Hugging Face repositories).
LlmConfig qwen3_4b();         // Qwen/Qwen3-4B: Z-Image, FLUX.2 klein 4B
LlmConfig qwen3_8b();         // Qwen/Qwen3-8B: FLUX.2 klein 9B
LlmConfig qwen2_5_vl_7b();    // Qwen/Qwen2.5-VL-7B-Instruct's language model: Qwen-Image
LlmConfig mistral_small_3();  // mistralai/Mistral-Small-3.2-24B-Instruct-2506's language model: FLUX.2 dev

// eps and rope_theta of the family's released models (the header comment's table).
void set_family_defaults(LlmConfig& config);

// Throws WickError (Config) naming the field when the sizes do not make such a model (non-positive sizes, query
// heads not a multiple of the kv heads, odd head_dim, dtype other than F32 / BF16).
void validate(const LlmConfig& config);

// The parameters of the first `n_layers` decoder layers (and of the final norm when `final_norm`) by their
// names in the model (transformers' Qwen3Model / Qwen2Model / MistralModel: embed_tokens.weight,
// layers.N.self_attn.{q,k,v,o}_proj.weight (+ q/k/v bias for Qwen2, q_norm / k_norm for Qwen3),
// layers.N.mlp.{gate,up,down}_proj.weight, layers.N.{input,post_attention}_layernorm.weight, norm.weight).
std::map<std::string, Shape> parameter_shapes(const LlmConfig& config, int64_t n_layers, bool final_norm);

// What the weights cannot say, from the caller or from a transformers config.json.
struct LlmShapeHints {
  std::optional<LlmFamily> family;  // checked against the weights' family
  // Head width. 0: q_norm's width (Qwen3), else 128 (every released model of the three families) when it divides
  // the q and kv widths. Without q_norm, q_proj [heads x head_dim, hidden] does not say how it splits into heads.
  int64_t head_dim = 0;
  std::optional<double> eps;         // else the family's default
  std::optional<double> rope_theta;  // else the family's default
};

// The text model's settings in a transformers config.json (top level, or its "text_config" for Qwen2.5-VL and
// Mistral3): head_dim (or hidden_size / num_attention_heads when absent, as transformers), rms_norm_eps and
// rope_theta (top level or in "rope_parameters"). `weights_path`: the file or folder WeightSource opened; the
// config.json beside it (in the same folder) is read when present, else the hints are empty. A config.json that
// is not valid JSON throws WickError (Data) naming it; one whose (text) model_type is not one of qwen3, qwen2,
// qwen2_5_vl(_text), qwen2_vl(_text), mistral (another model's) is not used.
LlmShapeHints read_config_json(const std::string& weights_path);

// Every size from tensor shapes in the model's names (mapped_shapes of any llm format gives these; float8
// companions such as `.weight_scale` are skipped): vocab and hidden from embed_tokens, the q / kv widths from
// q_proj / k_proj, intermediate from gate_proj, the layer count from the layers.N indices, the head width as
// LlmShapeHints says; the family from q_norm / the q bias, checked against hints.family. Then every parameter's
// shape is checked; a file without norm.weight is `truncated`. Missing or contradictory shapes, another family than
// hinted, or tensors that are not parameters (lm_head.weight is allowed: ignored) throw WickError (Data) naming
// `source` and the tensor. eps and rope_theta from the hints, else the family's defaults; dtype and device keep
// theirs.
LlmConfig config_from_shapes(const std::map<std::string, Shape>& shapes, const std::string& source,
                             const LlmShapeHints& hints = {});

}  // namespace wick::llm
