#include "engine/keras/sequential.h"

#include <string>

#include "runtime/error.h"

namespace wick::keras {

Tensor LayerStack::forward(const Tensor& x) {
  Tensor h = x;
  for (const auto& [name, layer] : children()) h = layer->forward(h);
  return h;
}

void LayerStack::add(std::shared_ptr<Module> layer) {
  WICK_CHECK(layer != nullptr, "keras::Sequential::add: the layer is null");
  register_module(std::to_string(children().size()), std::move(layer));
}

Sequential::Sequential() : stack_(std::make_shared<LayerStack>()) { set_module(stack_); }

Sequential::Sequential(const std::vector<std::shared_ptr<Module>>& layers) : Sequential() {
  for (const auto& layer : layers) add(layer);
}

Sequential& Sequential::add(std::shared_ptr<Module> layer) {
  stack_->add(std::move(layer));
  reset_optimizer();
  return *this;
}

std::shared_ptr<Module> Sequential::layer(size_t index) const {
  WICK_CHECK(index < stack_->size(), "keras::Sequential::layer: index ", index, " with ", stack_->size(), " layers");
  return stack_->children()[index].second;
}

}  // namespace wick::keras
