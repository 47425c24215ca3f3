#include "models/clip/clip_text.h"

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/ops_attention.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_index.h"
#include "engine/autograd/ops_layout.h"
#include "models/nn/basic.h"
#include "models/nn/linear.h"
#include "models/nn/norm.h"
#include "runtime/error.h"

namespace wick::clip {
namespace {

// A module that only holds children (text_model, embeddings, encoder).
class Container : public Module {
 public:
  explicit Container(std::string type) : type_(std::move(type)) {}
  std::string type_name() const override { return type_; }
  template <typename M>
  std::shared_ptr<M> add(const std::string& name, std::shared_ptr<M> module) {
    return register_module(name, std::move(module));
  }

 private:
  std::string type_;
};

nn::LinearOptions linear_options(const ClipTextConfig& c, bool bias = true) {
  return nn::LinearOptions{
      .bias = bias, .dtype = c.dtype, .device = c.device, .trainable = false, .initialize = c.initialize};
}

std::shared_ptr<nn::LayerNorm> layer_norm(const ClipTextConfig& c) {
  return std::make_shared<nn::LayerNorm>(Shape{c.hidden_size}, c.layer_norm_eps, /*affine=*/true, c.dtype, c.device);
}

}  // namespace

void validate(const ClipTextConfig& c) {
  auto positive = [](int64_t value, const char* field) {
    WICK_CHECK_KIND(Config, value > 0, "CLIP text config: ", field, " must be positive, got ", value);
  };
  positive(c.vocab_size, "vocab_size");
  positive(c.hidden_size, "hidden_size");
  positive(c.intermediate_size, "intermediate_size");
  positive(c.num_layers, "num_layers");
  positive(c.num_heads, "num_heads");
  positive(c.max_position_embeddings, "max_position_embeddings");
  WICK_CHECK_KIND(Config, c.projection_dim >= 0, "CLIP text config: projection_dim must be >= 0 (0: none), got ",
                  c.projection_dim);
  WICK_CHECK_KIND(Config, c.hidden_size % c.num_heads == 0, "CLIP text config: hidden_size ", c.hidden_size,
                  " is not a multiple of num_heads ", c.num_heads);
  WICK_CHECK_KIND(Config, c.activation == "quick_gelu" || c.activation == "gelu", "CLIP text config: activation '",
                  c.activation, "' is not one of quick_gelu (OpenAI CLIP), gelu (OpenCLIP)");
  WICK_CHECK_KIND(Config, c.layer_norm_eps > 0, "CLIP text config: layer_norm_eps must be positive");
}

ClipTextConfig clip_l_config() { return ClipTextConfig{}; }

ClipTextConfig clip_g_config() {
  return ClipTextConfig{.hidden_size = 1280,
                        .intermediate_size = 5120,
                        .num_layers = 32,
                        .num_heads = 20,
                        .projection_dim = 1280,
                        .activation = "gelu"};
}

std::map<std::string, Shape> parameter_shapes(const ClipTextConfig& c) {
  const int64_t h = c.hidden_size;
  std::map<std::string, Shape> out;
  out["text_model.embeddings.token_embedding.weight"] = {c.vocab_size, h};
  out["text_model.embeddings.position_embedding.weight"] = {c.max_position_embeddings, h};
  for (int64_t n = 0; n < c.num_layers; ++n) {
    const std::string layer = "text_model.encoder.layers." + std::to_string(n) + ".";
    for (const char* norm : {"layer_norm1", "layer_norm2"}) {
      out[layer + norm + ".weight"] = {h};
      out[layer + norm + ".bias"] = {h};
    }
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      out[layer + "self_attn." + proj + ".weight"] = {h, h};
      out[layer + "self_attn." + proj + ".bias"] = {h};
    }
    out[layer + "mlp.fc1.weight"] = {c.intermediate_size, h};
    out[layer + "mlp.fc1.bias"] = {c.intermediate_size};
    out[layer + "mlp.fc2.weight"] = {h, c.intermediate_size};
    out[layer + "mlp.fc2.bias"] = {h};
  }
  out["text_model.final_layer_norm.weight"] = {h};
  out["text_model.final_layer_norm.bias"] = {h};
  if (c.projection_dim > 0) out["text_projection.weight"] = {c.projection_dim, h};
  return out;
}

std::vector<int64_t> pooling_positions(const Tensor& ids, ClipPooling rule, int64_t eos_token_id) {
  WICK_CHECK(ids.dim() == 2, "CLIP pooling: ids must be [B, L], got ", ids.describe());
  const int64_t batch = ids.size(0), length = ids.size(1);
  const std::vector<int64_t> values = ids.to_vector<int64_t>();
  std::vector<int64_t> out(static_cast<size_t>(batch), 0);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t* row = values.data() + b * length;
    int64_t& at = out[static_cast<size_t>(b)];
    for (int64_t i = 0; i < length; ++i) {
      if (rule == ClipPooling::Argmax ? row[i] > row[at] : row[i] == eos_token_id) {
        at = i;
        if (rule == ClipPooling::FirstEos) break;
      }
    }
  }
  return out;
}

ClipAttention::ClipAttention(const ClipTextConfig& c) : n_heads_(c.num_heads) {
  for (const char* name : {"q_proj", "k_proj", "v_proj", "out_proj"})
    register_module(name, std::make_shared<nn::Linear>(c.hidden_size, c.hidden_size, linear_options(c)));
}

Tensor ClipAttention::forward(const Tensor& x) {
  const int64_t batch = x.size(0), length = x.size(1), width = x.size(2);
  // [B, L, hidden] -> [B, heads, L, head_dim] as views.
  auto heads = [&](const char* projection) {
    Tensor y = child(projection)->forward(x);
    return autograd::transpose(autograd::reshape(y, {batch, length, n_heads_, width / n_heads_}), 1, 2);
  };
  Tensor attended = autograd::scaled_dot_product_attention(heads("q_proj"), heads("k_proj"), heads("v_proj"), Tensor(),
                                                           std::nullopt, /*is_causal=*/true);
  return child("out_proj")->forward(autograd::reshape(autograd::transpose(attended, 1, 2), {batch, length, width}));
}

ClipEncoderLayer::ClipEncoderLayer(const ClipTextConfig& c) {
  register_module("layer_norm1", layer_norm(c));
  register_module("self_attn", std::make_shared<ClipAttention>(c));
  register_module("layer_norm2", layer_norm(c));
  register_module("mlp",
                  std::make_shared<nn::MLP>(c.hidden_size, c.intermediate_size, c.activation, linear_options(c)));
}

Tensor ClipEncoderLayer::forward(const Tensor& x) {
  Tensor h = x + child("self_attn")->forward(child("layer_norm1")->forward(x));
  return h + child("mlp")->forward(child("layer_norm2")->forward(h));
}

ClipTextModel::ClipTextModel(ClipTextConfig config) : config_(std::move(config)) {
  validate(config_);
  const ClipTextConfig& c = config_;
  auto text_model = register_module("text_model", std::make_shared<Container>("ClipTextTransformer"));
  auto embeddings = text_model->add("embeddings", std::make_shared<Container>("ClipTextEmbeddings"));
  embeddings->add("token_embedding",
                  std::make_shared<nn::Embedding>(c.vocab_size, c.hidden_size, c.dtype, c.device, c.initialize));
  embeddings->add("position_embedding", std::make_shared<nn::Embedding>(c.max_position_embeddings, c.hidden_size,
                                                                        c.dtype, c.device, c.initialize));
  auto encoder = text_model->add("encoder", std::make_shared<Container>("ClipEncoder"));
  auto layers = encoder->add("layers", std::make_shared<nn::Sequential>());
  for (int64_t n = 0; n < c.num_layers; ++n) layers->add(std::make_shared<ClipEncoderLayer>(c));
  text_model->add("final_layer_norm", layer_norm(c));
  if (c.projection_dim > 0)
    register_module("text_projection",
                    std::make_shared<nn::Linear>(c.hidden_size, c.projection_dim, linear_options(c, /*bias=*/false)));
  set_all_trainable(false);
  eval();
}

ClipTextOutput ClipTextModel::encode(const Tensor& ids, const ClipForwardOptions& options) {
  const ClipTextConfig& c = config_;
  WICK_CHECK(ids.dim() == 2 && (ids.dtype() == DType::I64 || ids.dtype() == DType::I32),
             "CLIP text: ids must be [B, L] I32 or I64 token ids, got ", ids.describe());
  const int64_t length = ids.size(1);
  WICK_CHECK(ids.size(0) > 0 && length > 0 && length <= c.max_position_embeddings, "CLIP text: ids ", ids.describe(),
             " must hold 1 to ", c.max_position_embeddings, " tokens per sequence (max_position_embeddings)");
  for (int64_t id : ids.to_vector<int64_t>())
    WICK_CHECK_KIND(Data, id >= 0 && id < c.vocab_size, "CLIP text: token id ", id, " is outside the vocabulary [0, ",
                    c.vocab_size, ")");

  autograd::NoGradGuard no_grad;
  Module& text_model = *child("text_model");
  Module& embeddings = *text_model.child("embeddings");
  Tensor ids_here = ids.to(c.device);
  Tensor positions = autograd::narrow(embeddings.child("position_embedding")->parameter("weight"), 0, 0, length);
  Tensor x = embeddings.child("token_embedding")->forward(ids_here) + positions;

  ClipTextOutput out;
  const auto& layers = text_model.child("encoder")->child("layers")->children();
  if (options.output_hidden_states) out.hidden_states.push_back(x);
  for (size_t n = 0; n < layers.size(); ++n) {
    if (n + 1 == layers.size()) out.penultimate = x;
    x = layers[n].second->forward(x);
    if (options.output_hidden_states) out.hidden_states.push_back(x);
  }
  out.last_hidden_state = text_model.child("final_layer_norm")->forward(x);

  out.pooled_positions = pooling_positions(ids, c.pooling, c.eos_token_id);
  std::vector<int64_t> rows;  // row b·L + position of last_hidden_state viewed as [B·L, hidden]
  for (size_t b = 0; b < out.pooled_positions.size(); ++b)
    rows.push_back(static_cast<int64_t>(b) * length + out.pooled_positions[b]);
  Tensor index = Tensor::from_vector<int64_t>(rows, {static_cast<int64_t>(rows.size())}).to(c.device);
  out.pooled = autograd::index_select(autograd::reshape(out.last_hidden_state, {-1, c.hidden_size}), 0, index);
  if (has_projection()) out.text_embeds = child("text_projection")->forward(out.pooled);
  return out;
}

}  // namespace wick::clip
