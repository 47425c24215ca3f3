#include "engine/autograd/ops_float8.h"

#include <utility>

#include "engine/autograd/node.h"
#include "runtime/ops/float8.h"
#include "runtime/ops/matmul.h"
#include "runtime/ops/reduce.h"

namespace wick::autograd {
namespace {

class Float8LinearNode : public Node {
 public:
  Float8LinearNode(Tensor codes, Tensor scale, bool need_x, bool need_bias)
      : codes_(std::move(codes)), scale_(std::move(scale)), need_x_(need_x), need_bias_(need_bias) {}
  const char* name() const override { return "float8_linear"; }
  // y = x W^T + b, W = dequantize(codes, scale): grad_x = g W (W dequantized in g's dtype), grad_b = g
  // summed over the leading axes; W is constant.
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    const Tensor& g = grad[0];
    Tensor grad_x, grad_bias;
    if (need_x_) grad_x = wick::matmul(g, dequantize_float8(codes_, scale_, g.dtype()));
    if (need_bias_) {
      std::vector<int64_t> leading;
      for (int64_t axis = 0; axis + 1 < g.dim(); ++axis) leading.push_back(axis);
      grad_bias = leading.empty() ? g : wick::sum(g, leading);
    }
    return {grad_x, grad_bias};
  }
  void release() override { codes_ = scale_ = Tensor(); }

 private:
  Tensor codes_, scale_;
  bool need_x_, need_bias_;
};

}  // namespace

Tensor float8_linear(const Tensor& x, const Tensor& codes, const Tensor& scale, const Tensor& bias) {
  Tensor out = wick::float8_linear(x, codes, scale, bias);
  if (needs_grad({x, bias}))
    record(std::make_shared<Float8LinearNode>(detach(codes), scale.defined() ? detach(scale) : Tensor(),
                                              requires_grad(x), bias.defined() && requires_grad(bias)),
           {x, bias}, out);
  return out;
}

}  // namespace wick::autograd
