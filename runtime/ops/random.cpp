#include "runtime/ops/random.h"

#include <cmath>

#include "runtime/cpu/random.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/random.h"

namespace wick {

namespace {

Tensor fill(const char* op, const Shape& shape, const RngStream& stream, DType dtype, Device device,
            uint64_t offset, RandomDistribution dist, float scale, float shift) {
  for (int64_t extent : shape)
    WICK_CHECK(extent >= 0, op, ": negative extent in shape ", shape);
  Tensor out = Tensor::empty(shape, dtype, device);
  int64_t n = out.numel();
  if (n == 0) return out;
  WICK_CHECK(offset <= UINT64_MAX - static_cast<uint64_t>(n), op, ": offset ", offset, " + ", n,
             " elements overflows the stream's 64-bit element index");
  if (device.is_cpu()) {
    cpu::fill_random(out.data(), dtype, n, stream, offset, dist, scale, shift);
  } else {
    cuda::set_device(device.index);
    cuda::fill_random(out.data(), dtype, n, stream, offset, dist, scale, shift, current_stream(device).handle);
  }
  return out;
}

void check_floating(const char* op, DType dtype) {
  WICK_CHECK(is_floating(dtype), op, ": dtype must be f32, f64, bf16 or f16, got ", dtype_name(dtype));
}

}  // namespace

Tensor rand(const Shape& shape, const RngStream& stream, DType dtype, Device device, uint64_t offset) {
  check_floating("rand", dtype);
  return fill("rand", shape, stream, dtype, device, offset, RandomDistribution::Uniform, 1.0f, 0.0f);
}

Tensor randn(const Shape& shape, const RngStream& stream, DType dtype, Device device, uint64_t offset) {
  check_floating("randn", dtype);
  return fill("randn", shape, stream, dtype, device, offset, RandomDistribution::Normal, 1.0f, 0.0f);
}

Tensor uniform(const Shape& shape, double low, double high, const RngStream& stream, DType dtype, Device device,
               uint64_t offset) {
  check_floating("uniform", dtype);
  WICK_CHECK(std::isfinite(low) && std::isfinite(high) && low < high, "uniform: need finite low < high, got low ",
             low, ", high ", high);
  return fill("uniform", shape, stream, dtype, device, offset, RandomDistribution::Uniform,
              static_cast<float>(high - low), static_cast<float>(low));
}

Tensor normal(const Shape& shape, double mean, double std, const RngStream& stream, DType dtype, Device device,
              uint64_t offset) {
  check_floating("normal", dtype);
  WICK_CHECK(std::isfinite(mean) && std::isfinite(std) && std >= 0, "normal: need finite mean and std >= 0, got mean ",
             mean, ", std ", std);
  return fill("normal", shape, stream, dtype, device, offset, RandomDistribution::Normal, static_cast<float>(std),
              static_cast<float>(mean));
}

Tensor bernoulli_mask(const Shape& shape, double p, const RngStream& stream, Device device, uint64_t offset) {
  WICK_CHECK(p >= 0 && p <= 1, "bernoulli_mask: p must lie in [0, 1], got ", p);
  return fill("bernoulli_mask", shape, stream, DType::U8, device, offset, RandomDistribution::Bernoulli,
              static_cast<float>(p), 0.0f);
}

}  // namespace wick
