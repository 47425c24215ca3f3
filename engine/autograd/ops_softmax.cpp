#include "engine/autograd/ops_softmax.h"

#include <utility>

#include "engine/autograd/node.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/softmax.h"

namespace wick::autograd {
namespace {

class SoftmaxNode : public Node {
 public:
  SoftmaxNode(Tensor out, int64_t axis) : out_(std::move(out)), axis_(axis) {}
  const char* name() const override { return "softmax"; }
  // d softmax(x) = y (g - sum(g y)) along the axis
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    return {wick::softmax_backward(grad[0], out_, axis_)};  // one fused pass over each row
  }
  void release() override { out_ = Tensor(); }

 private:
  Tensor out_;
  int64_t axis_;
};

class LogSoftmaxNode : public Node {
 public:
  LogSoftmaxNode(Tensor out, int64_t axis) : out_(std::move(out)), axis_(axis) {}
  const char* name() const override { return "log_softmax"; }
  // d log_softmax(x) = g - exp(y) sum(g) along the axis
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    Tensor total = wick::sum(grad[0], {axis_}, /*keepdim=*/true);
    return {wick::sub(grad[0], wick::mul(wick::exp(out_), total))};
  }
  void release() override { out_ = Tensor(); }

 private:
  Tensor out_;
  int64_t axis_;
};

}  // namespace

Tensor softmax(const Tensor& x, int64_t axis) {
  Tensor out = wick::softmax(x, axis);
  if (needs_grad({x})) record(std::make_shared<SoftmaxNode>(detach(out), axis), {x}, out);
  return out;
}

Tensor log_softmax(const Tensor& x, int64_t axis) {
  Tensor out = wick::log_softmax(x, axis);
  if (needs_grad({x})) record(std::make_shared<LogSoftmaxNode>(detach(out), axis), {x}, out);
  return out;
}

}  // namespace wick::autograd
