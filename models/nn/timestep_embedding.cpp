#include "models/nn/timestep_embedding.h"

#include <cmath>
#include <vector>

#include "engine/autograd/node.h"
#include "runtime/error.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/join.h"

namespace wick::nn {
namespace {

// exp(f32(-ln 10000) · f32(i) / half) for i < half, correctly rounded to f32.
std::vector<float> exact_frequencies(int64_t half) {
  std::vector<float> f;
  for (int64_t i = 0; i < half; ++i) {
    float exponent = static_cast<float>(-std::log(10000.0)) * static_cast<float>(i) / static_cast<float>(half);
    f.push_back(static_cast<float>(std::exp(static_cast<double>(exponent))));
  }
  return f;
}

// The `half` constants torch computes on the CPU (whatever the device): exponent (f32(-ln 10000) · f32(i))
// / half in f32, then torch's vectorized expf (SLEEF, 1 ulp), which for half = 128 rounds entries 13, 44
// and 119, and for half = 160 (SDXL's 320-wide time features) entries 2 and 55, one ulp above the
// correctly rounded exp (measured with torch 2.15 on x86-64; other widths of wick's models agree with the
// correctly rounded value). With arguments up to thousands of radians (Flux's guidance 3.5 x 1000) that ulp
// moves an angle by 1e-4, so the same constants are used here (Flux's f32 parity test drops from 7e-6 to
// 5e-7 with them).
std::vector<float> frequencies(int64_t half) {
  std::vector<float> f = exact_frequencies(half);
  std::vector<int64_t> above;
  if (half == 128) above = {13, 44, 119};
  if (half == 160) above = {2, 55};
  for (int64_t i : above) f[static_cast<size_t>(i)] = std::nextafter(f[static_cast<size_t>(i)], 1.0f);
  return f;
}

// [cos(scale · v · f_i), sin(scale · v · f_i)] with scale · v rounded to f32 first and the table `f`.
Tensor scaled_first(const Tensor& values, double scale, DType dtype, int64_t dim, bool exact) {
  WICK_CHECK(values.defined() && values.dim() == 1 && is_floating(values.dtype()), "timestep_features: ",
             values.defined() ? values.describe() : std::string("(none)"), " is not a floating [B] vector");
  WICK_CHECK(dim > 0 && dim % 2 == 0, "timestep_features: the width ", dim, " must be even and positive");
  const int64_t half = dim / 2;
  Tensor f = Tensor::from_vector<float>(exact ? exact_frequencies(half) : frequencies(half), {1, half})
                 .to(values.device());
  Tensor scaled = wick::mul(autograd::detach(values).to(DType::F32), scale);  // [B] in f32, as torch
  Tensor args = wick::mul(scaled.unsqueeze(1), f);                             // [B, half]
  return wick::concat({wick::cos(args), wick::sin(args)}, 1).to(dtype);        // cos first
}

}  // namespace

Tensor timestep_features(const Tensor& values, double scale, DType dtype) {
  return timestep_features(values, scale, dtype, 256);
}

Tensor timestep_features(const Tensor& values, double scale, DType dtype, int64_t dim) {
  return scaled_first(values, scale, dtype, dim, /*exact=*/false);
}

Tensor timestep_features_exact(const Tensor& values, double scale, DType dtype, int64_t dim) {
  return scaled_first(values, scale, dtype, dim, /*exact=*/true);
}

Tensor timestep_features_scaled_after(const Tensor& values, double scale, DType dtype, int64_t dim) {
  WICK_CHECK(values.defined() && values.dim() == 1 && is_floating(values.dtype()), "timestep_features: ",
             values.defined() ? values.describe() : std::string("(none)"), " is not a floating [B] vector");
  WICK_CHECK(dim > 0 && dim % 2 == 0, "timestep_features: the width ", dim, " must be even and positive");
  const int64_t half = dim / 2;
  Tensor f = Tensor::from_vector<float>(exact_frequencies(half), {1, half}).to(values.device());
  Tensor products = wick::mul(autograd::detach(values).to(DType::F32).unsqueeze(1), f);  // [B, half] in f32
  Tensor args = wick::mul(products, scale);
  return wick::concat({wick::cos(args), wick::sin(args)}, 1).to(dtype);  // cos first
}

}  // namespace wick::nn
