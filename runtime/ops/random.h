// Random tensors from Philox streams: the same bits on every device, independent of dtype.
//
//   RngStream s = derive_stream(seed, sample_id, epoch, RngPurpose::Noise);
//   Tensor noise = randn({4, 16, 64, 64}, s, DType::BF16, Device::cuda(0));
//   Tensor t = rand({4}, derive_stream(seed, sample_id, epoch, RngPurpose::Timestep));
//   Tensor keep = bernoulli_mask({4, 1024}, 0.9, derive_stream(seed, step, 0, RngPurpose::Dropout));
//
// Element i (row-major) of every output is element (offset + i) of the stream (runtime/philox.h),
// computed in f32 on any device, then cast to dtype; so rand(n, s, ..., offset = k) equals the tail
// of rand(n + k, s), and the CPU and CUDA results are bitwise equal.
#pragma once

#include <cstdint>

#include "runtime/philox.h"
#include "runtime/tensor.h"

namespace wick {

// Uniform in [0, 1) with 24 random bits; dtype F32, F64, BF16 or F16 (16-bit types round to
// nearest even, so values just below 1 may round up to 1.0).
Tensor rand(const Shape& shape, const RngStream& stream, DType dtype = DType::F32, Device device = Device::cpu(),
            uint64_t offset = 0);
// Standard normal (Box–Muller); floating dtypes as rand.
Tensor randn(const Shape& shape, const RngStream& stream, DType dtype = DType::F32, Device device = Device::cpu(),
             uint64_t offset = 0);
// fmaf(u, high - low, low) with u from rand; high - low and low are rounded to f32 first. low < high.
Tensor uniform(const Shape& shape, double low, double high, const RngStream& stream, DType dtype = DType::F32,
               Device device = Device::cpu(), uint64_t offset = 0);
// fmaf(z, std, mean) with z from randn; std >= 0.
Tensor normal(const Shape& shape, double mean, double std, const RngStream& stream, DType dtype = DType::F32,
              Device device = Device::cpu(), uint64_t offset = 0);
// U8 mask: 1 where the stream's uniform element is < p (so P(1) = p, rounded to f32), else 0.
// p in [0, 1]; p = 1 gives all ones, p = 0 all zeros. For dropout, p is the keep probability.
Tensor bernoulli_mask(const Shape& shape, double p, const RngStream& stream, Device device = Device::cpu(),
                      uint64_t offset = 0);

}  // namespace wick
