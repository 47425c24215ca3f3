#include "engine/autograd/backward.h"

#include <map>
#include <queue>
#include <unordered_set>

#include "engine/autograd/grad_mode.h"
#include "runtime/ops/copy.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"

namespace wick::autograd {
namespace {

DType store_dtype(DType leaf_dtype) {
  return leaf_dtype == DType::BF16 || leaf_dtype == DType::F16 ? DType::F32 : leaf_dtype;
}

// Gradients waiting for a node: one slot per output, summed as contributions arrive.
struct Pending {
  std::vector<Tensor> grads;
  int remaining = 0;  // contributions still to come (edges into this node not yet processed)
};

void accumulate_into(Tensor& slot, const Tensor& grad) {
  slot = slot.defined() ? wick::add(slot, grad) : grad;
}

}  // namespace

Tensor GradientStore::get(const Tensor& leaf) const {
  auto found = entries_.find(leaf.id());
  return found == entries_.end() ? Tensor() : found->second.grad;
}

void GradientStore::add(const Tensor& leaf, const Tensor& grad, bool overwrite) {
  WICK_CHECK(grad.shape() == leaf.shape(), "gradient of ", leaf.describe(), " has shape ", grad.shape());
  DType dtype = store_dtype(leaf.dtype());
  auto found = entries_.find(leaf.id());
  if (overwrite || found == entries_.end()) {
    // Own the memory: the gradient may be a view of a tensor the graph still uses.
    Tensor owned = Tensor::empty(leaf.shape(), dtype, grad.device());
    owned.copy_from(grad);
    entries_[leaf.id()] = Entry{leaf, owned};
    return;
  }
  Tensor& held = found->second.grad;
  held = wick::add(held, grad.dtype() == dtype ? grad : grad.to(dtype));
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots, GradientStore& store,
              GradientMode mode, bool fire_hooks) {
  WICK_CHECK(roots.size() == grad_roots.size(), "backward: ", roots.size(), " roots but ", grad_roots.size(),
             " root gradients");
  NoGradGuard no_grad;  // gradient rules use runtime ops; nothing they compute is recorded

  // 1. Discover the graph: count the edges into every node and every leaf.
  std::unordered_map<Node*, Pending> pending;
  std::unordered_map<uint64_t, int> leaf_remaining;
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  auto visit = [&](Node* node) {
    if (seen.insert(node).second) stack.push_back(node);
  };
  for (const Tensor& root : roots) {
    WICK_CHECK(requires_grad(root), "backward: ", root.describe(), " does not require a gradient (no parameter "
               "that requires a gradient took part in computing it)");
    if (auto fn = grad_fn(root)) visit(fn.get());
  }
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    WICK_CHECK(!node->released, "backward: the graph through '", node->name(), "' was already differentiated and "
               "freed; compute the forward pass again");
    Pending& own = pending[node];
    if (own.grads.empty()) own.grads.resize(node->output_shapes.size());
    for (const Edge& edge : node->next_edges) {
      if (edge.node) {
        pending[edge.node.get()].remaining += 1;
        visit(edge.node.get());
      } else if (edge.leaf.defined()) {
        leaf_remaining[edge.leaf.id()] += 1;
      }
    }
  }

  // 2. Seed the roots.
  std::map<uint64_t, Node*> ready;  // by sequence: the latest-created node runs first
  std::unordered_set<uint64_t> leaves_written;
  auto deliver_to_leaf = [&](const Tensor& leaf, const Tensor& grad) {
    bool first_this_pass = leaves_written.insert(leaf.id()).second;
    bool overwrite = first_this_pass && mode == GradientMode::Overwrite;
    if (grad.defined()) store.add(leaf, grad, overwrite);
    int& remaining = leaf_remaining[leaf.id()];
    remaining -= 1;
    if (remaining <= 0 && fire_hooks && leaf.autograd() && leaf.autograd()->hook && store.contains(leaf))
      leaf.autograd()->hook->on_ready(leaf, store.get(leaf));
  };
  for (size_t r = 0; r < roots.size(); ++r) {
    const Tensor& root = roots[r];
    Tensor seed = grad_roots[r].defined() ? grad_roots[r] : wick::ones_like(root);
    WICK_CHECK(seed.shape() == root.shape(), "backward: root gradient ", seed.describe(), " does not match root ",
               root.describe());
    if (auto fn = grad_fn(root)) {
      accumulate_into(pending[fn.get()].grads[root.autograd()->output_index], seed);
    } else {
      leaf_remaining[root.id()] += 1;
      deliver_to_leaf(root, seed);
    }
  }
  for (auto& [node, state] : pending)
    if (state.remaining == 0) ready.emplace(node->sequence, node);

  // 3. Run nodes in reverse creation order as their inputs complete.
  while (!ready.empty()) {
    auto last = std::prev(ready.end());
    Node* node = last->second;
    ready.erase(last);
    Pending& state = pending[node];
    for (size_t i = 0; i < state.grads.size(); ++i)
      if (!state.grads[i].defined())
        state.grads[i] = wick::zeros(node->output_shapes[i], node->output_dtypes[i], node->device);
    std::vector<Tensor> input_grads = node->backward(state.grads);
    WICK_CHECK(input_grads.size() == node->next_edges.size(), "backward: '", node->name(), "' returned ",
               input_grads.size(), " gradients for ", node->next_edges.size(), " inputs");
    state.grads.clear();
    node->release();
    node->released = true;
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& edge = node->next_edges[i];
      const Tensor& grad = input_grads[i];
      if (edge.node) {
        Pending& next = pending[edge.node.get()];
        if (grad.defined()) {
          WICK_CHECK(grad.shape() == edge.node->output_shapes[edge.output_index], "backward: '", node->name(),
                     "' produced a gradient of shape ", grad.shape(), " for an input of shape ",
                     edge.node->output_shapes[edge.output_index]);
          DType wanted = edge.node->output_dtypes[edge.output_index];
          accumulate_into(next.grads[edge.output_index], grad.dtype() == wanted ? grad : grad.to(wanted));
        }
        if (--next.remaining == 0) ready.emplace(edge.node->sequence, edge.node.get());
      } else if (edge.leaf.defined()) {
        deliver_to_leaf(edge.leaf, grad);
      }
    }
  }
}

void backward(const Tensor& root, GradientStore& store, GradientMode mode, const Tensor& grad_root, bool fire_hooks) {
  backward(std::vector<Tensor>{root}, std::vector<Tensor>{grad_root}, store, mode, fire_hooks);
}

GradientStore backward(const Tensor& root, const Tensor& grad_root) {
  GradientStore store;
  backward(root, store, GradientMode::Overwrite, grad_root);
  return store;
}

}  // namespace wick::autograd
