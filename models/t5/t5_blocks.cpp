#include "models/t5/t5_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "engine/autograd/ops_attention.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_index.h"
#include "engine/autograd/ops_layout.h"
#include "engine/autograd/ops_norm.h"
#include "models/nn/basic.h"
#include "models/nn/linear.h"
#include "runtime/ops/creation.h"

namespace wick::t5 {
namespace {

std::shared_ptr<nn::Linear> linear(int64_t in, int64_t out, const T5Config& c) {
  return std::make_shared<nn::Linear>(
      in, out, nn::LinearOptions{.bias = false, .dtype = c.dtype, .device = c.device, .trainable = false, .initialize = false});
}

// A module that only holds named children (transformers' T5LayerSelfAttention and T5LayerFF: T5Block runs them).
class Container : public Module {
 public:
  explicit Container(std::string type) : type_(std::move(type)) {}
  std::string type_name() const override { return type_; }
  void add(const std::string& name, std::shared_ptr<Module> module) { register_module(name, std::move(module)); }

 private:
  std::string type_;
};

// The sub-layer input: norm(x) in f32, cast to the compute dtype.
Tensor normalized(Module& norm, const Tensor& x, DType dtype) {
  return autograd::to_dtype(norm.forward(x), dtype);
}

}  // namespace

int64_t relative_position_bucket(int64_t relative_position, int64_t n_buckets, int64_t max_distance) {
  const int64_t per_direction = n_buckets / 2;
  const int64_t max_exact = per_direction / 2;
  const int64_t base = relative_position > 0 ? per_direction : 0;
  const int64_t distance = std::llabs(relative_position);
  if (distance < max_exact) return base + distance;
  // max_exact + (log(distance / max_exact) / log(max_distance / max_exact) * (per_direction - max_exact)), in f32
  // as torch computes it (the Python constant log(max_distance / max_exact) is a double rounded to f32), truncated.
  const float ratio = static_cast<float>(distance) / static_cast<float>(max_exact);
  const float log_range = static_cast<float>(std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)));
  const float scaled = std::log(ratio) / log_range * static_cast<float>(per_direction - max_exact);
  const int64_t large = max_exact + static_cast<int64_t>(scaled);
  return base + std::min(large, per_direction - 1);
}

T5Embedding::T5Embedding(int64_t rows, int64_t dim, const T5Config& c) {
  register_parameter("weight", &weight_, Tensor::empty({rows, dim}, c.dtype, c.device), /*trainable=*/false);
}

Tensor T5Embedding::forward(const Tensor& ids) { return autograd::embedding(weight_, ids); }

T5LayerNorm::T5LayerNorm(int64_t dim, const T5Config& c) : eps_(c.eps) {
  register_parameter("weight", &weight_, ones({dim}, c.dtype, c.device), /*trainable=*/false);
}

Tensor T5LayerNorm::forward(const Tensor& x) { return autograd::rms_norm(x, weight_, eps_); }

T5Attention::T5Attention(const T5Config& c, bool has_relative_bias)
    : n_heads_(c.n_heads), d_kv_(c.d_kv), n_buckets_(c.n_buckets), max_distance_(c.max_distance) {
  for (const char* name : {"q", "k", "v"}) register_module(name, linear(c.d_model, c.inner_dim(), c));
  register_module("o", linear(c.inner_dim(), c.d_model, c));
  if (has_relative_bias)
    register_module("relative_attention_bias", std::make_shared<T5Embedding>(c.n_buckets, c.n_heads, c));
}

Tensor T5Attention::run(const Tensor& h, const Tensor& bias) {
  WICK_CHECK(h.dim() == 3, "T5Attention: input must be [B, L, d_model], got ", h.describe());
  const int64_t batch = h.size(0), length = h.size(1);
  // [B, L, heads x d_kv] -> [B, heads, L, d_kv] views.
  auto heads = [&](const char* name) {
    return autograd::transpose(autograd::reshape(child(name)->forward(h), {batch, length, n_heads_, d_kv_}), 1, 2);
  };
  Tensor attended = autograd::scaled_dot_product_attention(heads("q"), heads("k"), heads("v"), bias, /*scale=*/1.0);
  return child("o")->forward(
      autograd::reshape(autograd::transpose(attended, 1, 2), {batch, length, n_heads_ * d_kv_}));
}

Tensor T5Attention::position_bias(int64_t length) {
  std::shared_ptr<Module> table = child("relative_attention_bias");
  WICK_CHECK(table != nullptr, "T5Attention: position_bias needs the relative_attention_bias table (block 0)");
  WICK_CHECK(length >= 1, "T5Attention: sequence length must be positive, got ", length);
  // One bucket per offset key - query in [-(L - 1), L - 1], then the [L, L] table of them.
  std::vector<int64_t> by_offset(static_cast<size_t>(2 * length - 1));
  for (int64_t offset = -(length - 1); offset < length; ++offset)
    by_offset[static_cast<size_t>(offset + length - 1)] = relative_position_bucket(offset, n_buckets_, max_distance_);
  std::vector<int64_t> buckets(static_cast<size_t>(length * length));
  for (int64_t query = 0; query < length; ++query)
    for (int64_t key = 0; key < length; ++key)
      buckets[static_cast<size_t>(query * length + key)] = by_offset[static_cast<size_t>(key - query + length - 1)];
  const Tensor& weight = static_cast<T5Embedding&>(*table).weight_;
  Tensor values = table->forward(Tensor::from_vector(buckets, {length, length}).to(weight.device()));  // [L, L, H]
  Tensor per_head = autograd::contiguous(autograd::permute(autograd::to_dtype(values, DType::F32), {2, 0, 1}));
  return autograd::unsqueeze(per_head, 0);
}

T5DenseGatedActDense::T5DenseGatedActDense(const T5Config& c) {
  register_module("wi_0", linear(c.d_model, c.d_ff, c));
  register_module("wi_1", linear(c.d_model, c.d_ff, c));
  register_module("wo", linear(c.d_ff, c.d_model, c));
}

Tensor T5DenseGatedActDense::forward(const Tensor& h) {
  Tensor gate = autograd::gelu_tanh(child("wi_0")->forward(h));
  return child("wo")->forward(autograd::mul(gate, child("wi_1")->forward(h)));
}

T5Block::T5Block(const T5Config& c, bool has_relative_bias) : dtype_(c.dtype) {
  auto layers = std::make_shared<nn::Sequential>();
  auto attention_layer = std::make_shared<Container>("T5LayerSelfAttention");
  attention_layer->add("SelfAttention", std::make_shared<T5Attention>(c, has_relative_bias));
  attention_layer->add("layer_norm", std::make_shared<T5LayerNorm>(c.d_model, c));
  auto ffn_layer = std::make_shared<Container>("T5LayerFF");
  ffn_layer->add("DenseReluDense", std::make_shared<T5DenseGatedActDense>(c));
  ffn_layer->add("layer_norm", std::make_shared<T5LayerNorm>(c.d_model, c));
  layers->add(attention_layer);
  layers->add(ffn_layer);
  register_module("layer", layers);
}

T5Attention& T5Block::attention() {
  return static_cast<T5Attention&>(*child("layer")->child("0")->child("SelfAttention"));
}

Tensor T5Block::run(const Tensor& x, const Tensor& bias) {
  Module& attention_layer = *child("layer")->child("0");
  Module& ffn_layer = *child("layer")->child("1");
  Tensor h = normalized(*attention_layer.child("layer_norm"), x, dtype_);
  Tensor y = autograd::add(x, autograd::to_dtype(attention().run(h, bias), DType::F32));
  h = normalized(*ffn_layer.child("layer_norm"), y, dtype_);
  return autograd::add(y, autograd::to_dtype(ffn_layer.child("DenseReluDense")->forward(h), DType::F32));
}

T5Stack::T5Stack(const T5Config& c) : dtype_(c.dtype), bias_per_block_(c.bias_per_block) {
  auto blocks = std::make_shared<nn::Sequential>();
  for (int64_t n = 0; n < c.n_layers; ++n)
    blocks->add(std::make_shared<T5Block>(c, /*has_relative_bias=*/n == 0 || c.bias_per_block));
  register_module("block", blocks);
  register_module("final_layer_norm", std::make_shared<T5LayerNorm>(c.d_model, c));
}

int64_t T5Stack::n_blocks() const { return static_cast<int64_t>(child("block")->children().size()); }

T5Block& T5Stack::block(int64_t index) {
  WICK_CHECK(index >= 0 && index < n_blocks(), "T5Stack: block ", index, " of ", n_blocks());
  return static_cast<T5Block&>(*child("block")->child(std::to_string(index)));
}

Tensor T5Stack::run(const Tensor& x, const Tensor& padding) {
  WICK_CHECK(x.dim() == 3 && x.dtype() == DType::F32, "T5Stack: embeddings must be [B, L, d_model] f32, got ",
             x.describe());
  // T5 v1.1: block 0's relative-position bias, computed once and shared by every block (as transformers);
  // umT5: each block's own.
  auto bias_of = [&](int64_t n) {
    Tensor bias = block(n).attention().position_bias(x.size(1));
    return padding.defined() ? autograd::add(bias, padding) : bias;  // [B, heads, L, L]
  };
  Tensor shared = bias_per_block_ ? Tensor() : bias_of(0);
  Tensor h = x;
  for (int64_t n = 0; n < n_blocks(); ++n) h = block(n).run(h, bias_per_block_ ? bias_of(n) : shared);
  return autograd::to_dtype(child("final_layer_norm")->forward(h), dtype_);
}

}  // namespace wick::t5
