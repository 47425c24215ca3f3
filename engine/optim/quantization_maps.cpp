#include "engine/optim/quantization_maps.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <vector>

namespace wick {
namespace {

// torch.linspace(0.1, 1, n, dtype=float32) as PyTorch's CPU kernel computes it: f32 step, the
// first half from the start and the second half from the end, each as one fused multiply-add.
std::vector<float> linspace_f32(float start, float end, int n) {
  std::vector<float> out(n);
  float step = (end - start) / static_cast<float>(n - 1);
  int halfway = n / 2;
  for (int i = 0; i < n; ++i)
    out[i] = i < halfway ? std::fma(step, static_cast<float>(i), start)
                         : std::fma(-step, static_cast<float>(n - i - 1), end);
  return out;
}

std::array<float, 256> build_dynamic_map(bool is_signed) {
  constexpr int max_exponent_bits = 7, non_sign_bits = 7;
  std::vector<float> data;
  for (int i = 0; i < max_exponent_bits; ++i) {
    int n_bins = is_signed ? (1 << (i + non_sign_bits - max_exponent_bits))
                           : (1 << (i + non_sign_bits - max_exponent_bits + 1));
    std::vector<float> boundaries = linspace_f32(0.1f, 1.0f, n_bins + 1);
    // The decade's scale, as the f32 scalar PyTorch multiplies by (10**k rounded to f32).
    float scale = static_cast<float>(std::pow(10.0, i - (max_exponent_bits - 1)));
    for (int b = 0; b < n_bins; ++b) {
      float mean = (boundaries[b] + boundaries[b + 1]) / 2.0f;
      data.push_back(scale * mean);
    }
    if (is_signed)
      for (int b = 0; b < n_bins; ++b) {
        float mean = (boundaries[b] + boundaries[b + 1]) / 2.0f;
        data.push_back(-scale * mean);
      }
  }
  data.push_back(0.0f);
  data.push_back(1.0f);
  WICK_CHECK(data.size() == 256, "dynamic quantization map: built ", data.size(), " values, expected 256");
  std::sort(data.begin(), data.end());
  std::array<float, 256> map{};
  std::copy(data.begin(), data.end(), map.begin());
  return map;
}

}  // namespace

const std::array<float, 256>& signed_dynamic_map() {
  static const std::array<float, 256> map = build_dynamic_map(true);
  return map;
}

const std::array<float, 256>& unsigned_dynamic_map() {
  static const std::array<float, 256> map = build_dynamic_map(false);
  return map;
}

Tensor quantization_maps_tensor(Device device) {
  static std::mutex mutex;
  // Never destroyed: freeing device memory during static destruction can outlive the CUDA context.
  static auto* cache = new std::map<std::pair<int, int>, Tensor>();
  std::lock_guard<std::mutex> lock(mutex);
  auto key = std::make_pair(static_cast<int>(device.type), device.index);
  auto found = cache->find(key);
  if (found != cache->end()) return found->second;
  std::vector<float> both(signed_dynamic_map().begin(), signed_dynamic_map().end());
  both.insert(both.end(), unsigned_dynamic_map().begin(), unsigned_dynamic_map().end());
  Tensor maps = Tensor::from_vector<float>(both, {2, 256}, device);
  cache->emplace(key, maps);
  return maps;
}

}  // namespace wick
