#include "engine/autograd/ops_dropout.h"

#include <utility>

#include "engine/autograd/node.h"
#include "engine/autograd/rng_state.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/join.h"
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

// y = x * keep * scale, recorded.
Tensor apply_mask(const Tensor& x, const Tensor& keep, double scale) {
  Tensor out = wick::mul(wick::mul(x, keep), scale);
  if (needs_grad({x})) record(std::make_shared<DropoutNode>(keep, scale), {x}, out);
  return out;
}

void check_arguments(const Tensor& x, double p) {
  WICK_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability ", p, " is outside [0, 1]");
  WICK_CHECK(is_floating(x.dtype()), "dropout: x must be floating, got ", x.describe());
}

double keep_scale(double p) { return p < 1.0 ? 1.0 / (1.0 - p) : 0.0; }

}  // namespace

Tensor dropout(const Tensor& x, double p, const RngStream& stream, uint64_t offset, bool training) {
  check_arguments(x, p);
  if (!training || p == 0.0) return x;
  return apply_mask(x, bernoulli_mask(x.shape(), 1.0 - p, stream, x.device(), offset), keep_scale(p));
}

Tensor dropout(const Tensor& x, double p, const std::vector<RngStream>& row_streams, uint64_t offset, bool training) {
  check_arguments(x, p);
  WICK_CHECK(x.dim() >= 1 && x.size(0) == static_cast<int64_t>(row_streams.size()) && !row_streams.empty(),
             "dropout: ", row_streams.size(), " row streams for x ", x.describe(), " (one per row of the leading axis)");
  if (!training || p == 0.0) return x;
  Shape row_shape = x.shape();
  row_shape[0] = 1;
  std::vector<Tensor> rows;
  rows.reserve(row_streams.size());
  for (const RngStream& stream : row_streams) rows.push_back(bernoulli_mask(row_shape, 1.0 - p, stream, x.device(), offset));
  return apply_mask(x, rows.size() == 1 ? rows[0] : concat(rows, 0), keep_scale(p));
}

Tensor dropout(const Tensor& x, double p, bool training) {
  check_arguments(x, p);
  if (!training || p == 0.0) return x;
  if (x.dim() >= 1 && draws_per_sample(x.size(0))) {
    const uint64_t offset = take_per_sample(x.numel() / x.size(0));
    return dropout(x, p, current_rng().sample_streams, offset, training);
  }
  RngSpan span = take(x.numel());
  return dropout(x, p, span.stream, span.offset, training);
}

}  // namespace wick::autograd
