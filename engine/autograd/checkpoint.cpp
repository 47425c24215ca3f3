#include "engine/autograd/checkpoint.h"

#include "engine/autograd/backward.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/autograd/rng_state.h"
#include "engine/module.h"

namespace wick::autograd {
namespace {

thread_local int recomputation_depth = 0;

// Marks the recomputation for recomputing().
struct RecomputationScope {
  RecomputationScope() { ++recomputation_depth; }
  ~RecomputationScope() { --recomputation_depth; }
  RecomputationScope(const RecomputationScope&) = delete;
  RecomputationScope& operator=(const RecomputationScope&) = delete;
};

class CheckpointNode : public Node {
 public:
  CheckpointNode(CheckpointFunction fn, std::vector<Tensor> inputs, std::vector<bool> input_needs_grad,
                 std::vector<Tensor> parameters, RngCursor rng_before)
      : fn_(std::move(fn)),
        inputs_(std::move(inputs)),
        input_needs_grad_(std::move(input_needs_grad)),
        parameters_(std::move(parameters)),
        rng_before_(rng_before) {}
  const char* name() const override { return "checkpoint"; }

  // d fn(x; θ): recompute fn with recording on, then differentiate it with the incoming gradients.
  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    GradModeGuard recording(true);
    std::vector<Tensor> leaves;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const Tensor& saved = inputs_[i];
      Tensor leaf = Tensor::from_storage(saved.storage(), saved.shape(), saved.strides(), saved.offset(), saved.dtype());
      if (input_needs_grad_[i]) set_requires_grad(leaf, true);
      leaves.push_back(leaf);
    }
    std::vector<Tensor> outputs;
    {
      RngCursorGuard replay(rng_before_);  // the same random numbers as the first run
      RecomputationScope scope;
      outputs = fn_(leaves);
    }
    WICK_CHECK(outputs.size() == grad_outputs.size(), "checkpoint: the recomputation returned ", outputs.size(),
               " outputs, the first run ", grad_outputs.size(), " (fn must be deterministic)");
    std::vector<Tensor> roots, seeds;
    for (size_t k = 0; k < outputs.size(); ++k) {
      WICK_CHECK(outputs[k].shape() == grad_outputs[k].shape(), "checkpoint: recomputed output ", k, " is ",
                 outputs[k].describe(), ", the first run's was ", grad_outputs[k].shape());
      if (!requires_grad(outputs[k])) continue;
      roots.push_back(outputs[k]);
      seeds.push_back(grad_outputs[k]);
    }
    GradientStore inner;
    if (!roots.empty()) wick::autograd::backward(roots, seeds, inner, GradientMode::Overwrite, /*fire_hooks=*/false);
    std::vector<Tensor> grads;
    for (const Tensor& leaf : leaves) grads.push_back(requires_grad(leaf) ? inner.get(leaf) : Tensor());
    for (const Tensor& parameter : parameters_) grads.push_back(inner.get(parameter));
    return grads;
  }
  void release() override {
    inputs_.clear();
    parameters_.clear();
    fn_ = nullptr;
  }

 private:
  CheckpointFunction fn_;
  std::vector<Tensor> inputs_;  // detached
  std::vector<bool> input_needs_grad_;
  std::vector<Tensor> parameters_;
  RngCursor rng_before_;
};

}  // namespace

std::vector<Tensor> checkpoint(const CheckpointFunction& fn, const std::vector<Tensor>& inputs,
                               const std::vector<Tensor>& parameters) {
  std::vector<Tensor> all = inputs;
  all.insert(all.end(), parameters.begin(), parameters.end());
  if (!needs_grad(all)) return fn(inputs);
  RngCursor rng_before = current_rng();
  std::vector<Tensor> outputs;
  {
    NoGradGuard no_grad;
    outputs = fn(inputs);
  }
  std::vector<Tensor> saved;
  std::vector<bool> input_needs_grad;
  for (const Tensor& input : inputs) {
    saved.push_back(detach(input));
    input_needs_grad.push_back(requires_grad(input));
  }
  auto node = std::make_shared<CheckpointNode>(fn, std::move(saved), std::move(input_needs_grad), parameters,
                                               rng_before);
  std::vector<Tensor*> output_slots;
  for (Tensor& out : outputs) output_slots.push_back(&out);
  record(node, all, output_slots);
  return outputs;
}

bool recomputing() { return recomputation_depth > 0; }

Tensor checkpoint(Module& module, const Tensor& x) {
  std::vector<Tensor> parameters;
  for (auto& [name, tensor] : module.trainable_parameters()) parameters.push_back(tensor);
  Module* target = &module;
  return checkpoint([target](const std::vector<Tensor>& in) { return std::vector<Tensor>{target->forward(in[0])}; },
                    {x}, parameters)[0];
}

}  // namespace wick::autograd
