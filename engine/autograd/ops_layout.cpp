#include "engine/autograd/ops_layout.h"

#include <functional>
#include <utility>

#include "engine/autograd/node.h"
#include "runtime/ops/copy.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/layout.h"

namespace wick::autograd {
namespace {

// reshape, view, flatten, squeeze, unsqueeze: the same elements in a new shape.
class ReshapeNode : public Node {
 public:
  ReshapeNode(const char* name, Shape input_shape) : name_(name), input_shape_(std::move(input_shape)) {}
  const char* name() const override { return name_; }
  // d reshape(x) = reshape(dx): the gradient takes x's shape back
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override { return {grad[0].reshape(input_shape_)}; }

 private:
  const char* name_;
  Shape input_shape_;
};

class PermuteNode : public Node {
 public:
  explicit PermuteNode(std::vector<int64_t> inverse) : inverse_(std::move(inverse)) {}
  const char* name() const override { return "permute"; }
  // y = x.permute(order)  =>  dx = dy.permute(inverse(order))
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override { return {grad[0].permute(inverse_)}; }

 private:
  std::vector<int64_t> inverse_;
};

// narrow, slice, select: y is a window of x; x's gradient is zero outside the window.
class WindowNode : public Node {
 public:
  WindowNode(const char* name, Shape input_shape, std::function<Tensor(const Tensor&)> window)
      : name_(name), input_shape_(std::move(input_shape)), window_(std::move(window)) {}
  const char* name() const override { return name_; }
  // y = window(x)  =>  dx = zeros with window(dx) = dy
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    Tensor grad_x = wick::zeros(input_shape_, grad[0].dtype(), grad[0].device());
    copy_into(window_(grad_x), grad[0]);
    return {grad_x};
  }

 private:
  const char* name_;
  Shape input_shape_;
  std::function<Tensor(const Tensor&)> window_;
};

class ExpandNode : public Node {
 public:
  explicit ExpandNode(Shape input_shape) : input_shape_(std::move(input_shape)) {}
  const char* name() const override { return "expand"; }
  // y = x broadcast  =>  dx = dy summed over the broadcast axes
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    return {sum_to_shape(grad[0], input_shape_)};
  }

 private:
  Shape input_shape_;
};

class IdentityNode : public Node {
 public:
  explicit IdentityNode(const char* name) : name_(name) {}
  const char* name() const override { return name_; }
  // d contiguous(x) = dx
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override { return {grad[0]}; }

 private:
  const char* name_;
};

class ToDTypeNode : public Node {
 public:
  explicit ToDTypeNode(DType input_dtype) : input_dtype_(input_dtype) {}
  const char* name() const override { return "to_dtype"; }
  // d cast(x) = cast(dx): the gradient is cast back to x's dtype
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override { return {grad[0].to(input_dtype_)}; }

 private:
  DType input_dtype_;
};

class ToDeviceNode : public Node {
 public:
  explicit ToDeviceNode(Device input_device) : input_device_(input_device) {}
  const char* name() const override { return "to_device"; }
  // d move(x) = move(dx): the gradient goes back to x's device
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override { return {grad[0].to(input_device_)}; }

 private:
  Device input_device_;
};

Tensor record_reshape(const char* name, const Tensor& x, Tensor out) {
  if (needs_grad({x})) record(std::make_shared<ReshapeNode>(name, x.shape()), {x}, out);
  return out;
}

}  // namespace

Tensor view(const Tensor& x, Shape shape) { return record_reshape("view", x, x.view(std::move(shape))); }
Tensor reshape(const Tensor& x, Shape shape) { return record_reshape("reshape", x, x.reshape(std::move(shape))); }
Tensor flatten(const Tensor& x, int64_t start_axis, int64_t end_axis) {
  return record_reshape("flatten", x, x.flatten(start_axis, end_axis));
}
Tensor squeeze(const Tensor& x, int64_t axis) { return record_reshape("squeeze", x, x.squeeze(axis)); }
Tensor squeeze(const Tensor& x) { return record_reshape("squeeze", x, x.squeeze()); }
Tensor unsqueeze(const Tensor& x, int64_t axis) { return record_reshape("unsqueeze", x, x.unsqueeze(axis)); }

Tensor permute(const Tensor& x, const std::vector<int64_t>& order) {
  Tensor out = x.permute(order);  // validates the order
  if (needs_grad({x})) {
    std::vector<int64_t> inverse(order.size());
    for (size_t i = 0; i < order.size(); ++i) inverse[normalize_axis(order[i], x.dim(), "permute")] = int64_t(i);
    record(std::make_shared<PermuteNode>(std::move(inverse)), {x}, out);
  }
  return out;
}

Tensor transpose(const Tensor& x, int64_t axis_a, int64_t axis_b) {
  std::vector<int64_t> order(static_cast<size_t>(x.dim()));
  for (int64_t i = 0; i < x.dim(); ++i) order[i] = i;
  std::swap(order[normalize_axis(axis_a, x.dim(), "transpose")], order[normalize_axis(axis_b, x.dim(), "transpose")]);
  return permute(x, order);  // a transposition is its own inverse; permute records it
}

Tensor narrow(const Tensor& x, int64_t axis, int64_t start, int64_t length) {
  Tensor out = x.narrow(axis, start, length);
  if (needs_grad({x}))
    record(std::make_shared<WindowNode>("narrow", x.shape(),
                                        [=](const Tensor& t) { return t.narrow(axis, start, length); }),
           {x}, out);
  return out;
}

Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t end, int64_t step) {
  Tensor out = x.slice(axis, start, end, step);
  if (needs_grad({x}))
    record(std::make_shared<WindowNode>("slice", x.shape(),
                                        [=](const Tensor& t) { return t.slice(axis, start, end, step); }),
           {x}, out);
  return out;
}

Tensor select(const Tensor& x, int64_t axis, int64_t index) {
  Tensor out = x.select(axis, index);
  if (needs_grad({x}))
    record(std::make_shared<WindowNode>("select", x.shape(),
                                        [=](const Tensor& t) { return t.select(axis, index); }),
           {x}, out);
  return out;
}

Tensor expand(const Tensor& x, const Shape& shape) {
  Tensor out = x.expand(shape);
  if (needs_grad({x})) record(std::make_shared<ExpandNode>(x.shape()), {x}, out);
  return out;
}

Tensor contiguous(const Tensor& x) {
  Tensor out = x.contiguous();
  if (needs_grad({x})) record(std::make_shared<IdentityNode>("contiguous"), {x}, out);
  return out;
}

Tensor to_dtype(const Tensor& x, DType dtype) {
  Tensor out = x.to(dtype);
  // An integer target carries no gradient (a gradient only flows through floating values).
  if (needs_grad({x}) && is_floating(dtype)) record(std::make_shared<ToDTypeNode>(x.dtype()), {x}, out);
  return out;
}

Tensor to_device(const Tensor& x, Device device) {
  Tensor out = x.to(device);
  if (needs_grad({x})) record(std::make_shared<ToDeviceNode>(x.device()), {x}, out);
  return out;
}

// ---- layout changes between channels, space and tokens ----

namespace {

class PixelShuffleNode : public Node {
 public:
  explicit PixelShuffleNode(int64_t r) : r_(r) {}
  const char* name() const override { return "pixel_shuffle"; }
  // y = P x for a permutation P  =>  dx = P^-1 dy = pixel_unshuffle(dy)
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    return {wick::pixel_unshuffle(grad[0], r_)};
  }

 private:
  int64_t r_;
};

class PixelUnshuffleNode : public Node {
 public:
  explicit PixelUnshuffleNode(int64_t r) : r_(r) {}
  const char* name() const override { return "pixel_unshuffle"; }
  // y = P^-1 x  =>  dx = P dy = pixel_shuffle(dy)
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override { return {wick::pixel_shuffle(grad[0], r_)}; }

 private:
  int64_t r_;
};

class PatchifyNode : public Node {
 public:
  PatchifyNode(int64_t p, int64_t height, int64_t width) : p_(p), height_(height), width_(width) {}
  const char* name() const override { return "patchify"; }
  // y = P x  =>  dx = P^-1 dy = unpatchify(dy)
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    return {wick::unpatchify(grad[0], p_, height_, width_)};
  }

 private:
  int64_t p_, height_, width_;
};

class UnpatchifyNode : public Node {
 public:
  explicit UnpatchifyNode(int64_t p) : p_(p) {}
  const char* name() const override { return "unpatchify"; }
  // y = P^-1 t  =>  dt = P dy = patchify(dy)
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override { return {wick::patchify(grad[0], p_)}; }

 private:
  int64_t p_;
};

}  // namespace

Tensor pixel_shuffle(const Tensor& x, int64_t r) {
  Tensor out = wick::pixel_shuffle(x, r);
  if (needs_grad({x})) record(std::make_shared<PixelShuffleNode>(r), {x}, out);
  return out;
}

Tensor pixel_unshuffle(const Tensor& x, int64_t r) {
  Tensor out = wick::pixel_unshuffle(x, r);
  if (needs_grad({x})) record(std::make_shared<PixelUnshuffleNode>(r), {x}, out);
  return out;
}

Tensor patchify(const Tensor& x, int64_t p) {
  Tensor out = wick::patchify(x, p);
  if (needs_grad({x})) record(std::make_shared<PatchifyNode>(p, x.size(2), x.size(3)), {x}, out);
  return out;
}

Tensor unpatchify(const Tensor& tokens, int64_t p, int64_t height, int64_t width) {
  Tensor out = wick::unpatchify(tokens, p, height, width);
  if (needs_grad({tokens})) record(std::make_shared<UnpatchifyNode>(p), {tokens}, out);
  return out;
}
}  // namespace wick::autograd
