#include "engine/autograd/ops_elementwise.h"

#include "engine/autograd/node.h"
#include "runtime/ops/elementwise.h"

namespace wick::autograd {
namespace {

// ---- binary ----
class AddNode : public Node {
 public:
  AddNode(Shape a, Shape b) : a_shape_(std::move(a)), b_shape_(std::move(b)) {}
  const char* name() const override { return "add"; }
  // d(a + b) = da + db
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    return {sum_to_shape(grad[0], a_shape_), sum_to_shape(grad[0], b_shape_)};
  }

 private:
  Shape a_shape_, b_shape_;
};

class SubNode : public Node {
 public:
  SubNode(Shape a, Shape b) : a_shape_(std::move(a)), b_shape_(std::move(b)) {}
  const char* name() const override { return "sub"; }
  // d(a - b) = da - db
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    return {sum_to_shape(grad[0], a_shape_), sum_to_shape(wick::neg(grad[0]), b_shape_)};
  }

 private:
  Shape a_shape_, b_shape_;
};

class MulNode : public Node {
 public:
  MulNode(Tensor a, Tensor b, bool need_a, bool need_b) : a_(a), b_(b), need_a_(need_a), need_b_(need_b) {}
  const char* name() const override { return "mul"; }
  // d(a * b) = b da + a db
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    Tensor grad_a = need_a_ ? sum_to_shape(wick::mul(grad[0], b_), a_.shape()) : Tensor();
    Tensor grad_b = need_b_ ? sum_to_shape(wick::mul(grad[0], a_), b_.shape()) : Tensor();
    return {grad_a, grad_b};
  }
  void release() override { a_ = b_ = Tensor(); }

 private:
  Tensor a_, b_;
  bool need_a_, need_b_;
};

class DivNode : public Node {
 public:
  DivNode(Tensor a, Tensor b, bool need_a, bool need_b) : a_(a), b_(b), need_a_(need_a), need_b_(need_b) {}
  const char* name() const override { return "div"; }
  // d(a / b) = da / b - a db / b^2
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    Tensor grad_a = need_a_ ? sum_to_shape(wick::div(grad[0], b_), a_.shape()) : Tensor();
    Tensor grad_b;
    if (need_b_) grad_b = sum_to_shape(wick::neg(wick::div(wick::mul(grad[0], a_), wick::square(b_))), b_.shape());
    return {grad_a, grad_b};
  }
  void release() override { a_ = b_ = Tensor(); }

 private:
  Tensor a_, b_;
  bool need_a_, need_b_;
};

// ---- with a scalar ----
class AddScalarNode : public Node {
 public:
  const char* name() const override { return "add_scalar"; }
  // d(x + c) = dx
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override { return {grad[0]}; }
};

class MulScalarNode : public Node {
 public:
  explicit MulScalarNode(double scalar) : scalar_(scalar) {}
  const char* name() const override { return "mul_scalar"; }
  // d(c x) = c dx
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override { return {wick::mul(grad[0], scalar_)}; }

 private:
  double scalar_;
};

// ---- unary ----
class ExpNode : public Node {
 public:
  explicit ExpNode(Tensor out) : out_(std::move(out)) {}
  const char* name() const override { return "exp"; }
  // d exp(x) = exp(x) dx
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override { return {wick::mul(grad[0], out_)}; }
  void release() override { out_ = Tensor(); }

 private:
  Tensor out_;
};

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = wick::add(a, b);
  if (needs_grad({a, b})) record(std::make_shared<AddNode>(a.shape(), b.shape()), {a, b}, out);
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = wick::sub(a, b);
  if (needs_grad({a, b})) record(std::make_shared<SubNode>(a.shape(), b.shape()), {a, b}, out);
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = wick::mul(a, b);
  if (needs_grad({a, b}))
    record(std::make_shared<MulNode>(detach(a), detach(b), requires_grad(a), requires_grad(b)), {a, b}, out);
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = wick::div(a, b);
  if (needs_grad({a, b}))
    record(std::make_shared<DivNode>(detach(a), detach(b), requires_grad(a), requires_grad(b)), {a, b}, out);
  return out;
}

Tensor add(const Tensor& x, double scalar) {
  Tensor out = wick::add(x, scalar);
  if (needs_grad({x})) record(std::make_shared<AddScalarNode>(), {x}, out);
  return out;
}

Tensor mul(const Tensor& x, double scalar) {
  Tensor out = wick::mul(x, scalar);
  if (needs_grad({x})) record(std::make_shared<MulScalarNode>(scalar), {x}, out);
  return out;
}

Tensor exp(const Tensor& x) {
  Tensor out = wick::exp(x);
  if (needs_grad({x})) record(std::make_shared<ExpNode>(detach(out)), {x}, out);
  return out;
}

}  // namespace wick::autograd

namespace wick {

Tensor operator-(const Tensor& x) { return autograd::mul(x, -1.0); }
Tensor operator+(const Tensor& a, const Tensor& b) { return autograd::add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return autograd::sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return autograd::mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return autograd::div(a, b); }
Tensor operator+(const Tensor& x, double scalar) { return autograd::add(x, scalar); }
Tensor operator+(double scalar, const Tensor& x) { return autograd::add(x, scalar); }
Tensor operator-(const Tensor& x, double scalar) { return autograd::add(x, -scalar); }
Tensor operator-(double scalar, const Tensor& x) { return autograd::add(autograd::mul(x, -1.0), scalar); }
Tensor operator*(const Tensor& x, double scalar) { return autograd::mul(x, scalar); }
Tensor operator*(double scalar, const Tensor& x) { return autograd::mul(x, scalar); }
Tensor operator/(const Tensor& x, double scalar) { return autograd::mul(x, 1.0 / scalar); }
Tensor operator/(double scalar, const Tensor& x) {
  return autograd::div(Tensor::scalar(scalar, x.dtype(), x.device()), x);
}

}  // namespace wick
