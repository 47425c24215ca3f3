#include "engine/autograd/ops_rope.h"

#include <utility>

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/rope.h"

namespace wick::autograd {
namespace {

class RopeNode : public Node {
 public:
  RopeNode(Tensor cos, Tensor sin) : cos_(std::move(cos)), sin_(std::move(sin)) {}
  const char* name() const override { return "apply_rope"; }
  // y = R(a) x, R orthogonal  =>  dx = R(a)^T dy = R(-a) dy = apply_rope(dy, cos, -sin)
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    return {wick::apply_rope(grad[0], cos_, wick::neg(sin_))};
  }
  void release() override { cos_ = sin_ = Tensor(); }

 private:
  Tensor cos_, sin_;
};

}  // namespace

Tensor apply_rope(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  WICK_CHECK(!grad_enabled() || (!requires_grad(cos) && !requires_grad(sin)), "apply_rope: the cos/sin tables ",
             cos.describe(), " and ", sin.describe(), " require a gradient, but they are constants here (detach them)");
  Tensor out = wick::apply_rope(x, cos, sin);
  if (needs_grad({x})) record(std::make_shared<RopeNode>(detach(cos), detach(sin)), {x}, out);
  return out;
}

}  // namespace wick::autograd
