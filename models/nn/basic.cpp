#include "models/nn/basic.h"

#include "engine/autograd/ops_dropout.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_index.h"
#include "engine/autograd/ops_layout.h"
#include "engine/init.h"
#include "runtime/philox.h"

namespace wick::nn {

Embedding::Embedding(int64_t n_embeddings, int64_t dim, DType dtype, Device device, bool initialize) {
  register_parameter("weight", &weight_,
                     initialize ? init_normal({n_embeddings, dim}, 0.0, 1.0, dtype, device)
                                : Tensor::empty({n_embeddings, dim}, dtype, device));
}

Tensor Embedding::forward(const Tensor& ids) { return autograd::embedding(weight_, ids); }

Activation::Activation(std::string name) : name_(std::move(name)) {
  static const char* valid[] = {"relu", "gelu", "gelu_tanh", "quick_gelu", "silu", "tanh", "sigmoid"};
  bool known = false;
  for (const char* v : valid) known = known || name_ == v;
  WICK_CHECK_KIND(Config, known, "unknown activation '", name_,
                  "' (valid: relu, gelu, gelu_tanh, quick_gelu, silu, tanh, sigmoid)");
}

Tensor Activation::forward(const Tensor& x) {
  if (name_ == "relu") return autograd::relu(x);
  if (name_ == "gelu") return autograd::gelu(x);
  if (name_ == "gelu_tanh") return autograd::gelu_tanh(x);
  // x · sigmoid(1.702 x), in this order of roundings (transformers' QuickGELUActivation).
  if (name_ == "quick_gelu") return autograd::mul(x, autograd::sigmoid(autograd::mul(x, 1.702)));
  if (name_ == "silu") return autograd::silu(x);
  if (name_ == "tanh") return autograd::tanh(x);
  return autograd::sigmoid(x);
}

Tensor Flatten::forward(const Tensor& x) {
  WICK_CHECK(x.dim() >= 1, "Flatten: needs a batch axis, got ", x.describe());
  return autograd::reshape(x, {x.size(0), -1});
}

Dropout::Dropout(double p) : p_(p) { WICK_CHECK(p >= 0.0 && p < 1.0, "Dropout: p must be in [0, 1), got ", p); }

Tensor Dropout::forward(const Tensor& x) { return autograd::dropout(x, p_, is_training()); }

MLP::MLP(int64_t dim, int64_t hidden, const std::string& activation, LinearOptions options) {
  fc1_ = register_module("fc1", std::make_shared<Linear>(dim, hidden, options));
  activation_ = std::make_shared<Activation>(activation);
  fc2_ = register_module("fc2", std::make_shared<Linear>(hidden, dim, options));
}

// Children are looked up at call time: an adapter may have replaced fc1 or fc2.
Tensor MLP::forward(const Tensor& x) { return child("fc2")->forward(activation_->forward(child("fc1")->forward(x))); }

Sequential& Sequential::add(std::shared_ptr<Module> layer) {
  register_module(std::to_string(children().size()), std::move(layer));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (const auto& [name, layer] : children()) h = layer->forward(h);
  return h;
}

std::vector<Tensor> trainable_tensors(const Module& module) {
  std::vector<Tensor> out;
  for (auto& [name, tensor] : module.trainable_parameters()) out.push_back(tensor);
  return out;
}

}  // namespace wick::nn
