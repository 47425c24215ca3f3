#include "engine/autograd/node.h"

#include <atomic>

#include "engine/autograd/grad_mode.h"
#include "runtime/ops/reduce.h"

namespace wick::autograd {
namespace {

uint64_t next_sequence() {
  static std::atomic<uint64_t> counter{1};
  return counter.fetch_add(1);
}

}  // namespace

bool requires_grad(const Tensor& tensor) {
  return tensor.defined() && tensor.autograd() != nullptr && tensor.autograd()->requires_grad;
}

bool is_leaf(const Tensor& tensor) { return !tensor.autograd() || tensor.autograd()->grad_fn == nullptr; }

std::shared_ptr<Node> grad_fn(const Tensor& tensor) {
  return tensor.autograd() ? tensor.autograd()->grad_fn : nullptr;
}

void set_requires_grad(const Tensor& tensor, bool required, const std::string& name) {
  WICK_CHECK(tensor.defined(), "set_requires_grad: undefined tensor");
  WICK_CHECK(is_leaf(tensor), "set_requires_grad: ", tensor.describe(),
             " is the output of an op; only leaves (parameters, inputs) can be marked (detach it first)");
  WICK_CHECK(!required || is_floating(tensor.dtype()), "set_requires_grad: only floating tensors can require a "
             "gradient, got ", tensor.describe());
  if (!tensor.autograd()) tensor.set_autograd(std::make_shared<AutogradMeta>());
  tensor.autograd()->requires_grad = required;
  if (!name.empty()) tensor.autograd()->name = name;
}

Tensor detach(const Tensor& tensor) {
  // Always a fresh handle: a node that saves detach(out) before record() gives `out` its autograd
  // state must not share that state (it would point back at the node: a reference cycle).
  if (!tensor.defined()) return tensor;
  return Tensor::from_storage(tensor.storage(), tensor.shape(), tensor.strides(), tensor.offset(), tensor.dtype());
}

void set_leaf_hook(const Tensor& leaf, std::function<void(const Tensor&, const Tensor&)> on_ready) {
  WICK_CHECK(requires_grad(leaf) && is_leaf(leaf), "set_leaf_hook: ", leaf.describe(),
             " is not a leaf that requires a gradient");
  if (on_ready)
    leaf.autograd()->hook = std::make_shared<LeafHook>(LeafHook{std::move(on_ready)});
  else
    leaf.autograd()->hook.reset();
}

bool needs_grad(std::initializer_list<Tensor> inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (requires_grad(t)) return true;
  return false;
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (requires_grad(t)) return true;
  return false;
}

void record(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs, std::vector<Tensor*> outputs) {
  node->next_edges.clear();
  node->next_edges.reserve(inputs.size());
  for (const Tensor& input : inputs) {
    Edge edge;
    if (requires_grad(input)) {
      if (auto fn = input.autograd()->grad_fn) {
        edge.node = std::move(fn);
        edge.output_index = input.autograd()->output_index;
      } else {
        edge.leaf = input;
      }
    }
    node->next_edges.push_back(std::move(edge));
  }
  node->sequence = next_sequence();
  node->output_shapes.clear();
  node->output_dtypes.clear();
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor& out = *outputs[i];
    // An output that is one of the inputs (an op that returned its input unchanged) gets its own
    // handle, so the input's autograd state is never overwritten.
    for (const Tensor& input : inputs)
      if (input.defined() && out.same(input)) {
        out = Tensor::from_storage(out.storage(), out.shape(), out.strides(), out.offset(), out.dtype());
        break;
      }
    auto meta = std::make_shared<AutogradMeta>();
    meta->requires_grad = true;
    meta->grad_fn = node;
    meta->output_index = static_cast<int>(i);
    out.set_autograd(std::move(meta));
    node->output_shapes.push_back(out.shape());
    node->output_dtypes.push_back(out.dtype());
    node->device = out.device();
  }
}

Tensor sum_to_shape(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  int64_t lead = grad.dim() - static_cast<int64_t>(shape.size());
  WICK_CHECK(lead >= 0, "sum_to_shape: gradient ", grad.describe(), " has fewer axes than ", shape);
  std::vector<int64_t> axes;
  for (int64_t a = 0; a < grad.dim(); ++a) {
    if (a < lead)
      axes.push_back(a);
    else if (shape[a - lead] == 1 && grad.shape()[a] != 1)
      axes.push_back(a);
  }
  Tensor reduced = axes.empty() ? grad : wick::sum(grad, axes, /*keepdim=*/true);
  return reduced.reshape(shape);
}

}  // namespace wick::autograd
