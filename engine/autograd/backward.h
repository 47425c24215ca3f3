// Reverse-mode differentiation over the recorded graph.
//
//   Tensor loss = ...;                                // a scalar computed from parameters
//   GradientStore grads = backward(loss);             // d loss / d leaf, keyed by leaf
//   Tensor grad_w = grads.get(w);                      // undefined if w got no gradient
//
//   GradientStore store;                              // gradient accumulation over micro-steps:
//   backward(loss_a, store);                          //   overwrite (the default) ...
//   backward(loss_b, store, GradientMode::Accumulate); //   ... then add
//
// Gradients of 16-bit leaves are kept in f32; others in the leaf's dtype. Nodes run in reverse
// creation order once every gradient flowing into them has arrived; each node's saved tensors are
// released after it runs, so a graph can be differentiated once.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "engine/autograd/node.h"

namespace wick::autograd {

enum class GradientMode {
  Overwrite,   // a leaf's gradient from this pass replaces what the store held
  Accumulate,  // a leaf's gradient from this pass is added to what the store held
};

class GradientStore {
 public:
  // The gradient of `leaf`, or an undefined tensor when it received none.
  Tensor get(const Tensor& leaf) const;
  bool contains(const Tensor& leaf) const { return entries_.count(leaf.id()) != 0; }
  size_t size() const { return entries_.size(); }
  void clear() { entries_.clear(); }
  // Adds (or, with overwrite, stores) `grad` as the gradient of `leaf`, converting to the store's
  // dtype for the leaf (f32 for 16-bit leaves).
  void add(const Tensor& leaf, const Tensor& grad, bool overwrite);
  void erase(const Tensor& leaf) { entries_.erase(leaf.id()); }

  struct Entry {
    Tensor leaf;
    Tensor grad;
  };
  const std::unordered_map<uint64_t, Entry>& entries() const { return entries_; }

 private:
  std::unordered_map<uint64_t, Entry> entries_;
};

// Differentiates `root` (any shape) with respect to every leaf it depends on. `grad_root` defaults
// to ones (so for a scalar loss this is d loss / d leaf). Leaf hooks fire unless `fire_hooks` is
// false (nested passes, e.g. gradient checkpointing, pass false).
void backward(const Tensor& root, GradientStore& store, GradientMode mode = GradientMode::Overwrite,
              const Tensor& grad_root = Tensor(), bool fire_hooks = true);
GradientStore backward(const Tensor& root, const Tensor& grad_root = Tensor());
// Several roots with their gradients at once (one pass, each node runs once).
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots, GradientStore& store,
              GradientMode mode = GradientMode::Overwrite, bool fire_hooks = true);

}  // namespace wick::autograd
