#include "engine/autograd/ops_matmul.h"

#include <utility>

#include "engine/autograd/node.h"
#include "runtime/ops/matmul.h"
#include "runtime/ops/reduce.h"

namespace wick::autograd {
namespace {

// ---- matmul ----
// Works on the operands as multiplied: a2 = op(a) (1-d a as [1, K]) and b2 = op(b) (1-d b as
// [K, 1]), where op transposes the last two axes when the call asked for it; their product c2
// [batch..., M, N] is the output before the 1-d axes were removed.
class MatmulNode : public Node {
 public:
  MatmulNode(const Tensor& a, const Tensor& b, bool need_a, bool need_b, bool transpose_a, bool transpose_b)
      : a_shape_(a.shape()), b_shape_(b.shape()), need_a_(need_a), need_b_(need_b), transpose_a_(transpose_a),
        transpose_b_(transpose_b) {
    // grad_a needs b and grad_b needs a: keep only what is used.
    if (need_b) a_ = detach(a);
    if (need_a) b_ = detach(b);
  }
  const char* name() const override { return "matmul"; }
  // d(a @ b) = da @ b + a @ db, so grad_a = g @ b^T and grad_b = a^T @ g, summed over broadcast
  // batch axes (and transposed back where the forward used a transposed view).
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    Shape a2_shape = operand_shape(a_shape_, transpose_a_, true);
    Shape b2_shape = operand_shape(b_shape_, transpose_b_, false);
    Shape full = broadcast_shapes(Shape(a2_shape.begin(), a2_shape.end() - 2),
                                  Shape(b2_shape.begin(), b2_shape.end() - 2), "matmul");
    full.push_back(a2_shape[a2_shape.size() - 2]);
    full.push_back(b2_shape.back());
    Tensor g2 = grad[0].reshape(full);
    Tensor grad_a, grad_b;
    if (need_a_) {
      Tensor b2 = as_operand(b_, transpose_b_, false);
      grad_a = sum_to_shape(wick::matmul(g2, b2, false, true), a2_shape);
      grad_a = transpose_a_ ? grad_a.transpose(-2, -1) : grad_a.reshape(a_shape_);
    }
    if (need_b_) {
      Tensor a2 = as_operand(a_, transpose_a_, true);
      if (b2_shape.size() == 2 && g2.dim() > 2) {
        // A shared matrix: all batch axes come from a, so one GEMM over all rows: a2^T @ g2.
        int64_t k = a2.size(-1), n = g2.size(-1);
        grad_b = wick::matmul(a2.reshape({-1, k}), g2.reshape({-1, n}), true, false);
      } else {
        grad_b = sum_to_shape(wick::matmul(a2, g2, true, false), b2_shape);
      }
      grad_b = transpose_b_ ? grad_b.transpose(-2, -1) : grad_b.reshape(b_shape_);
    }
    return {grad_a, grad_b};
  }
  void release() override { a_ = b_ = Tensor(); }

 private:
  // The shape of an operand as multiplied (1-d extended, transposed when asked).
  static Shape operand_shape(Shape shape, bool transpose, bool left) {
    if (shape.size() == 1) shape.insert(left ? shape.begin() : shape.end(), 1);
    if (transpose) std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
    return shape;
  }
  static Tensor as_operand(const Tensor& t, bool transpose, bool left) {
    if (t.dim() == 1) return t.unsqueeze(left ? 0 : 1);
    return transpose ? t.transpose(-2, -1) : t;
  }

  Shape a_shape_, b_shape_;
  Tensor a_, b_;
  bool need_a_, need_b_, transpose_a_, transpose_b_;
};

// ---- linear ----
class LinearNode : public Node {
 public:
  LinearNode(Tensor x, Tensor weight, bool need_x, bool need_weight, bool need_bias)
      : x_(std::move(x)), weight_(std::move(weight)), need_x_(need_x), need_weight_(need_weight),
        need_bias_(need_bias) {}
  const char* name() const override { return "linear"; }
  // y = x W^T + b: grad_x = g W, grad_W = g^T x and grad_b = g, each summed over x's leading axes.
  // Only the gradients asked for are computed (a frozen bias costs no reduction).
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    const Tensor& g = grad[0];
    int64_t n_out = weight_.size(0), n_in = weight_.size(1);
    Tensor grad_x, grad_weight, grad_bias;
    if (need_x_) grad_x = wick::matmul(g, weight_.to(g.dtype()));
    if (need_weight_)
      grad_weight = wick::matmul(g.reshape({-1, n_out}), x_.reshape({-1, n_in}).to(g.dtype()), true, false);
    if (need_bias_) {
      std::vector<int64_t> leading;
      for (int64_t axis = 0; axis + 1 < g.dim(); ++axis) leading.push_back(axis);
      grad_bias = leading.empty() ? g : wick::sum(g, leading);
    }
    return {grad_x, grad_weight, grad_bias};
  }
  void release() override { x_ = weight_ = Tensor(); }

 private:
  Tensor x_, weight_;
  bool need_x_, need_weight_, need_bias_;
};

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  return autograd::matmul(a, b, false, false);
}

Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  Tensor out = wick::matmul(a, b, transpose_a, transpose_b);
  if (needs_grad({a, b}))
    record(std::make_shared<MatmulNode>(a, b, requires_grad(a), requires_grad(b), transpose_a, transpose_b), {a, b},
           out);
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  Tensor out = wick::linear(x, weight, bias);
  if (needs_grad({x, weight, bias}))
    record(std::make_shared<LinearNode>(requires_grad(weight) ? detach(x) : Tensor(), detach(weight),
                                        requires_grad(x), requires_grad(weight), bias.defined() && requires_grad(bias)),
           {x, weight, bias}, out);
  return out;
}

}  // namespace wick::autograd
