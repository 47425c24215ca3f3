// The recorded graph: one Node per differentiable op call, holding what its gradient rule needs.
//
//   // Inside a differentiable op (see engine/autograd/functions/*.cpp):
//   Tensor out = wick::exp(x);                                   // runtime forward
//   if (needs_grad({x})) record(std::make_shared<ExpNode>(detach(out)), {x}, {out});
//
//   Tensor w = ...;  set_requires_grad(w, true);                 // a leaf: in place, same storage
//
// A tensor that requires grad is either a leaf (set_requires_grad, e.g. a trainable parameter) or the
// output of a recorded op (it has a grad_fn). Nodes hold saved tensors detached, so the graph never
// holds a cycle; the graph lives as long as the tensors computed from it.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace wick::autograd {

class Node;

// Where a gradient flows: into another node's output slot, or into a leaf tensor.
struct Edge {
  std::shared_ptr<Node> node;  // set for non-leaf inputs
  int output_index = 0;
  Tensor leaf;                 // set for leaf inputs that require grad
  bool active() const { return node != nullptr || leaf.defined(); }
};

class Node {
 public:
  virtual ~Node() = default;
  // The op's name for error messages ("matmul").
  virtual const char* name() const = 0;
  // Gradients of the op's inputs given gradients of its outputs. grad_outputs[i] is defined for
  // every output (zeros where no gradient flowed). Returns one entry per input, in input order;
  // an undefined Tensor means "no gradient" (the engine skips inactive edges anyway).
  virtual std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) = 0;
  // Drops saved tensors after backward ran (the graph is freed as it is consumed).
  virtual void release() {}

  std::vector<Edge> next_edges;  // one per input, in input order
  std::vector<Shape> output_shapes;
  std::vector<DType> output_dtypes;
  Device device;
  uint64_t sequence = 0;  // creation order: backward runs later nodes first
  bool released = false;
};

// Per-tensor autograd state, carried in the runtime tensor's autograd slot.
struct LeafHook {
  // Called once per backward pass when the leaf's gradient is complete (all contributions summed).
  std::function<void(const Tensor& leaf, const Tensor& grad)> on_ready;
};

}  // namespace wick::autograd

namespace wick {
struct AutogradMeta {
  bool requires_grad = false;
  std::shared_ptr<autograd::Node> grad_fn;  // null for leaves
  int output_index = 0;
  std::string name;                          // parameter name, for messages
  std::shared_ptr<autograd::LeafHook> hook;  // leaves only
};
}  // namespace wick

namespace wick::autograd {

bool requires_grad(const Tensor& tensor);
// Marks a tensor as a leaf that requires (or no longer requires) a gradient. In place: the same
// tensor, same storage, same id. Throws for a non-leaf (an op's output).
void set_requires_grad(const Tensor& tensor, bool required, const std::string& name = "");
bool is_leaf(const Tensor& tensor);
std::shared_ptr<Node> grad_fn(const Tensor& tensor);
// A new handle on the same storage with no autograd state (its gradient is not tracked).
Tensor detach(const Tensor& tensor);
// Installs a hook that runs when the leaf's gradient is complete in a backward pass (used by the
// distributed gradient buckets). Replaces any previous hook; nullptr removes it.
void set_leaf_hook(const Tensor& leaf, std::function<void(const Tensor& leaf, const Tensor& grad)> on_ready);

// True when grad mode is on and any input requires a gradient.
bool needs_grad(std::initializer_list<Tensor> inputs);
bool needs_grad(const std::vector<Tensor>& inputs);

// Connects `node` to its inputs and makes it the grad_fn of `outputs` (which are modified in place:
// an output that aliases an input is first replaced by a fresh view). Fills the node's edges,
// output shapes/dtypes, device and sequence number.
void record(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs, std::vector<Tensor*> outputs);
inline void record(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs, Tensor& output) {
  record(node, inputs, std::vector<Tensor*>{&output});
}

// Sums `grad` over the axes that broadcasting expanded, so it matches `shape` (the input's shape).
Tensor sum_to_shape(const Tensor& grad, const Shape& shape);

}  // namespace wick::autograd
