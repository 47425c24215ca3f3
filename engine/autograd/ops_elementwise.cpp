#include "engine/autograd/ops_elementwise.h"

#include <cmath>

#include "engine/autograd/node.h"
#include "runtime/ops/elementwise.h"

namespace wick::autograd {
namespace {

// A 0-d zero of g's dtype on g's device (broadcasts in where).
Tensor zero_of(const Tensor& g) { return Tensor::scalar(0.0, g.dtype(), g.device()); }

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

class PowNode : public Node {
 public:
  PowNode(Tensor a, Tensor b, Tensor out, bool need_a, bool need_b)
      : a_(a), b_(b), out_(out), need_a_(need_a), need_b_(need_b) {}
  const char* name() const override { return "pow"; }
  // d(a^b) = b a^(b-1) da + a^b log(a) db; torch's masks: 0 where b == 0 (da), where a == 0 and b >= 0 (db)
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    const Tensor& g = grad[0];
    Tensor grad_a, grad_b;
    if (need_a_) {
      Tensor d = wick::mul(b_, wick::pow(a_, wick::sub(b_, 1.0)));
      grad_a = sum_to_shape(wick::where(wick::eq(b_, 0.0), zero_of(g), wick::mul(g, d)), a_.shape());
    }
    if (need_b_) {
      Tensor masked = wick::mul(wick::eq(a_, 0.0), wick::ge(b_, 0.0));  // u8 0/1
      Tensor d = wick::mul(out_, wick::log(a_));
      grad_b = sum_to_shape(wick::where(masked, zero_of(g), wick::mul(g, d)), b_.shape());
    }
    return {grad_a, grad_b};
  }
  void release() override { a_ = b_ = out_ = Tensor(); }

 private:
  Tensor a_, b_, out_;
  bool need_a_, need_b_;
};

// The gradient share of an operand of maximum/minimum: all of g where it won, half where tied.
Tensor winner_grad(const Tensor& g, const Tensor& won, const Tensor& tied) {
  return wick::where(won, g, wick::where(tied, wick::mul(g, 0.5), zero_of(g)));
}

class MaxMinNode : public Node {
 public:
  MaxMinNode(Tensor a, Tensor b, bool is_max) : a_(a), b_(b), is_max_(is_max) {}
  const char* name() const override { return is_max_ ? "maximum" : "minimum"; }
  // d max(a, b) = [a > b] da + [a < b] db, ties split 1/2 : 1/2 (torch); min mirrored
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    Tensor a_wins = is_max_ ? wick::gt(a_, b_) : wick::lt(a_, b_);
    Tensor b_wins = is_max_ ? wick::lt(a_, b_) : wick::gt(a_, b_);
    Tensor tied = wick::eq(a_, b_);
    return {sum_to_shape(winner_grad(grad[0], a_wins, tied), a_.shape()),
            sum_to_shape(winner_grad(grad[0], b_wins, tied), b_.shape())};
  }
  void release() override { a_ = b_ = Tensor(); }

 private:
  Tensor a_, b_;
  bool is_max_;
};

class WhereNode : public Node {
 public:
  WhereNode(Tensor cond, Shape a, Shape b) : cond_(std::move(cond)), a_shape_(std::move(a)), b_shape_(std::move(b)) {}
  const char* name() const override { return "where"; }
  // d where(c, a, b) = [c] da + [!c] db; no gradient to c
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    const Tensor& g = grad[0];
    Tensor zero = zero_of(g);
    return {Tensor(), sum_to_shape(wick::where(cond_, g, zero), a_shape_),
            sum_to_shape(wick::where(cond_, zero, g), b_shape_)};
  }
  void release() override { cond_ = Tensor(); }

 private:
  Tensor cond_;
  Shape a_shape_, b_shape_;
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

class DivScalarNode : public Node {
 public:
  explicit DivScalarNode(double scalar) : scalar_(scalar) {}
  const char* name() const override { return "div_scalar"; }
  // d(x / c) = dx / c
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override { return {wick::div(grad[0], scalar_)}; }

 private:
  double scalar_;
};

class ScalarDivNode : public Node {
 public:
  ScalarDivNode(Tensor x, Tensor out) : x_(std::move(x)), out_(std::move(out)) {}
  const char* name() const override { return "scalar_div"; }
  // d(c / x) = -c / x^2 dx = -(out / x) dx
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    return {wick::neg(wick::div(wick::mul(grad[0], out_), x_))};
  }
  void release() override { x_ = out_ = Tensor(); }

 private:
  Tensor x_, out_;
};

class PowScalarNode : public Node {
 public:
  PowScalarNode(Tensor x, double exponent) : x_(std::move(x)), exponent_(exponent) {}
  const char* name() const override { return "pow_scalar"; }
  // d x^e = e x^(e-1) dx (0 for e == 0)
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    if (exponent_ == 0.0) return {wick::mul(grad[0], 0.0)};
    return {wick::mul(wick::mul(grad[0], wick::pow(x_, exponent_ - 1.0)), exponent_)};
  }
  void release() override { x_ = Tensor(); }

 private:
  Tensor x_;
  double exponent_;
};

class ScalarPowNode : public Node {
 public:
  ScalarPowNode(Tensor x, Tensor out, double base) : x_(std::move(x)), out_(std::move(out)), base_(base) {}
  const char* name() const override { return "scalar_pow"; }
  // d c^x = c^x log(c) dx (0 where c == 0 and x >= 0, as torch)
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    Tensor g = wick::mul(grad[0], wick::mul(out_, std::log(base_)));
    if (base_ == 0.0) g = wick::where(wick::ge(x_, 0.0), zero_of(g), g);
    return {g};
  }
  void release() override { x_ = out_ = Tensor(); }

 private:
  Tensor x_, out_;
  double base_;
};

class MaxMinScalarNode : public Node {
 public:
  MaxMinScalarNode(Tensor x, double scalar, bool is_max) : x_(std::move(x)), scalar_(scalar), is_max_(is_max) {}
  const char* name() const override { return is_max_ ? "maximum_scalar" : "minimum_scalar"; }
  // d max(x, c) = [x > c] dx, half at x == c (as torch.maximum with a tensor c); min mirrored
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    Tensor won = is_max_ ? wick::gt(x_, scalar_) : wick::lt(x_, scalar_);
    return {winner_grad(grad[0], won, wick::eq(x_, scalar_))};
  }
  void release() override { x_ = Tensor(); }

 private:
  Tensor x_;
  double scalar_;
  bool is_max_;
};

// ---- unary ----
// A unary node keeping one tensor (its input or its output, detached) for the rule.
class UnaryNode : public Node {
 public:
  explicit UnaryNode(Tensor saved) : saved_(std::move(saved)) {}
  void release() override { saved_ = Tensor(); }

 protected:
  Tensor saved_;
};

class NegNode : public Node {
 public:
  const char* name() const override { return "neg"; }
  // d(-x) = -dx
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override { return {wick::neg(grad[0])}; }
};

class AbsNode : public UnaryNode {  // saves x
 public:
  using UnaryNode::UnaryNode;
  const char* name() const override { return "abs"; }
  // d|x| = sign(x) dx, sign(0) = 0
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    const Tensor& g = grad[0];
    return {wick::where(wick::gt(saved_, 0.0), g, wick::where(wick::lt(saved_, 0.0), wick::neg(g), zero_of(g)))};
  }
};

class ExpNode : public UnaryNode {  // saves exp(x)
 public:
  using UnaryNode::UnaryNode;
  const char* name() const override { return "exp"; }
  // d exp(x) = exp(x) dx
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override { return {wick::mul(grad[0], saved_)}; }
};

class LogNode : public UnaryNode {  // saves x
 public:
  using UnaryNode::UnaryNode;
  const char* name() const override { return "log"; }
  // d log(x) = dx / x
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override { return {wick::div(grad[0], saved_)}; }
};

class SqrtNode : public UnaryNode {  // saves sqrt(x)
 public:
  using UnaryNode::UnaryNode;
  const char* name() const override { return "sqrt"; }
  // d sqrt(x) = dx / (2 sqrt(x))
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    return {wick::div(grad[0], wick::mul(saved_, 2.0))};
  }
};

class RsqrtNode : public UnaryNode {  // saves rsqrt(x)
 public:
  using UnaryNode::UnaryNode;
  const char* name() const override { return "rsqrt"; }
  // d x^(-1/2) = -1/2 x^(-3/2) dx = -1/2 rsqrt(x)^3 dx
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    return {wick::mul(wick::mul(grad[0], wick::pow(saved_, 3.0)), -0.5)};
  }
};

class SquareNode : public UnaryNode {  // saves x
 public:
  using UnaryNode::UnaryNode;
  const char* name() const override { return "square"; }
  // d x^2 = 2 x dx
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    return {wick::mul(wick::mul(grad[0], saved_), 2.0)};
  }
};

class SinNode : public UnaryNode {  // saves x
 public:
  using UnaryNode::UnaryNode;
  const char* name() const override { return "sin"; }
  // d sin(x) = cos(x) dx
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    return {wick::mul(grad[0], wick::cos(saved_))};
  }
};

class CosNode : public UnaryNode {  // saves x
 public:
  using UnaryNode::UnaryNode;
  const char* name() const override { return "cos"; }
  // d cos(x) = -sin(x) dx
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    return {wick::neg(wick::mul(grad[0], wick::sin(saved_)))};
  }
};

class TanhNode : public UnaryNode {  // saves tanh(x)
 public:
  using UnaryNode::UnaryNode;
  const char* name() const override { return "tanh"; }
  // d tanh(x) = (1 - tanh(x)^2) dx
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    return {wick::mul(grad[0], wick::sub(1.0, wick::square(saved_)))};
  }
};

class SigmoidNode : public UnaryNode {  // saves sigmoid(x)
 public:
  using UnaryNode::UnaryNode;
  const char* name() const override { return "sigmoid"; }
  // d s(x) = s(x) (1 - s(x)) dx
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    return {wick::mul(wick::mul(grad[0], saved_), wick::sub(1.0, saved_))};
  }
};

class ReluNode : public UnaryNode {  // saves relu(x)
 public:
  using UnaryNode::UnaryNode;
  const char* name() const override { return "relu"; }
  // d relu(x) = [x > 0] dx (0 at 0)
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    return {wick::where(wick::gt(saved_, 0.0), grad[0], zero_of(grad[0]))};
  }
};

class ActivationNode : public UnaryNode {  // saves x; silu, gelu, gelu_tanh
 public:
  ActivationNode(Tensor x, UnaryOp op) : UnaryNode(std::move(x)), op_(op) {}
  const char* name() const override { return unary_op_name(op_); }
  // d f(x) = f'(x) dx in one fused kernel (runtime/ops/elementwise.h states each f')
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    return {wick::unary_backward(op_, grad[0].to(saved_.dtype()), saved_)};
  }

 private:
  UnaryOp op_;
};

template <typename NodeT>
Tensor unary_recorded(const Tensor& x, Tensor out, const Tensor& saved) {
  if (needs_grad({x})) record(std::make_shared<NodeT>(detach(saved)), {x}, out);
  return out;
}

}  // namespace

// ---- binary ----

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

Tensor pow(const Tensor& a, const Tensor& b) {
  Tensor out = wick::pow(a, b);
  if (needs_grad({a, b}))
    record(std::make_shared<PowNode>(detach(a), detach(b), detach(out), requires_grad(a), requires_grad(b)),
           {a, b}, out);
  return out;
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  Tensor out = wick::maximum(a, b);
  if (needs_grad({a, b})) record(std::make_shared<MaxMinNode>(detach(a), detach(b), true), {a, b}, out);
  return out;
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  Tensor out = wick::minimum(a, b);
  if (needs_grad({a, b})) record(std::make_shared<MaxMinNode>(detach(a), detach(b), false), {a, b}, out);
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Tensor out = wick::where(cond, a, b);
  // cond enters detached: its edge stays inactive even if it was computed from tensors that require grad.
  if (needs_grad({a, b}))
    record(std::make_shared<WhereNode>(detach(cond), a.shape(), b.shape()), {detach(cond), a, b}, out);
  return out;
}

// ---- with a scalar ----

Tensor add(const Tensor& x, double scalar) {
  Tensor out = wick::add(x, scalar);
  if (needs_grad({x})) record(std::make_shared<AddScalarNode>(), {x}, out);
  return out;
}

Tensor sub(const Tensor& x, double scalar) {
  Tensor out = wick::sub(x, scalar);
  if (needs_grad({x})) record(std::make_shared<AddScalarNode>(), {x}, out);
  return out;
}

Tensor sub(double scalar, const Tensor& x) {
  Tensor out = wick::sub(scalar, x);
  if (needs_grad({x})) record(std::make_shared<NegNode>(), {x}, out);
  return out;
}

Tensor mul(const Tensor& x, double scalar) {
  Tensor out = wick::mul(x, scalar);
  if (needs_grad({x})) record(std::make_shared<MulScalarNode>(scalar), {x}, out);
  return out;
}

Tensor div(const Tensor& x, double scalar) {
  Tensor out = wick::div(x, scalar);
  if (needs_grad({x})) record(std::make_shared<DivScalarNode>(scalar), {x}, out);
  return out;
}

Tensor div(double scalar, const Tensor& x) {
  Tensor out = wick::div(scalar, x);
  if (needs_grad({x})) record(std::make_shared<ScalarDivNode>(detach(x), detach(out)), {x}, out);
  return out;
}

Tensor pow(const Tensor& x, double exponent) {
  Tensor out = wick::pow(x, exponent);
  if (needs_grad({x})) record(std::make_shared<PowScalarNode>(detach(x), exponent), {x}, out);
  return out;
}

Tensor pow(double base, const Tensor& x) {
  Tensor out = wick::pow(base, x);
  if (needs_grad({x})) record(std::make_shared<ScalarPowNode>(detach(x), detach(out), base), {x}, out);
  return out;
}

Tensor maximum(const Tensor& x, double scalar) {
  Tensor out = wick::maximum(x, scalar);
  if (needs_grad({x})) record(std::make_shared<MaxMinScalarNode>(detach(x), scalar, true), {x}, out);
  return out;
}

Tensor minimum(const Tensor& x, double scalar) {
  Tensor out = wick::minimum(x, scalar);
  if (needs_grad({x})) record(std::make_shared<MaxMinScalarNode>(detach(x), scalar, false), {x}, out);
  return out;
}

// ---- unary ----

Tensor neg(const Tensor& x) {
  Tensor out = wick::neg(x);
  if (needs_grad({x})) record(std::make_shared<NegNode>(), {x}, out);
  return out;
}

Tensor abs(const Tensor& x) { return unary_recorded<AbsNode>(x, wick::abs(x), x); }
Tensor exp(const Tensor& x) {
  Tensor out = wick::exp(x);
  return unary_recorded<ExpNode>(x, out, out);
}
Tensor log(const Tensor& x) { return unary_recorded<LogNode>(x, wick::log(x), x); }
Tensor sqrt(const Tensor& x) {
  Tensor out = wick::sqrt(x);
  return unary_recorded<SqrtNode>(x, out, out);
}
Tensor rsqrt(const Tensor& x) {
  Tensor out = wick::rsqrt(x);
  return unary_recorded<RsqrtNode>(x, out, out);
}
Tensor square(const Tensor& x) { return unary_recorded<SquareNode>(x, wick::square(x), x); }
Tensor sin(const Tensor& x) { return unary_recorded<SinNode>(x, wick::sin(x), x); }
Tensor cos(const Tensor& x) { return unary_recorded<CosNode>(x, wick::cos(x), x); }
Tensor tanh(const Tensor& x) {
  Tensor out = wick::tanh(x);
  return unary_recorded<TanhNode>(x, out, out);
}
Tensor sigmoid(const Tensor& x) {
  Tensor out = wick::sigmoid(x);
  return unary_recorded<SigmoidNode>(x, out, out);
}
Tensor relu(const Tensor& x) {
  Tensor out = wick::relu(x);
  return unary_recorded<ReluNode>(x, out, out);
}

namespace {
Tensor activation(UnaryOp op, const Tensor& x) {
  Tensor out = wick::unary(op, x);
  if (needs_grad({x})) record(std::make_shared<ActivationNode>(detach(x), op), {x}, out);
  return out;
}
}  // namespace

Tensor silu(const Tensor& x) { return activation(UnaryOp::Silu, x); }
Tensor gelu(const Tensor& x) { return activation(UnaryOp::Gelu, x); }
Tensor gelu_tanh(const Tensor& x) { return activation(UnaryOp::GeluTanh, x); }

// ---- comparisons (not differentiable) ----

Tensor eq(const Tensor& a, const Tensor& b) { return wick::eq(a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return wick::ne(a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return wick::lt(a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return wick::le(a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return wick::gt(a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return wick::ge(a, b); }
Tensor eq(const Tensor& x, double scalar) { return wick::eq(x, scalar); }
Tensor ne(const Tensor& x, double scalar) { return wick::ne(x, scalar); }
Tensor lt(const Tensor& x, double scalar) { return wick::lt(x, scalar); }
Tensor le(const Tensor& x, double scalar) { return wick::le(x, scalar); }
Tensor gt(const Tensor& x, double scalar) { return wick::gt(x, scalar); }
Tensor ge(const Tensor& x, double scalar) { return wick::ge(x, scalar); }

}  // namespace wick::autograd

namespace wick {

Tensor operator-(const Tensor& x) { return autograd::neg(x); }
Tensor operator+(const Tensor& a, const Tensor& b) { return autograd::add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return autograd::sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return autograd::mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return autograd::div(a, b); }
Tensor operator+(const Tensor& x, double scalar) { return autograd::add(x, scalar); }
Tensor operator+(double scalar, const Tensor& x) { return autograd::add(x, scalar); }
Tensor operator-(const Tensor& x, double scalar) { return autograd::sub(x, scalar); }
Tensor operator-(double scalar, const Tensor& x) { return autograd::sub(scalar, x); }
Tensor operator*(const Tensor& x, double scalar) { return autograd::mul(x, scalar); }
Tensor operator*(double scalar, const Tensor& x) { return autograd::mul(x, scalar); }
Tensor operator/(const Tensor& x, double scalar) { return autograd::div(x, scalar); }
Tensor operator/(double scalar, const Tensor& x) { return autograd::div(scalar, x); }

}  // namespace wick
