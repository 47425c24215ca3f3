#include "engine/autograd/ops_conv.h"

#include <utility>

#include "engine/autograd/node.h"
#include "runtime/ops/conv.h"
#include "runtime/ops/reduce.h"

namespace wick::autograd {
namespace {

// ---- conv2d ----
class Conv2dNode : public Node {
 public:
  Conv2dNode(Tensor x, Tensor weight, bool need_x, bool need_weight, bool has_bias, std::array<int64_t, 2> stride,
             std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation, int64_t groups)
      : x_(std::move(x)), weight_(std::move(weight)), need_x_(need_x), need_weight_(need_weight),
        has_bias_(has_bias), stride_(stride), padding_(padding), dilation_(dilation), groups_(groups) {}
  const char* name() const override { return "conv2d"; }
  // y = x (*) W + b: grad_x is the transposed convolution of g with W, grad_W the correlation of
  // x with g, grad_b the sum of g over N, H, W.
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    const Tensor& g = grad[0];
    Tensor grad_x, grad_weight, grad_bias;
    if (need_x_)
      grad_x = wick::conv2d_backward_input(g, weight_, x_.shape(), stride_, padding_, dilation_, groups_);
    if (need_weight_)
      grad_weight = wick::conv2d_backward_weight(g, x_, weight_.shape(), stride_, padding_, dilation_, groups_);
    if (has_bias_) grad_bias = wick::sum(g, {0, 2, 3});
    return {grad_x, grad_weight, grad_bias};
  }
  void release() override { x_ = weight_ = Tensor(); }

 private:
  Tensor x_, weight_;
  bool need_x_, need_weight_, has_bias_;
  std::array<int64_t, 2> stride_, padding_, dilation_;
  int64_t groups_;
};

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, std::array<int64_t, 2> stride,
              std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation, int64_t groups) {
  Tensor out = wick::conv2d(x, weight, bias, stride, padding, dilation, groups);
  if (needs_grad({x, weight, bias}))
    record(std::make_shared<Conv2dNode>(detach(x), detach(weight), requires_grad(x), requires_grad(weight),
                                        bias.defined() && requires_grad(bias), stride, padding, dilation, groups),
           {x, weight, bias}, out);
  return out;
}

}  // namespace wick::autograd
