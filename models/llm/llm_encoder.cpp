#include "models/llm/llm_encoder.h"

#include <algorithm>
#include <vector>

#include "engine/autograd/ops_join.h"
#include "engine/autograd/ops_layout.h"
#include "models/llm/llm_blocks.h"
#include "models/llm/llm_weights.h"
#include "models/nn/basic.h"
#include "models/weights/float8_weights.h"
#include "runtime/error.h"

namespace wick::llm {
namespace {

// The key mask [B, 1, 1, L] U8 on `device`: 1 where mask is nonzero.
Tensor key_mask(const Tensor& mask, Device device) {
  const std::vector<double> keep = mask.contiguous().to_vector<double>();
  std::vector<uint8_t> bytes(keep.size());
  for (size_t i = 0; i < keep.size(); ++i) bytes[i] = keep[i] != 0 ? 1 : 0;
  return Tensor::from_vector(bytes, {mask.size(0), 1, 1, mask.size(1)}).to(device);
}

// Layers and final norm an output needs.
struct Needs {
  int64_t n_layers = 0;
  bool final_norm = false;
};

Needs needs_of(const std::vector<int64_t>& resolved, const LlmConfig& config) {
  Needs needs;
  for (int64_t k : resolved) {
    needs.n_layers = std::max(needs.n_layers, k);
    needs.final_norm = needs.final_norm || (k == config.n_layers && !config.truncated);
  }
  return needs;
}

}  // namespace

std::vector<int64_t> LlmOutput::resolve(int64_t n_layers, bool truncated) const {
  WICK_CHECK_KIND(Config, !hidden_states.empty(), "language model output: no hidden state requested");
  std::vector<int64_t> out;
  for (int64_t k : hidden_states) {
    WICK_CHECK_KIND(Config, !truncated || k >= 0, "language model output: hidden_states[", k,
                    "] counts from the end, but the weights stop after layer ", n_layers,
                    " without the final norm (a truncated file): the model's depth is unknown; number the layers "
                    "from the start (0 .. ",
                    n_layers, ")");
    WICK_CHECK_KIND(Config, k >= -(n_layers + 1) && k <= n_layers, "language model output: hidden_states[", k,
                    "] does not exist in a model of ", n_layers, " layers (indices 0 .. ", n_layers, ", or -1 .. -",
                    n_layers + 1, " from the end)");
    out.push_back(k < 0 ? n_layers + 1 + k : k);
  }
  return out;
}

LlmEncoder::LlmEncoder(LlmConfig config, int64_t n_layers_built, bool final_norm)
    : config_(std::move(config)), n_layers_built_(n_layers_built) {
  validate(config_);
  WICK_CHECK_KIND(Config, n_layers_built_ >= 0 && n_layers_built_ <= config_.n_layers, "LlmEncoder: ", n_layers_built_,
                  " layers to build of ", config_.n_layers);
  register_module("embed_tokens", std::make_shared<nn::Embedding>(config_.vocab_size, config_.hidden_size,
                                                                  config_.dtype, config_.device, /*initialize=*/false));
  auto layers = std::make_shared<nn::Sequential>();
  for (int64_t n = 0; n < n_layers_built_; ++n) layers->add(std::make_shared<LlmDecoderLayer>(config_));
  register_module("layers", layers);
  if (final_norm) register_module("norm", std::make_shared<LlmRMSNorm>(config_.hidden_size, config_));
  set_all_trainable(false);
  eval();
}

std::shared_ptr<LlmEncoder> LlmEncoder::load(const std::string& path, const LlmLoadOptions& options) {
  WeightSource source = WeightSource::open(path);
  DetectedFormat format = detect_weight_format(source);
  LlmShapeHints hints = read_config_json(source.path());
  hints.family = options.family;
  if (options.head_dim > 0) hints.head_dim = options.head_dim;
  if (options.eps) hints.eps = options.eps;
  if (options.rope_theta) hints.rope_theta = options.rope_theta;
  LlmConfig config = config_from_shapes(mapped_shapes(source, format), source.path(), hints);
  WICK_CHECK_KIND(Data, options.required_hidden_size <= 0 || config.hidden_size == options.required_hidden_size,
                  "language model weights ", source.path(), ": embed_tokens.weight gives hidden size ",
                  config.hidden_size, " (a ", family_name(config.family), " model of ", config.n_layers,
                  " layers) but ", options.required_hidden_size, " is required");
  config.dtype = options.dtype;
  config.device = options.device;
  const Needs needs = needs_of(options.output.resolve(config.n_layers, config.truncated), config);
  auto encoder = std::make_shared<LlmEncoder>(config, needs.n_layers, needs.final_norm);
  encoder->output_ = options.output;
  DetectedFormat partial = skipping_layers(source, format, needs.n_layers, needs.final_norm);
  Float8Source float8 = prepare_float8_layers(*encoder, source, partial);
  load_mapped(*encoder, source, float8.format, {.trainable = false, .prefilled = float8.prefilled});
  if (options.quantize_float8) quantize_linears(*encoder, {"layers.*"}, *options.quantize_float8);
  return encoder;
}

Tensor LlmEncoder::forward(const Tensor& ids, const Tensor& mask, const LlmOutput& output) {
  WICK_CHECK(ids.dim() == 2 && ids.size(1) >= 1 && (ids.dtype() == DType::I64 || ids.dtype() == DType::I32),
             "LlmEncoder: ids must be [B, L] I32/I64 with L >= 1, got ", ids.describe());
  WICK_CHECK(!mask.defined() || mask.shape() == ids.shape(), "LlmEncoder: mask ", mask.defined() ? mask.describe() : "",
             " must have the ids' shape ", ids.shape());
  const std::vector<int64_t> wanted = output.resolve(config_.n_layers, config_.truncated);
  const Needs needs = needs_of(wanted, config_);
  WICK_CHECK_KIND(Config, needs.n_layers <= n_layers_built_ && (!needs.final_norm || has_final_norm()),
                  "LlmEncoder: the output needs ", needs.n_layers, " layers",
                  needs.final_norm ? " and the final norm" : "", "; this encoder was built with ", n_layers_built_,
                  " of ", config_.n_layers, " layers", has_final_norm() ? " and the final norm" : " and no final norm",
                  " (load it with that output)");

  Tensor x = autograd::to_dtype(child("embed_tokens")->forward(ids.to(config_.device)), DType::F32);
  const RotaryTables rope = rotary_tables(ids.size(1), config_.head_dim, config_.rope_theta, config_.device);
  const Tensor keep = mask.defined() ? key_mask(mask, config_.device) : Tensor();
  std::vector<Tensor> states(static_cast<size_t>(config_.n_layers + 1));  // the hidden_states entries asked for
  auto keep_state = [&](int64_t k, const Tensor& state) {
    if (std::find(wanted.begin(), wanted.end(), k) != wanted.end())
      states[static_cast<size_t>(k)] = autograd::to_dtype(state, config_.dtype);
  };
  keep_state(0, x);
  Module& layers = *child("layers");
  for (int64_t n = 0; n < needs.n_layers; ++n) {
    x = static_cast<LlmDecoderLayer&>(*layers.child(std::to_string(n))).run(x, rope, keep);
    if (n + 1 < config_.n_layers || config_.truncated) keep_state(n + 1, x);
  }
  if (needs.final_norm) keep_state(config_.n_layers, child("norm")->forward(x));
  std::vector<Tensor> parts;
  for (int64_t k : wanted) parts.push_back(states[static_cast<size_t>(k)]);
  return parts.size() == 1 ? parts[0] : autograd::concat(parts, 2);
}

}  // namespace wick::llm
