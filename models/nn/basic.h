// Small layers: Embedding, activations, Flatten, Dropout, MLP, Sequential, and BlockList (the numbered
// blocks a transformer's forward loops over itself).
//
//   auto mlp = std::make_shared<nn::Sequential>();
//   mlp->add(std::make_shared<nn::Linear>(784, 128));
//   mlp->add(std::make_shared<nn::Activation>("relu"));
//   mlp->add(std::make_shared<nn::Linear>(128, 10));
//   Tensor logits = mlp->forward(x);                     // children are named "0", "1", "2"
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/module.h"
#include "models/nn/linear.h"

namespace wick::nn {

// weight [n_embeddings, dim] initialized N(0, 1) like torch.nn.Embedding (allocated uninitialized
// when !initialize: a weights file fills it next); forward(ids) -> [*ids, dim].
class Embedding : public Module {
 public:
  Embedding(int64_t n_embeddings, int64_t dim, DType dtype = DType::F32, Device device = Device::cpu(),
            bool initialize = true);
  std::string type_name() const override { return "Embedding"; }
  Tensor forward(const Tensor& ids) override;
  Tensor weight_;
};

// relu | gelu | gelu_tanh | quick_gelu | silu | tanh | sigmoid; unknown names throw listing the
// valid ones. quick_gelu is OpenAI CLIP's x·sigmoid(1.702·x) (transformers' QuickGELUActivation).
class Activation : public Module {
 public:
  explicit Activation(std::string name);
  std::string type_name() const override { return "Activation(" + name_ + ")"; }
  Tensor forward(const Tensor& x) override;

 private:
  std::string name_;
};

// [N, ...] -> [N, prod(...)].
class Flatten : public Module {
 public:
  std::string type_name() const override { return "Flatten"; }
  Tensor forward(const Tensor& x) override;
};

// Inverted dropout in training mode, identity in eval mode. Random numbers come from the engine's
// cursor (engine/autograd/rng_state.h), so gradient checkpointing replays them and the training
// loop decides the stream (per step and rank).
class Dropout : public Module {
 public:
  explicit Dropout(double p);
  std::string type_name() const override { return "Dropout"; }
  Tensor forward(const Tensor& x) override;

 private:
  double p_;
};

// fc1 -> activation -> fc2 (the transformer MLP).
class MLP : public Module {
 public:
  MLP(int64_t dim, int64_t hidden, const std::string& activation = "gelu_tanh", LinearOptions options = {});
  std::string type_name() const override { return "MLP"; }
  Tensor forward(const Tensor& x) override;

 private:
  std::shared_ptr<Linear> fc1_, fc2_;  // as built; forward uses the current children (adapters)
  std::shared_ptr<Activation> activation_;
};

// Applies its children in order; children are named by position ("0", "1", ...).
class Sequential : public Module {
 public:
  Sequential() = default;
  std::string type_name() const override { return "Sequential"; }
  Sequential& add(std::shared_ptr<Module> layer);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return children().size(); }
};

// Numbered children "0", "1", ... whose own methods the model calls (double_blocks, transformer_blocks,
// input_blocks, ...): no forward of its own. `type` is the type_name it reports (the authors' container class).
class BlockList : public Module {
 public:
  explicit BlockList(std::string type = "BlockList") : type_(std::move(type)) {}
  std::string type_name() const override { return type_; }
  void add(std::shared_ptr<Module> block) { register_module(std::to_string(children().size()), std::move(block)); }

 private:
  std::string type_;
};

// The trainable parameters of `module` (LoRA factors included), in named_parameters order: what a block's
// autograd::checkpoint hands its gradients to.
std::vector<Tensor> trainable_tensors(const Module& module);

}  // namespace wick::nn
