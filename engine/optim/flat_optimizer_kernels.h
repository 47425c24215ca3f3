// Fused optimizer step kernels over flat contiguous buffers, called by engine/optim/flat_optimizers.cpp
// after validation. Kernels trust their arguments: all pointers address n contiguous elements
// (the 8-bit absmax buffers n_blocks = ceil(n / 256)), on the kernel's device.
//
//   cpu::adamw8bit_step(p, g, m_codes, v_codes, absmax_m, absmax_v, maps, n, scalars);   // returns count
//   cuda::adamw8bit_step(p, g, m_codes, v_codes, absmax_m, absmax_v, maps_on_device, n, scalars,
//                        count_on_device, stream);                                      // adds to count
//
// Every kernel returns / accumulates the number of elements whose gradient (or updated state) was
// not finite; those elements keep their parameter and get zero state. No CUDA types here.
#pragma once

#include <cstdint>

#include "engine/optim/optimizer_math.h"

namespace wick::cpu {

int64_t sgd_step(float* p, const float* g, float* momentum_buffer, int64_t n, const optim_math::SgdScalars& s);
int64_t adamw32_step(float* p, const float* g, float* m, float* v, int64_t n, const optim_math::AdamScalars& s);
// maps: signed map (256 f32) followed by the unsigned map (256 f32).
int64_t adamw8bit_step(float* p, const float* g, uint8_t* m_codes, uint8_t* v_codes, float* absmax_m,
                       float* absmax_v, const float* maps, int64_t n, const optim_math::AdamScalars& s);

}  // namespace wick::cpu

namespace wick::cuda {

// n_nonfinite: one int64 on the device, incremented atomically. stream: a cudaStream_t.
void sgd_step(float* p, const float* g, float* momentum_buffer, int64_t n, const optim_math::SgdScalars& s,
              int64_t* n_nonfinite, void* stream);
void adamw32_step(float* p, const float* g, float* m, float* v, int64_t n, const optim_math::AdamScalars& s,
                  int64_t* n_nonfinite, void* stream);
void adamw8bit_step(float* p, const float* g, uint8_t* m_codes, uint8_t* v_codes, float* absmax_m,
                    float* absmax_v, const float* maps, int64_t n, const optim_math::AdamScalars& s,
                    int64_t* n_nonfinite, void* stream);

// Optimizer::step's gradient passes over the flat f32 gradient buffer:
// out[r] = the sum of g[256 r + j]^2 over j < 256 for r < n_rows, with the additions, in the same
// order, that sum(square(g).view({-1, 256}), {1}) makes (bitwise-equal, one pass, no temporary).
void row_sums_of_squares(const float* g, int64_t n_rows, float* out, void* stream);
// g[i] *= c in f32 for i < n, in place (bitwise-equal to mul(g, c)).
void scale(float* g, int64_t n, float c, void* stream);

}  // namespace wick::cuda
