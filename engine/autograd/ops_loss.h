// Differentiable losses, each one graph node with a fused backward (softmax - target, sigmoid - t,
// 2 (pred - target)) computed with runtime ops.
//
//   Tensor l = autograd::mse_loss(pred, target);                                  // 0-d mean
//   Tensor c = autograd::cross_entropy_with_logits(logits, labels);               // labels I64 [N]
//   Tensor s = autograd::cross_entropy_with_logits(logits, labels, Reduction::Sum, /*label_smoothing=*/0.1);
//   Tensor b = autograd::bce_with_logits(x, t, Reduction::None, pos_weight);      // per element
//
// Reduction::Mean averages over the per-element (mse, bce) or per-sample (cross-entropy) losses,
// Sum adds them, None returns them. Semantics follow torch.nn.functional (mse_loss,
// cross_entropy, binary_cross_entropy_with_logits) without class weights or ignore_index.
#pragma once

#include "runtime/tensor.h"

namespace wick::autograd {

enum class Reduction { Mean, Sum, None };

// (pred - target)^2; pred and target have the same shape (no broadcasting) and floating dtypes
// (promoted). Both receive gradients when they require them.
Tensor mse_loss(const Tensor& pred, const Tensor& target, Reduction reduction = Reduction::Mean);

// -sum_c q_c log_softmax(logits)_c over the class axis 1. logits [N, C, d1, ...] (rank >= 2),
// floating. target is either class indices (I32/I64, shape [N, d1, ...], values in [0, C)) or
// class probabilities (floating, logits' shape). q = (1 - s) target + s / C with s the label
// smoothing in [0, 1] (target one-hot for indices). None returns [N, d1, ...]; Mean divides by
// N * d1 * .... Index targets are range-checked on the CPU; on CUDA (no sync) an out-of-range
// index matches no class, so that sample's loss has only the smoothing term. Probability targets
// receive a gradient when they require one; index targets never do.
Tensor cross_entropy_with_logits(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::Mean,
                                 double label_smoothing = 0.0);

// Binary cross-entropy on logits x with targets t in [0, 1] (same shape, floating), in the stable
// form max(x, 0) - x t + log(1 + exp(-|x|)). pos_weight (optional, broadcast against x, e.g. [C]
// for x [N, C]) weighs the positive term: (1 - t) x + (1 + (p - 1) t) softplus(-x), as torch.
// x and t receive gradients; pos_weight is a constant (no gradient).
Tensor bce_with_logits(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::Mean,
                       const Tensor& pos_weight = Tensor());

}  // namespace wick::autograd
