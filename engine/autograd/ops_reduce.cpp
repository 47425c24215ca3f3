#include "engine/autograd/ops_reduce.h"

#include "engine/autograd/node.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/reduce.h"

namespace wick::autograd {
namespace {

// The reduced axes, non-negative (an empty list means all axes). The forward already validated them.
std::vector<bool> reduced_mask(const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<bool> reduced(static_cast<size_t>(rank), axes.empty());
  for (int64_t a : axes) reduced[static_cast<size_t>(a < 0 ? a + rank : a)] = true;
  return reduced;
}

// The output shape with keepdim: x's shape with the reduced axes at extent 1.
Shape kept_shape(const Shape& x_shape, const std::vector<int64_t>& axes) {
  std::vector<bool> reduced = reduced_mask(axes, static_cast<int64_t>(x_shape.size()));
  Shape shape = x_shape;
  for (size_t a = 0; a < shape.size(); ++a)
    if (reduced[a]) shape[a] = 1;
  return shape;
}

// Number of elements reduced into each output element.
int64_t reduced_count(const Shape& x_shape, const std::vector<int64_t>& axes) {
  std::vector<bool> reduced = reduced_mask(axes, static_cast<int64_t>(x_shape.size()));
  int64_t n = 1;
  for (size_t a = 0; a < x_shape.size(); ++a)
    if (reduced[a]) n *= x_shape[a];
  return n;
}

// A reduction's output (or its gradient) broadcast back to x's shape: a stride-0 view.
Tensor broadcast_back(const Tensor& t, const Shape& x_shape, const std::vector<int64_t>& axes) {
  return t.reshape(kept_shape(x_shape, axes)).expand(x_shape);
}

class SumNode : public Node {
 public:
  SumNode(Shape x_shape, std::vector<int64_t> axes) : x_shape_(std::move(x_shape)), axes_(std::move(axes)) {}
  const char* name() const override { return "sum"; }
  // d sum(x) = dx summed: each input element gets the output gradient
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    return {broadcast_back(grad[0], x_shape_, axes_).contiguous()};
  }

 private:
  Shape x_shape_;
  std::vector<int64_t> axes_;
};

class MeanNode : public Node {
 public:
  MeanNode(Shape x_shape, std::vector<int64_t> axes) : x_shape_(std::move(x_shape)), axes_(std::move(axes)) {}
  const char* name() const override { return "mean"; }
  // d mean(x) = dx / N
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    double n = static_cast<double>(reduced_count(x_shape_, axes_));
    return {wick::div(broadcast_back(grad[0], x_shape_, axes_), n)};
  }

 private:
  Shape x_shape_;
  std::vector<int64_t> axes_;
};

class ExtremumNode : public Node {
 public:
  ExtremumNode(Tensor x, Tensor out, std::vector<int64_t> axes, bool is_max)
      : x_(std::move(x)), out_(std::move(out)), axes_(std::move(axes)), is_max_(is_max) {}
  const char* name() const override { return is_max_ ? "max" : "min"; }
  // d max(x) = [x == max] / count(x == max) times the output gradient (ties share evenly)
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    const Shape& shape = x_.shape();
    Tensor hit = wick::eq(x_, broadcast_back(out_, shape, axes_));  // u8
    Tensor count = wick::sum(hit, axes_, /*keepdim=*/true).to(grad[0].dtype());
    Tensor share = wick::div(broadcast_back(grad[0], shape, axes_), count.expand(shape));
    return {wick::where(hit, share, Tensor::scalar(0.0, share.dtype(), share.device()))};
  }
  void release() override { x_ = out_ = Tensor(); }

 private:
  Tensor x_, out_;
  std::vector<int64_t> axes_;
  bool is_max_;
};

class VarNode : public Node {
 public:
  VarNode(Tensor x, std::vector<int64_t> axes, double correction)
      : x_(std::move(x)), axes_(std::move(axes)), correction_(correction) {}
  const char* name() const override { return "var"; }
  // d var(x) = 2 (x - mean(x)) / max(N - correction, 0) dx
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    const Shape& shape = x_.shape();
    double n = static_cast<double>(reduced_count(shape, axes_));
    double denominator = n - correction_ > 0 ? n - correction_ : 0.0;
    Tensor centered = wick::sub(x_, wick::mean(x_, axes_, /*keepdim=*/true));
    Tensor scaled = wick::mul(broadcast_back(grad[0], shape, axes_), 2.0 / denominator);
    return {wick::mul(centered, scaled)};
  }
  void release() override { x_ = Tensor(); }

 private:
  Tensor x_;
  std::vector<int64_t> axes_;
  double correction_;
};

class LogsumexpNode : public Node {
 public:
  LogsumexpNode(Tensor x, Tensor out, std::vector<int64_t> axes)
      : x_(std::move(x)), out_(std::move(out)), axes_(std::move(axes)) {}
  const char* name() const override { return "logsumexp"; }
  // d logsumexp(x) = exp(x - logsumexp(x)) dx
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    const Shape& shape = x_.shape();
    Tensor weights = wick::exp(wick::sub(x_, broadcast_back(out_, shape, axes_)));
    return {wick::mul(weights, broadcast_back(grad[0], shape, axes_))};
  }
  void release() override { x_ = out_ = Tensor(); }

 private:
  Tensor x_, out_;
  std::vector<int64_t> axes_;
};

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
  Tensor out = wick::sum(x, axes, keepdim);
  if (needs_grad({x})) record(std::make_shared<SumNode>(x.shape(), axes), {x}, out);
  return out;
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
  Tensor out = wick::mean(x, axes, keepdim);
  if (needs_grad({x})) record(std::make_shared<MeanNode>(x.shape(), axes), {x}, out);
  return out;
}

Tensor max(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
  Tensor out = wick::max(x, axes, keepdim);
  if (needs_grad({x})) record(std::make_shared<ExtremumNode>(detach(x), detach(out), axes, true), {x}, out);
  return out;
}

Tensor min(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
  Tensor out = wick::min(x, axes, keepdim);
  if (needs_grad({x})) record(std::make_shared<ExtremumNode>(detach(x), detach(out), axes, false), {x}, out);
  return out;
}

Tensor argmax(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
  return wick::argmax(x, axes, keepdim);
}

Tensor var(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim, double correction) {
  Tensor out = wick::var(x, axes, keepdim, correction);
  if (needs_grad({x})) record(std::make_shared<VarNode>(detach(x), axes, correction), {x}, out);
  return out;
}

Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
  Tensor out = wick::logsumexp(x, axes, keepdim);
  if (needs_grad({x})) record(std::make_shared<LogsumexpNode>(detach(x), detach(out), axes), {x}, out);
  return out;
}

}  // namespace wick::autograd
