#include "runtime/cpu/modulate.h"

#include <algorithm>
#include <vector>

#include "runtime/cpu/parallel.h"

namespace wick::cpu {
namespace {

// Per batch row: `one_plus` holds 1 + scale (rounded as the unfused add(scale, 1) does).
template <typename C>
void modulate_forward_typed(const C* x, const C* shift, const C* scale, C* out, int64_t batch, int64_t tokens,
                            int64_t dim) {
  parallel_for(
      batch,
      [&](int64_t begin, int64_t end) {
        std::vector<C> one_plus(static_cast<size_t>(dim));
        for (int64_t b = begin; b < end; ++b) {
          const C* sc = scale + b * dim;
          const C* sh = shift + b * dim;
          for (int64_t d = 0; d < dim; ++d) one_plus[d] = sc[d] + C(1);
          for (int64_t n = 0; n < tokens; ++n) {
            const C* xr = x + (b * tokens + n) * dim;
            C* o = out + (b * tokens + n) * dim;
            for (int64_t d = 0; d < dim; ++d) {
              const C scaled = xr[d] * one_plus[d];
              o[d] = scaled + sh[d];
            }
          }
        }
      },
      1);
}

template <typename C>
void modulate_backward_typed(const C* grad, const C* x, const C* scale, C* grad_x, C* grad_shift, C* grad_scale,
                             int64_t batch, int64_t tokens, int64_t dim) {
  parallel_for(
      batch,
      [&](int64_t begin, int64_t end) {
        std::vector<C> one_plus(static_cast<size_t>(dim));
        for (int64_t b = begin; b < end; ++b) {
          const C* sc = scale + b * dim;
          for (int64_t d = 0; d < dim; ++d) one_plus[d] = sc[d] + C(1);
          C* gsh = grad_shift ? grad_shift + b * dim : nullptr;
          C* gsc = grad_scale ? grad_scale + b * dim : nullptr;
          if (gsh) std::fill(gsh, gsh + dim, C(0));
          if (gsc) std::fill(gsc, gsc + dim, C(0));
          for (int64_t n = 0; n < tokens; ++n) {
            const C* g = grad + (b * tokens + n) * dim;
            if (grad_x) {
              C* gx = grad_x + (b * tokens + n) * dim;
              for (int64_t d = 0; d < dim; ++d) gx[d] = g[d] * one_plus[d];
            }
            if (gsh)
              for (int64_t d = 0; d < dim; ++d) gsh[d] += g[d];
            if (gsc) {
              const C* xr = x + (b * tokens + n) * dim;
              for (int64_t d = 0; d < dim; ++d) {
                const C product = g[d] * xr[d];
                gsc[d] += product;
              }
            }
          }
        }
      },
      1);
}

template <typename C>
void gated_residual_forward_typed(const C* x, const C* gate, const C* f, C* out, int64_t batch, int64_t tokens,
                                  int64_t dim) {
  parallel_for(
      batch,
      [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          const C* gt = gate + b * dim;
          for (int64_t n = 0; n < tokens; ++n) {
            const int64_t row = (b * tokens + n) * dim;
            for (int64_t d = 0; d < dim; ++d) {
              const C gated = gt[d] * f[row + d];
              out[row + d] = x[row + d] + gated;
            }
          }
        }
      },
      1);
}

template <typename C>
void gated_residual_backward_typed(const C* grad, const C* gate, const C* f, C* grad_f, C* grad_gate, int64_t batch,
                                   int64_t tokens, int64_t dim) {
  parallel_for(
      batch,
      [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          const C* gt = gate + b * dim;
          C* gg = grad_gate ? grad_gate + b * dim : nullptr;
          if (gg) std::fill(gg, gg + dim, C(0));
          for (int64_t n = 0; n < tokens; ++n) {
            const int64_t row = (b * tokens + n) * dim;
            if (grad_f)
              for (int64_t d = 0; d < dim; ++d) grad_f[row + d] = grad[row + d] * gt[d];
            if (gg)
              for (int64_t d = 0; d < dim; ++d) {
                const C product = grad[row + d] * f[row + d];
                gg[d] += product;
              }
          }
        }
      },
      1);
}

// fn(C{}) with C the C++ type of `dtype` (f32 or f64).
template <typename Fn>
void with_type(DType dtype, Fn&& fn) {
  if (dtype == DType::F64)
    fn(double{});
  else
    fn(float{});
}

}  // namespace

void modulate_forward(DType dtype, const void* x, const void* shift, const void* scale, void* out, int64_t batch,
                      int64_t tokens, int64_t dim) {
  with_type(dtype, [&](auto tag) {
    using C = decltype(tag);
    modulate_forward_typed(static_cast<const C*>(x), static_cast<const C*>(shift), static_cast<const C*>(scale),
                           static_cast<C*>(out), batch, tokens, dim);
  });
}

void modulate_backward(DType dtype, const void* grad, const void* x, const void* scale, void* grad_x,
                       void* grad_shift, void* grad_scale, int64_t batch, int64_t tokens, int64_t dim) {
  with_type(dtype, [&](auto tag) {
    using C = decltype(tag);
    modulate_backward_typed(static_cast<const C*>(grad), static_cast<const C*>(x), static_cast<const C*>(scale),
                            static_cast<C*>(grad_x), static_cast<C*>(grad_shift), static_cast<C*>(grad_scale), batch,
                            tokens, dim);
  });
}

void gated_residual_forward(DType dtype, const void* x, const void* gate, const void* f, void* out, int64_t batch,
                            int64_t tokens, int64_t dim) {
  with_type(dtype, [&](auto tag) {
    using C = decltype(tag);
    gated_residual_forward_typed(static_cast<const C*>(x), static_cast<const C*>(gate), static_cast<const C*>(f),
                                 static_cast<C*>(out), batch, tokens, dim);
  });
}

void gated_residual_backward(DType dtype, const void* grad, const void* gate, const void* f, void* grad_f,
                             void* grad_gate, int64_t batch, int64_t tokens, int64_t dim) {
  with_type(dtype, [&](auto tag) {
    using C = decltype(tag);
    gated_residual_backward_typed(static_cast<const C*>(grad), static_cast<const C*>(gate), static_cast<const C*>(f),
                                  static_cast<C*>(grad_f), static_cast<C*>(grad_gate), batch, tokens, dim);
  });
}

}  // namespace wick::cpu
