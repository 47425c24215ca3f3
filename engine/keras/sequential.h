// A model built layer by layer (keras.Sequential): layers are applied in the order added.
//
//   keras::Sequential model;
//   model.add(std::make_shared<nn::Linear>(784, 128));   // layers from models/nn or your own Modules
//   model.add(std::make_shared<nn::Activation>("relu"));
//   model.add(std::make_shared<nn::Linear>(128, 10));
//   model.compile({.optimizer = "adamw", .learning_rate = 1e-3});
//   model.summary({784});                                  // layers, output shapes, parameter counts
//
// The layers are children "0", "1", ... of one container module, so parameter names read
// "0.weight", "2.bias" (as torch.nn.Sequential's state dict).
#pragma once

#include <memory>
#include <vector>

#include "engine/keras/model.h"

namespace wick::keras {

// The container: forward applies the children in order.
class LayerStack : public Module {
 public:
  std::string type_name() const override { return "Sequential"; }
  Tensor forward(const Tensor& x) override;
  void add(std::shared_ptr<Module> layer);
  size_t size() const { return children().size(); }
};

class Sequential : public Model {
 public:
  Sequential();
  explicit Sequential(const std::vector<std::shared_ptr<Module>>& layers);
  // Appends a layer (a null layer throws). The optimizer is rebuilt at the next fit.
  Sequential& add(std::shared_ptr<Module> layer);
  size_t size() const { return stack_->size(); }
  // The i-th layer (throws when out of range).
  std::shared_ptr<Module> layer(size_t index) const;

 protected:
  bool chains_children() const override { return true; }

 private:
  std::shared_ptr<LayerStack> stack_;
};

}  // namespace wick::keras
