#include "models/nn/timestep_embedding.h"

#include <cmath>
#include <vector>

#include "engine/autograd/node.h"
#include "runtime/error.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/join.h"

namespace wick::nn {
namespace {

constexpr int64_t kHalf = 128;

// The 128 constants torch computes on the CPU (whatever the device): exponent (f32(-ln 10000) · f32(i))
// / 128 in f32, then torch's vectorized expf (SLEEF, 1 ulp), which rounds entries 13, 44 and 119 one
// ulp above the correctly rounded exp. With arguments up to thousands of radians (Flux's guidance
// 3.5 x 1000) that ulp moves an angle by 1e-4, so the same constants are used here (Flux's f32
// parity test drops from 7e-6 to 5e-7 with them).
const std::vector<float>& frequencies() {
  static const std::vector<float> table = [] {
    std::vector<float> f;
    for (int64_t i = 0; i < kHalf; ++i) {
      float exponent = static_cast<float>(-std::log(10000.0)) * static_cast<float>(i) / static_cast<float>(kHalf);
      f.push_back(static_cast<float>(std::exp(static_cast<double>(exponent))));  // correctly rounded
    }
    for (int64_t i : {13, 44, 119}) f[static_cast<size_t>(i)] = std::nextafter(f[static_cast<size_t>(i)], 1.0f);
    return f;
  }();
  return table;
}

}  // namespace

Tensor timestep_features(const Tensor& values, double scale, DType dtype) {
  WICK_CHECK(values.defined() && values.dim() == 1 && is_floating(values.dtype()), "timestep_features: ",
             values.defined() ? values.describe() : std::string("(none)"), " is not a floating [B] vector");
  Tensor f = Tensor::from_vector<float>(frequencies(), {1, kHalf}).to(values.device());
  Tensor scaled = wick::mul(autograd::detach(values).to(DType::F32), scale);  // [B] in f32, as torch
  Tensor args = wick::mul(scaled.unsqueeze(1), f);                             // [B, 128]
  return wick::concat({wick::cos(args), wick::sin(args)}, 1).to(dtype);        // cos first
}

}  // namespace wick::nn
