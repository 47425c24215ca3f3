// CPU fill kernel for the Philox random ops (runtime/ops/random.h).
//
//   cpu::fill_random(out_ptr, DType::F32, n, stream, offset, RandomDistribution::Normal, 1.0f, 0.0f);
#pragma once

#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/philox.h"

namespace wick::cpu {

// out[i] = element (offset + i) of `stream` under `dist` (see fill_block), computed in f32 and
// converted to dtype; out is contiguous with n elements.
void fill_random(void* out, DType dtype, int64_t n, const RngStream& stream, uint64_t offset, RandomDistribution dist,
                 float scale, float shift);

}  // namespace wick::cpu
