// Matrix products: matmul with NumPy batch broadcasting and torch.matmul's 1-d rules, and linear.
//
//   Tensor c = matmul(a, b);                          // [2, 1, M, K] @ [3, K, N] -> [2, 3, M, N]
//   Tensor v = matmul(a, x);                          // [M, K] @ [K] -> [M]
//   Tensor d = matmul(a, b, /*transpose_a=*/false, /*transpose_b=*/true);   // a @ b^T, no copy
//   Tensor y = linear(x, weight, bias);               // x [..., in] @ weight[out, in]^T + bias[out]
//
// Floating dtypes only; mixed floating dtypes promote (promote_types: bf16 + f16 -> f32). 16-bit
// products accumulate in f32. Operands whose last two axes are row- or column-contiguous are used
// in place; other layouts are copied once.
#pragma once

#include "runtime/tensor.h"

namespace wick {

// a [..., M, K] @ b [..., K, N] -> [broadcast(...), M, N] in the promoted dtype, on a's device.
// A 1-d a is treated as [1, K] and a 1-d b as [K, 1]; the added axis is removed from the result.
Tensor matmul(const Tensor& a, const Tensor& b);
// matmul(transpose_a ? a^T : a, transpose_b ? b^T : b), transposing the last two axes of
// operands with at least 2 axes (views, never copies).
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b);
// torch.nn.functional.linear: x [..., in], weight [out, in], optional bias [out] -> [..., out].
// weight and bias are cast to x's dtype if they differ (the result has x's dtype).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace wick
