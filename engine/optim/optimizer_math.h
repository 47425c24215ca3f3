// Per-element optimizer arithmetic shared by the CPU kernels and the CUDA kernels, so that both
// backends round identically (bitwise-equal results for the same inputs).
//
//   AdamScalars s = adam_scalars(hyper);                    // host: bias corrections, once per step
//   bool ok = adam8bit_moments(g, m, v, s);                // m, v updated in f32
//   p = adam_param_update(p, m, v, s);
//   uint8_t code = quantize_to_code(map, m / absmax, true);  // nearest code, bitsandbytes' search
//
// Every f32 multiply and add goes through mul_rn / add_rn: on the device these are __fmul_rn /
// __fadd_rn, which nvcc never fuses into FMAs; on the host wick builds with -ffp-contract=off.
// Division and sqrtf are IEEE round-to-nearest on both (nvcc's defaults -prec-div/-prec-sqrt).
// This header is included by .cu files: keep it C++17-clean and free of wick runtime types.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/dtype.h"  // WICK_HD
#include "runtime/exact_float.h"

namespace wick::optim_math {

using wick::add_rn;
using wick::mul_rn;
using wick::sub_rn;

WICK_HD bool is_finite(float x) {
#if defined(__CUDA_ARCH__)
  return isfinite(x);
#else
  return std::isfinite(x);
#endif
}

WICK_HD bool sign_bit(float x) {
#if defined(__CUDA_ARCH__)
  return signbit(x);
#else
  return std::signbit(x);
#endif
}

// Per-step constants of Adam, computed on the host in double and rounded once to f32.
struct AdamScalars {
  float beta1 = 0.9f, beta2 = 0.999f;
  float one_minus_beta1 = 0.1f, one_minus_beta2 = 0.001f;
  // 8-bit (bitsandbytes form): p += step_size * m / (sqrt(v) + eps_term), then p *= decay.
  float step_size = 0.0f;  // -lr * sqrt(1 - beta2^t) / (1 - beta1^t)
  float eps_term = 0.0f;   // eps * sqrt(1 - beta2^t)
  // 32-bit (PyTorch AdamW form): p *= decay, then p += neg_step * m / (sqrt(v) / bc2_sqrt + eps).
  float neg_step = 0.0f;   // -lr / (1 - beta1^t)
  float bc2_sqrt = 1.0f;   // sqrt(1 - beta2^t)
  float eps = 1e-8f;
  float decay = 1.0f;      // 1 - lr * weight_decay
  bool apply_decay = false;
};

// ---- 8-bit blockwise quantization (bitsandbytes' "dynamic tree" maps) ----

// Nearest entry of the sorted 256-entry map to x, found with bitsandbytes' 7-step binary search
// from index 127. Ties go to the pivot the search ended on (as bitsandbytes' quantize_2D).
// x is expected in [-1, 1] (signed map) or [0, 1] (unsigned map).
WICK_HD uint8_t quantize_to_code(const float* map, float x, bool signed_map) {
  // Branch-free: the comparisons select, so neither CPU nor GPU pays for the data-dependent branches
  // (random outcomes); the sequence of pivots and the result are those of the branching search.
  int pivot = 127, upper_pivot = 255, lower_pivot = 0;
  float lower = signed_map ? -1.0f : 0.0f, upper = 1.0f;
  float val = map[pivot];
  for (int i = 64; i > 0; i >>= 1) {
    const bool greater = x > val;
    lower_pivot = greater ? pivot : lower_pivot;
    lower = greater ? val : lower;
    upper_pivot = greater ? upper_pivot : pivot;
    upper = greater ? upper : val;
    pivot += greater ? i : -i;
    val = map[pivot];
  }
  const bool greater = x > val;
  const float midpoint = mul_rn(add_rn(greater ? upper : lower, val), 0.5f);
  const int code = greater ? (x > midpoint ? upper_pivot : pivot) : (x < midpoint ? lower_pivot : pivot);
  return static_cast<uint8_t>(code);
}

// Code for `value` in a block whose new absmax is `absmax`. A zero absmax (all-zero block) maps to
// the code of 0. For the signed map, a code whose sign differs from value's sign bit moves one
// index toward the right sign (bitsandbytes' sign fix).
WICK_HD uint8_t requantize(const float* map, float value, float absmax, bool signed_map) {
  float x = absmax > 0.0f ? value / absmax : 0.0f;
  int code = quantize_to_code(map, x, signed_map);
  if (signed_map && sign_bit(map[code]) != sign_bit(value)) code += value > 0.0f ? 1 : -1;
  return static_cast<uint8_t>(code & 0xff);
}

// ---- the same search over a breadth-first search tree (the CUDA kernel's shared-memory layout) ----
// quantize_to_code visits pivot 127 (level 0), then 63 or 191 (level 1), ..., and ends on an even
// index (level 7). Stored level by level, tree[2^l - 1 + k] = map[(2k + 1)·2^(7-l) - 1] for
// l = 0..7, k < 2^l (255 entries), the nodes one level reads are adjacent words, so the lanes of
// a warp hit few shared-memory banks. The children of node j are 2j + 1 (x <= value) and 2j + 2.

// The map index stored at tree[t], t in [0, 255).
WICK_HD int search_tree_map_index(int t) {
  int level = 0;
  while ((2 << level) <= t + 1) ++level;
  int k = t + 1 - (1 << level);
  return ((2 * k + 1) << (7 - level)) - 1;
}

// requantize(map, value, absmax, signed_map), with the search reading `tree` (the layout above)
// and map_last = map[255] (the code 255 is returned but never visited). The same comparisons on
// the same values: the same code for every input. The final pivot p = 2·(node - 127) is a leaf;
// its in-order neighbours p - 1 and p + 1 are the last ancestors the search went right and left
// from (quantize_to_code's lower_pivot and upper_pivot), or absent at p = 0 and p = 254, where
// quantize_to_code keeps its initial 0 and 255 and its initial bounds.
WICK_HD uint8_t requantize_tree(const float* tree, float map_last, float value, float absmax, bool signed_map) {
  float x = absmax > 0.0f ? value / absmax : 0.0f;
  float lower = signed_map ? -1.0f : 0.0f, upper = 1.0f;
  int node = 0;
  float val = tree[0];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int level = 0; level < 7; ++level) {
    bool right = x > val;
    if (right) lower = val;
    else upper = val;
    node = 2 * node + (right ? 2 : 1);
    val = tree[node];
  }
  int pivot = 2 * (node - 127);
  int code = pivot;
  float code_value = val;
  if (x > val) {
    float midpoint = mul_rn(add_rn(upper, val), 0.5f);
    if (x > midpoint) {
      code = pivot + 1;
      code_value = pivot == 254 ? map_last : upper;
    }
  } else {
    float midpoint = mul_rn(add_rn(lower, val), 0.5f);
    if (x < midpoint && pivot > 0) {
      code = pivot - 1;
      code_value = lower;
    }
  }
  if (signed_map && sign_bit(code_value) != sign_bit(value)) code += value > 0.0f ? 1 : -1;
  return static_cast<uint8_t>(code & 0xff);
}

// ---- Adam moment updates (both variants) ----

// bitsandbytes' order: v = v*beta2 + ((1-beta2)*g)*g; m = m*beta1 + (1-beta1)*g.
// Returns false (and sets m = v = 0) when g or an updated moment is not finite.
WICK_HD bool adam8bit_moments(float g, float& m, float& v, const AdamScalars& s) {
  if (is_finite(g)) {
    float new_v = add_rn(mul_rn(v, s.beta2), mul_rn(mul_rn(s.one_minus_beta2, g), g));
    float new_m = add_rn(mul_rn(m, s.beta1), mul_rn(s.one_minus_beta1, g));
    if (is_finite(new_v) && is_finite(new_m)) {
      m = new_m;
      v = new_v;
      return true;
    }
  }
  m = 0.0f;
  v = 0.0f;
  return false;
}

// p + step_size * (m / (sqrt(v) + eps_term)), then decoupled decay after the step.
WICK_HD float adam8bit_param(float p, float m, float v, const AdamScalars& s) {
  float update = m / add_rn(sqrtf(v), s.eps_term);
  p = add_rn(p, mul_rn(s.step_size, update));
  if (s.apply_decay) p = mul_rn(p, s.decay);
  return p;
}

// PyTorch AdamW (foreach=False): p *= 1 - lr*wd; m = m + (1-beta1)*(g - m) (lerp);
// v = v*beta2 + (1-beta2)*g*g; p += (neg_step * m) / (sqrt(v)/bc2_sqrt + eps) (addcdiv's order).
// Returns false (p unchanged, m = v = 0) when g or an updated moment is not finite.
WICK_HD bool adamw32_element(float g, float& p, float& m, float& v, const AdamScalars& s) {
  if (is_finite(g)) {
    float new_m = add_rn(m, mul_rn(s.one_minus_beta1, sub_rn(g, m)));
    float new_v = add_rn(mul_rn(v, s.beta2), mul_rn(mul_rn(s.one_minus_beta2, g), g));
    if (is_finite(new_v) && is_finite(new_m)) {
      m = new_m;
      v = new_v;
      float q = s.apply_decay ? mul_rn(p, s.decay) : p;
      float denom = add_rn(sqrtf(v) / s.bc2_sqrt, s.eps);
      p = add_rn(q, mul_rn(s.neg_step, m) / denom);
      return true;
    }
  }
  m = 0.0f;
  v = 0.0f;
  return false;
}

// ---- SGD (PyTorch semantics, dampening supported) ----
struct SgdScalars {
  float lr = 0.0f, momentum = 0.0f, one_minus_dampening = 1.0f, weight_decay = 0.0f;
  bool nesterov = false, first_step = true, has_momentum = false;
};

// d = g + wd*p; buf = first ? d : buf*momentum + (1-dampening)*d; d = nesterov ? d + momentum*buf : buf;
// p -= lr*d. Returns false (p unchanged, buf = 0) when g or the result is not finite.
WICK_HD bool sgd_element(float g, float& p, float* buf, const SgdScalars& s) {
  if (is_finite(g)) {
    float d = s.weight_decay != 0.0f ? add_rn(g, mul_rn(p, s.weight_decay)) : g;
    float new_buf = 0.0f;
    if (s.has_momentum) {
      new_buf = s.first_step ? d : add_rn(mul_rn(*buf, s.momentum), mul_rn(d, s.one_minus_dampening));
      d = s.nesterov ? add_rn(d, mul_rn(new_buf, s.momentum)) : new_buf;
    }
    float new_p = add_rn(p, mul_rn(d, -s.lr));
    if (is_finite(new_p) && is_finite(new_buf)) {
      p = new_p;
      if (s.has_momentum) *buf = new_buf;
      return true;
    }
  }
  if (s.has_momentum) *buf = 0.0f;
  return false;
}

}  // namespace wick::optim_math
