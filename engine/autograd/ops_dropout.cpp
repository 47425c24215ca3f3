#include "engine/autograd/ops_dropout.h"

#include <utility>

#include "engine/autograd/node.h"
#include "engine/autograd/rng_state.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/random.h"

namespace wick::autograd {
namespace {

class DropoutNode : public Node {
 public:
  DropoutNode(Tensor keep, double scale) : keep_(std::move(keep)), scale_(scale) {}
  const char* name() const override { return "dropout"; }
  // y = x * keep * scale  =>  dx = dy * keep * scale
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    return {wick::mul(wick::mul(grad[0], keep_), scale_)};
  }
  void release() override { keep_ = Tensor(); }

 private:
  Tensor keep_;  // U8
  double scale_;
};

}  // namespace

Tensor dropout(const Tensor& x, double p, const RngStream& stream, uint64_t offset, bool training) {
  WICK_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability ", p, " is outside [0, 1]");
  WICK_CHECK(is_floating(x.dtype()), "dropout: x must be floating, got ", x.describe());
  if (!training || p == 0.0) return x;
  double keep_probability = 1.0 - p;
  double scale = keep_probability > 0.0 ? 1.0 / keep_probability : 0.0;
  Tensor keep = bernoulli_mask(x.shape(), keep_probability, stream, x.device(), offset);
  Tensor out = wick::mul(wick::mul(x, keep), scale);
  if (needs_grad({x})) record(std::make_shared<DropoutNode>(keep, scale), {x}, out);
  return out;
}

Tensor dropout(const Tensor& x, double p, bool training) {
  if (!training || p == 0.0 || !(p >= 0.0 && p <= 1.0) || !is_floating(x.dtype()))
    return dropout(x, p, RngStream{}, 0, training);  // validates; x itself when nothing is dropped
  RngCursor cursor = take(x.numel());
  return dropout(x, p, cursor.stream, cursor.offset, training);
}

}  // namespace wick::autograd
