// The two 256-entry "dynamic tree" quantization maps of 8-bit Adam, built exactly as
// bitsandbytes' create_dynamic_map(signed=True / False) builds them (bitwise-equal f32 values).
//
//   const std::array<float, 256>& m_map = signed_dynamic_map();    // first moment, [-0.99297, 1]
//   const std::array<float, 256>& v_map = unsigned_dynamic_map();  // second moment, [0, 1]
//   Tensor maps = quantization_maps_tensor(Device::cuda(0));         // f32 [2, 256], cached per device
//
// Rule: decade i = 0..6 covers [0.1, 1]·10^(i-6), split into 2^i (signed) or 2^(i+1) (unsigned)
// equal bins by a float32 linspace; each bin adds its midpoint (and, signed, its negative); then
// 0 and 1.0 are added and the 256 values sorted. Signed: 0 sits at index 127.
#pragma once

#include <array>

#include "runtime/tensor.h"

namespace wick {

const std::array<float, 256>& signed_dynamic_map();
const std::array<float, 256>& unsigned_dynamic_map();
// Rows 0 (signed) and 1 (unsigned) as one contiguous f32 [2, 256] tensor on `device`; built once
// per device and kept for the life of the process (the returned handle shares that memory).
Tensor quantization_maps_tensor(Device device);

}  // namespace wick
