// CPU kernels of runtime/ops/modulate.h (the adaLN operations of DiT blocks), f32 and f64. Tensors
// are contiguous: x, f, grad and the outputs [B, N, D]; shift, scale, gate and their gradients [B, D].
// One task per batch row b, sums over N in order, so results do not depend on the thread count.
//
//   cpu::modulate_forward(DType::F32, x, shift, scale, out, B, N, D);
#pragma once

#include <cstdint>

#include "runtime/dtype.h"

namespace wick::cpu {

// out = x·(1 + scale) + shift.
void modulate_forward(DType dtype, const void* x, const void* shift, const void* scale, void* out, int64_t batch,
                      int64_t tokens, int64_t dim);
// grad_x = grad·(1 + scale); grad_shift = Σ_n grad; grad_scale = Σ_n grad·x. Null outputs are skipped;
// x may be null when grad_scale is.
void modulate_backward(DType dtype, const void* grad, const void* x, const void* scale, void* grad_x,
                       void* grad_shift, void* grad_scale, int64_t batch, int64_t tokens, int64_t dim);
// out = x + gate·f.
void gated_residual_forward(DType dtype, const void* x, const void* gate, const void* f, void* out, int64_t batch,
                            int64_t tokens, int64_t dim);
// grad_f = grad·gate; grad_gate = Σ_n grad·f (grad_x is grad itself). Null outputs are skipped; f may
// be null when grad_gate is.
void gated_residual_backward(DType dtype, const void* grad, const void* gate, const void* f, void* grad_f,
                             void* grad_gate, int64_t batch, int64_t tokens, int64_t dim);

}  // namespace wick::cpu
