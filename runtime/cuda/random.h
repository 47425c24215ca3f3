// CUDA fill kernel for the Philox random ops (runtime/ops/random.h). No CUDA headers here.
//
//   cuda::fill_random(out_ptr, DType::BF16, n, stream, offset, RandomDistribution::Normal, 1.0f, 0.0f, cuda_stream);
#pragma once

#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/philox.h"

namespace wick::cuda {

// out[i] = element (offset + i) of `rng` under `dist`, bitwise equal to cpu::fill_random; out is a
// contiguous device buffer of n elements; queued on `stream` (a cudaStream_t).
void fill_random(void* out, DType dtype, int64_t n, const RngStream& rng, uint64_t offset, RandomDistribution dist,
                 float scale, float shift, void* stream);

}  // namespace wick::cuda
