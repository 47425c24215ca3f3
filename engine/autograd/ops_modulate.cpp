#include "engine/autograd/ops_modulate.h"

#include <memory>

#include "engine/autograd/node.h"
#include "runtime/ops/modulate.h"

namespace wick::autograd {
namespace {

// y = x (1 + scale) + shift: dx = g (1 + scale), dshift = Σ_n g, dscale = Σ_n g x.
class ModulateNode : public Node {
 public:
  ModulateNode(Tensor x, Tensor scale, bool need_x, bool need_shift, bool need_scale)
      : x_(std::move(x)), scale_(std::move(scale)), need_x_(need_x), need_shift_(need_shift), need_scale_(need_scale) {}
  const char* name() const override { return "modulate"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    ModulateGrads g = wick::modulate_backward(grad[0], x_, scale_, need_x_, need_shift_, need_scale_);
    return {g.x, g.shift, g.scale};
  }
  void release() override { x_ = scale_ = Tensor(); }

 private:
  Tensor x_, scale_;  // x only when scale needs its gradient
  bool need_x_, need_shift_, need_scale_;
};

// y = x + gate f: dx = g, dgate = Σ_n g f, df = g gate.
class GatedResidualNode : public Node {
 public:
  GatedResidualNode(Tensor gate, Tensor f, bool need_x, bool need_gate, bool need_f)
      : gate_(std::move(gate)), f_(std::move(f)), need_x_(need_x), need_gate_(need_gate), need_f_(need_f) {}
  const char* name() const override { return "gated_residual"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    GatedResidualGrads g = wick::gated_residual_backward(grad[0], gate_, f_, need_gate_, need_f_);
    return {need_x_ ? grad[0] : Tensor(), g.gate, g.f};
  }
  void release() override { gate_ = f_ = Tensor(); }

 private:
  Tensor gate_, f_;  // f only when gate needs its gradient (a frozen gate keeps no activation)
  bool need_x_, need_gate_, need_f_;
};

}  // namespace

Tensor modulate(const Tensor& x, const Tensor& shift, const Tensor& scale) {
  Tensor out = wick::modulate(x, shift, scale);
  if (needs_grad({x, shift, scale}))
    record(std::make_shared<ModulateNode>(requires_grad(scale) ? detach(x) : Tensor(), detach(scale), requires_grad(x),
                                          requires_grad(shift),
                                          requires_grad(scale)),
           {x, shift, scale}, out);
  return out;
}

Tensor gated_residual(const Tensor& x, const Tensor& gate, const Tensor& f) {
  Tensor out = wick::gated_residual(x, gate, f);
  if (needs_grad({x, gate, f}))
    record(std::make_shared<GatedResidualNode>(detach(gate), requires_grad(gate) ? detach(f) : Tensor(),
                                               requires_grad(x), requires_grad(gate),
                                               requires_grad(f)),
           {x, gate, f}, out);
  return out;
}

}  // namespace wick::autograd
