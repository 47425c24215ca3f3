#include "runtime/ops/modulate.h"

#include "runtime/cpu/modulate.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/reduce.h"

namespace wick {
namespace {

// x [B, N, D] and each per-row operand [B, D] of x's dtype and device.
void check(const char* op, const Tensor& x, std::initializer_list<const Tensor*> rows) {
  WICK_CHECK(x.defined() && x.dim() == 3 && is_floating(x.dtype()), op, ": expected a floating [B, N, D] tensor, got ",
             x.defined() ? x.describe() : std::string("an undefined tensor"));
  for (const Tensor* r : rows) {
    WICK_CHECK(r->defined() && r->dim() == 2 && r->size(0) == x.size(0) && r->size(1) == x.size(2), op, ": ",
               r->defined() ? r->describe() : std::string("an undefined tensor"), " is not [", x.size(0), ", ",
               x.size(2), "] for ", x.describe());
    WICK_CHECK(r->dtype() == x.dtype() && r->device() == x.device(), op, ": ", r->describe(),
               " differs in dtype or device from ", x.describe());
  }
}

// The fused CPU kernels take f32 and f64.
bool fused(const Tensor& x) { return x.device().is_cpu() && (x.dtype() == DType::F32 || x.dtype() == DType::F64); }

Tensor one_plus(const Tensor& scale) { return add(scale.unsqueeze(1), 1.0); }

}  // namespace

Tensor modulate(const Tensor& x, const Tensor& shift, const Tensor& scale) {
  check("modulate", x, {&shift, &scale});
  if (!fused(x)) return add(mul(x, one_plus(scale)), shift.unsqueeze(1));
  Tensor xc = x.contiguous(), sh = shift.contiguous(), sc = scale.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  cpu::modulate_forward(x.dtype(), xc.data(), sh.data(), sc.data(), out.data(), x.size(0), x.size(1), x.size(2));
  return out;
}

Tensor gated_residual(const Tensor& x, const Tensor& gate, const Tensor& f) {
  check("gated_residual", x, {&gate});
  WICK_CHECK(f.defined() && f.shape() == x.shape() && f.dtype() == x.dtype() && f.device() == x.device(),
             "gated_residual: f ", f.defined() ? f.describe() : std::string("(undefined)"), " does not match x ",
             x.describe());
  if (!fused(x)) return add(x, mul(gate.unsqueeze(1), f));
  Tensor xc = x.contiguous(), gc = gate.contiguous(), fc = f.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  cpu::gated_residual_forward(x.dtype(), xc.data(), gc.data(), fc.data(), out.data(), x.size(0), x.size(1),
                              x.size(2));
  return out;
}

// grad [B, N, D] against the per-row operands, and `wide` (x or f) when given.
void check_backward(const char* op, const Tensor& grad, std::initializer_list<const Tensor*> rows, const Tensor& wide) {
  check(op, grad, rows);
  if (wide.defined())
    WICK_CHECK(wide.shape() == grad.shape() && wide.dtype() == grad.dtype() && wide.device() == grad.device(), op,
               ": ", wide.describe(), " does not match grad ", grad.describe());
}

ModulateGrads modulate_backward(const Tensor& grad, const Tensor& x, const Tensor& scale, bool need_x, bool need_shift,
                                bool need_scale) {
  WICK_CHECK(!need_scale || x.defined(), "modulate_backward: the gradient of scale needs x");
  check_backward("modulate_backward", grad, {&scale}, x);
  ModulateGrads out;
  if (!fused(grad)) {
    if (need_x) out.x = mul(grad, one_plus(scale));
    if (need_shift) out.shift = sum(grad, {1});
    if (need_scale) out.scale = sum(mul(grad, x), {1});
    return out;
  }
  Tensor g = grad.contiguous(), sc = scale.contiguous();
  Tensor xc = need_scale ? x.contiguous() : Tensor();
  if (need_x) out.x = Tensor::empty(grad.shape(), grad.dtype(), grad.device());
  if (need_shift) out.shift = Tensor::empty(scale.shape(), grad.dtype(), grad.device());
  if (need_scale) out.scale = Tensor::empty(scale.shape(), grad.dtype(), grad.device());
  cpu::modulate_backward(grad.dtype(), g.data(), need_scale ? xc.data() : nullptr, sc.data(),
                         need_x ? out.x.data() : nullptr, need_shift ? out.shift.data() : nullptr,
                         need_scale ? out.scale.data() : nullptr, grad.size(0), grad.size(1), grad.size(2));
  return out;
}

GatedResidualGrads gated_residual_backward(const Tensor& grad, const Tensor& gate, const Tensor& f, bool need_gate,
                                           bool need_f) {
  WICK_CHECK(!need_gate || f.defined(), "gated_residual_backward: the gradient of gate needs f");
  check_backward("gated_residual_backward", grad, {&gate}, f);
  GatedResidualGrads out;
  if (!fused(grad)) {
    if (need_f) out.f = mul(grad, gate.unsqueeze(1));
    if (need_gate) out.gate = sum(mul(grad, f), {1});
    return out;
  }
  Tensor g = grad.contiguous(), gc = gate.contiguous();
  Tensor fc = need_gate ? f.contiguous() : Tensor();
  if (need_f) out.f = Tensor::empty(grad.shape(), grad.dtype(), grad.device());
  if (need_gate) out.gate = Tensor::empty(gate.shape(), grad.dtype(), grad.device());
  cpu::gated_residual_backward(grad.dtype(), g.data(), gc.data(), need_gate ? fc.data() : nullptr,
                               need_f ? out.f.data() : nullptr, need_gate ? out.gate.data() : nullptr, grad.size(0),
                               grad.size(1), grad.size(2));
  return out;
}

}  // namespace wick
