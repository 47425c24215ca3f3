#include "models/diffusion/noise.h"

#include "runtime/error.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/join.h"
#include "runtime/ops/random.h"
#include "runtime/philox.h"

namespace wick::diffusion {

Tensor sample_noise(const Shape& shape, const std::vector<uint64_t>& sample_ids, uint64_t epoch, uint64_t seed,
                    double offset, DType dtype, Device device) {
  WICK_CHECK(!shape.empty() && static_cast<int64_t>(sample_ids.size()) == shape[0], "sample_noise: ",
             sample_ids.size(), " sample ids for shape ", shape_string(shape));
  WICK_CHECK(offset == 0.0 || shape.size() >= 2, "sample_noise: noise offset needs [B, C, ...], got ",
             shape_string(shape));
  Shape per_sample(shape.begin() + 1, shape.end());
  int64_t n = 1;
  for (int64_t e : per_sample) n *= e;
  std::vector<Tensor> parts;
  parts.reserve(sample_ids.size());
  for (uint64_t id : sample_ids) {
    RngStream s = derive_stream(seed, id, epoch, RngPurpose::Noise);
    Tensor eps = randn(per_sample, s, DType::F32, device);
    if (offset != 0.0) {
      Shape channel_shape(per_sample.size(), 1);
      channel_shape[0] = per_sample[0];
      Tensor z = randn(channel_shape, s, DType::F32, device, static_cast<uint64_t>(n));
      eps = add(eps, mul(z, offset));
    }
    parts.push_back(eps);
  }
  return stack(parts, 0).to(dtype);
}

Tensor per_sample_view(const Tensor& v, int64_t rank) {
  Shape s(static_cast<size_t>(rank), 1);
  s[0] = v.shape()[0];
  return v.reshape(s);
}

}  // namespace wick::diffusion
