#include "engine/autograd/ops_norm.h"

#include "engine/autograd/node.h"
#include "runtime/ops/norm.h"

namespace wick::autograd {
namespace {

// Saved: x, the forward's statistics and the weight (all detached).
class LayerNormNode : public Node {
 public:
  LayerNormNode(Tensor x, Tensor mean, Tensor rstd, Tensor weight, bool has_bias)
      : x_(std::move(x)), mean_(std::move(mean)), rstd_(std::move(rstd)), weight_(std::move(weight)),
        has_bias_(has_bias) {}
  const char* name() const override { return "layer_norm"; }
  // y = xhat w + b, xhat = (x - mean) rstd: grad_x = rstd (g w - mean(g w) - xhat mean(g w xhat)),
  // grad_w = sum g xhat, grad_b = sum g (sums over the leading axes).
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    LayerNormGrads g = wick::layer_norm_backward(grad[0], x_, mean_, rstd_, weight_, has_bias_);
    return {g.grad_x, g.grad_weight, g.grad_bias};
  }
  void release() override { x_ = mean_ = rstd_ = weight_ = Tensor(); }

 private:
  Tensor x_, mean_, rstd_, weight_;
  bool has_bias_;
};

class RmsNormNode : public Node {
 public:
  RmsNormNode(Tensor x, Tensor rstd, Tensor weight)
      : x_(std::move(x)), rstd_(std::move(rstd)), weight_(std::move(weight)) {}
  const char* name() const override { return "rms_norm"; }
  // y = x rstd w: grad_x = rstd (g w - xhat mean(g w xhat)), xhat = x rstd; grad_w = sum g xhat.
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    RmsNormGrads g = wick::rms_norm_backward(grad[0], x_, rstd_, weight_);
    return {g.grad_x, g.grad_weight};
  }
  void release() override { x_ = rstd_ = weight_ = Tensor(); }

 private:
  Tensor x_, rstd_, weight_;
};

class GroupNormNode : public Node {
 public:
  GroupNormNode(Tensor x, Tensor mean, Tensor rstd, Tensor weight, bool has_bias)
      : x_(std::move(x)), mean_(std::move(mean)), rstd_(std::move(rstd)), weight_(std::move(weight)),
        has_bias_(has_bias) {}
  const char* name() const override { return "group_norm"; }
  // Layer norm's rule per (sample, group) row; grad_w[c] = sum g xhat and grad_b[c] = sum g over
  // the samples and spatial positions of channel c.
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    GroupNormGrads g = wick::group_norm_backward(grad[0], x_, mean_, rstd_, weight_, has_bias_);
    return {g.grad_x, g.grad_weight, g.grad_bias};
  }
  void release() override { x_ = mean_ = rstd_ = weight_ = Tensor(); }

 private:
  Tensor x_, mean_, rstd_, weight_;
  bool has_bias_;
};

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  LayerNormResult r = wick::layer_norm(x, normalized_shape, weight, bias, eps);
  if (needs_grad({x, weight, bias}))
    record(std::make_shared<LayerNormNode>(detach(x), r.mean, r.rstd, detach(weight), bias.defined()),
           {x, weight, bias}, r.y);
  return r.y;
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  RmsNormResult r = wick::rms_norm(x, weight, eps);
  if (needs_grad({x, weight})) record(std::make_shared<RmsNormNode>(detach(x), r.rstd, detach(weight)), {x, weight}, r.y);
  return r.y;
}

Tensor group_norm(const Tensor& x, int64_t n_groups, const Tensor& weight, const Tensor& bias, double eps) {
  GroupNormResult r = wick::group_norm(x, n_groups, weight, bias, eps);
  if (needs_grad({x, weight, bias}))
    record(std::make_shared<GroupNormNode>(detach(x), r.mean, r.rstd, detach(weight), bias.defined()),
           {x, weight, bias}, r.y);
  return r.y;
}

}  // namespace wick::autograd
