// Differentiable rotary position embedding (runtime/ops/rope.h with a gradient for x).
//
//   RopeTables t = rope_frequencies(ids, {16, 56, 56});          // constants: no gradient
//   Tensor q_rotated = autograd::apply_rope(q, t.cos, t.sin);
//
// Each pair is rotated by angle a: y = R(a) x with R(a) = [[c, -s], [s, c]]. The gradient is the
// transposed rotation, i.e. the rotation by -a: dx0 = c dy0 + s dy1, dx1 = -s dy0 + c dy1, computed
// as the runtime apply_rope(dy, cos, -sin) (one extra negation of the sin table per backward).
#pragma once

#include "runtime/tensor.h"

namespace wick::autograd {

// Same contract as wick::apply_rope. cos and sin are constant tables: they must not require a
// gradient (throws if they do); only x gets one.
Tensor apply_rope(const Tensor& x, const Tensor& cos, const Tensor& sin);

}  // namespace wick::autograd
