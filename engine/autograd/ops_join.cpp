#include "engine/autograd/ops_join.h"

#include <utility>

#include "engine/autograd/node.h"
#include "runtime/ops/copy.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/index.h"
#include "runtime/ops/reduce.h"

namespace wick::autograd {
namespace {

class ConcatNode : public Node {
 public:
  ConcatNode(int64_t axis, std::vector<int64_t> sizes, std::vector<DType> dtypes)
      : axis_(axis), sizes_(std::move(sizes)), dtypes_(std::move(dtypes)) {}
  const char* name() const override { return "concat"; }
  // y = [x_0, x_1, ...] along axis  =>  dx_i = the slice of dy where x_i sits
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    std::vector<Tensor> grads;
    int64_t at = 0;
    for (size_t i = 0; i < sizes_.size(); ++i) {
      grads.push_back(grad[0].narrow(axis_, at, sizes_[i]).to(dtypes_[i]));
      at += sizes_[i];
    }
    return grads;
  }

 private:
  int64_t axis_;
  std::vector<int64_t> sizes_;
  std::vector<DType> dtypes_;
};

class StackNode : public Node {
 public:
  StackNode(int64_t axis, std::vector<DType> dtypes) : axis_(axis), dtypes_(std::move(dtypes)) {}
  const char* name() const override { return "stack"; }
  // y[..., i, ...] = x_i  =>  dx_i = dy.select(axis, i)
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    std::vector<Tensor> grads;
    for (size_t i = 0; i < dtypes_.size(); ++i)
      grads.push_back(grad[0].select(axis_, static_cast<int64_t>(i)).to(dtypes_[i]));
    return grads;
  }

 private:
  int64_t axis_;
  std::vector<DType> dtypes_;
};

// split / chunk: one node, one output per piece.
class SplitNode : public Node {
 public:
  SplitNode(const char* name, int64_t axis) : name_(name), axis_(axis) {}
  const char* name() const override { return name_; }
  // y_i = x[pieces i]  =>  dx = [dy_0, dy_1, ...] along axis (zeros for pieces that got no gradient)
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override { return {wick::concat(grad, axis_)}; }

 private:
  const char* name_;
  int64_t axis_;
};

void add_into(const Tensor& window, const Tensor& addend) { copy_into(window, wick::add(window, addend)); }

// `t` reversed along axis (a small index_select with n indices).
Tensor flip(const Tensor& t, int64_t axis) {
  int64_t n = t.size(axis);
  std::vector<int64_t> reversed(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) reversed[static_cast<size_t>(i)] = n - 1 - i;
  return wick::index_select(t, axis, Tensor::from_vector<int64_t>(reversed, {n}, t.device()));
}

class PadNode : public Node {
 public:
  PadNode(Shape input_shape, std::vector<int64_t> pads, PadMode mode)
      : input_shape_(std::move(input_shape)), pads_(std::move(pads)), mode_(mode) {}
  const char* name() const override { return "pad"; }
  // Per padded axis d with extent n, pads (before, after): y[j] = x[source(j)], so
  // dx[k] = sum over j with source(j) = k of dy[j]: the interior dy[before + k], plus
  //   reflect:   dx[1 .. before] += flip(dy[0 .. before)),  dx[n-1-after .. n-2] += flip(dy[before+n ..))
  //   replicate: dx[0] += sum(dy[0 .. before)),            dx[n-1] += sum(dy[before+n ..))
  //   constant:  nothing more (the border is a constant).
  // The axes are independent, so their adjoints apply one after another.
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    Tensor g = grad[0];
    int64_t rank = static_cast<int64_t>(input_shape_.size());
    for (size_t k = 0; k < pads_.size() / 2; ++k) {
      int64_t d = rank - 1 - static_cast<int64_t>(k), before = pads_[2 * k], after = pads_[2 * k + 1];
      int64_t n = input_shape_[static_cast<size_t>(d)];
      if (before == 0 && after == 0) continue;
      if (mode_ == PadMode::Constant) {
        g = g.narrow(d, before, n);
        continue;
      }
      Tensor inner = g.narrow(d, before, n).clone();
      if (before > 0) {
        Tensor border = g.narrow(d, 0, before);
        if (mode_ == PadMode::Reflect)
          add_into(inner.narrow(d, 1, before), flip(border, d));
        else
          add_into(inner.narrow(d, 0, 1), wick::sum(border, {d}, /*keepdim=*/true));
      }
      if (after > 0) {
        Tensor border = g.narrow(d, before + n, after);
        if (mode_ == PadMode::Reflect)
          add_into(inner.narrow(d, n - 1 - after, after), flip(border, d));
        else
          add_into(inner.narrow(d, n - 1, 1), wick::sum(border, {d}, /*keepdim=*/true));
      }
      g = inner;
    }
    return {g};
  }

 private:
  Shape input_shape_;
  std::vector<int64_t> pads_;
  PadMode mode_;
};

std::vector<Tensor> record_split(const char* name, const Tensor& x, int64_t axis, std::vector<Tensor> parts) {
  if (!needs_grad({x})) return parts;
  std::vector<Tensor*> outputs;
  for (Tensor& part : parts) outputs.push_back(&part);
  record(std::make_shared<SplitNode>(name, normalize_axis(axis, x.dim(), name)), {x}, outputs);
  return parts;
}

}  // namespace

Tensor concat(const std::vector<Tensor>& tensors, int64_t axis) {
  Tensor out = wick::concat(tensors, axis);  // validates
  if (needs_grad(tensors)) {
    int64_t a = normalize_axis(axis, out.dim(), "concat");
    std::vector<int64_t> sizes;
    std::vector<DType> dtypes;
    for (const Tensor& t : tensors) {
      sizes.push_back(t.size(a));
      dtypes.push_back(t.dtype());
    }
    record(std::make_shared<ConcatNode>(a, std::move(sizes), std::move(dtypes)), tensors, out);
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t axis) {
  Tensor out = wick::stack(tensors, axis);  // validates
  if (needs_grad(tensors)) {
    std::vector<DType> dtypes;
    for (const Tensor& t : tensors) dtypes.push_back(t.dtype());
    record(std::make_shared<StackNode>(normalize_axis(axis, out.dim(), "stack"), std::move(dtypes)), tensors, out);
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t axis) {
  return record_split("split", x, axis, wick::split(x, size, axis));
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t axis) {
  return record_split("split", x, axis, wick::split(x, sizes, axis));
}

std::vector<Tensor> chunk(const Tensor& x, int64_t n_chunks, int64_t axis) {
  return record_split("chunk", x, axis, wick::chunk(x, n_chunks, axis));
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode, double value) {
  Tensor out = wick::pad(x, pads, mode, value);  // validates
  if (needs_grad({x})) record(std::make_shared<PadNode>(x.shape(), pads, mode), {x}, out);
  return out;
}

}  // namespace wick::autograd
