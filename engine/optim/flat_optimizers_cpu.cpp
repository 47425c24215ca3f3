// CPU (OpenMP) kernels of the fused optimizer steps; the math lives in optimizer_math.h.
#include <algorithm>
#include <atomic>

#include "engine/optim/flat_optimizer_kernels.h"
#include "runtime/cpu/parallel.h"

namespace wick::cpu {

namespace om = optim_math;

namespace {
constexpr int64_t block = 256;  // quantization block of the 8-bit state
}

int64_t sgd_step(float* p, const float* g, float* momentum_buffer, int64_t n, const om::SgdScalars& s) {
  std::atomic<int64_t> n_nonfinite{0};
  parallel_for(n, [&](int64_t begin, int64_t end) {
    int64_t local = 0;
    for (int64_t i = begin; i < end; ++i)
      if (!om::sgd_element(g[i], p[i], s.has_momentum ? momentum_buffer + i : nullptr, s)) ++local;
    n_nonfinite += local;
  });
  return n_nonfinite.load();
}

int64_t adamw32_step(float* p, const float* g, float* m, float* v, int64_t n, const om::AdamScalars& s) {
  std::atomic<int64_t> n_nonfinite{0};
  parallel_for(n, [&](int64_t begin, int64_t end) {
    int64_t local = 0;
    for (int64_t i = begin; i < end; ++i)
      if (!om::adamw32_element(g[i], p[i], m[i], v[i], s)) ++local;
    n_nonfinite += local;
  });
  return n_nonfinite.load();
}

int64_t adamw8bit_step(float* p, const float* g, uint8_t* m_codes, uint8_t* v_codes, float* absmax_m,
                       float* absmax_v, const float* maps, int64_t n, const om::AdamScalars& s) {
  const float* signed_map = maps;
  const float* unsigned_map = maps + 256;
  int64_t n_blocks = (n + block - 1) / block;
  std::atomic<int64_t> n_nonfinite{0};
  parallel_for(
      n_blocks,
      [&](int64_t block_begin, int64_t block_end) {
        float m[block], v[block];
        bool ok[block];
        int64_t local = 0;
        for (int64_t b = block_begin; b < block_end; ++b) {
          int64_t base = b * block, count = std::min(block, n - base);
          // 1. dequantize with the old absmax, update m and v in f32, new absmax over the block
          float old_absmax_m = absmax_m[b], old_absmax_v = absmax_v[b];
          float new_absmax_m = 0.0f, new_absmax_v = 0.0f;
          for (int64_t j = 0; j < count; ++j) {
            int64_t i = base + j;
            m[j] = om::mul_rn(signed_map[m_codes[i]], old_absmax_m);
            v[j] = om::mul_rn(unsigned_map[v_codes[i]], old_absmax_v);
            ok[j] = om::adam8bit_moments(g[i], m[j], v[j], s);
            if (!ok[j]) ++local;
            new_absmax_m = std::max(new_absmax_m, std::fabs(m[j]));
            new_absmax_v = std::max(new_absmax_v, std::fabs(v[j]));
          }
          absmax_m[b] = new_absmax_m;
          absmax_v[b] = new_absmax_v;
          // 2. parameter update (bias-corrected, decay after), 3. requantize
          for (int64_t j = 0; j < count; ++j) {
            int64_t i = base + j;
            if (ok[j]) p[i] = om::adam8bit_param(p[i], m[j], v[j], s);
            m_codes[i] = om::requantize(signed_map, m[j], new_absmax_m, true);
            v_codes[i] = om::requantize(unsigned_map, v[j], new_absmax_v, false);
          }
        }
        n_nonfinite += local;
      },
      default_grain / block);
  return n_nonfinite.load();
}

}  // namespace wick::cpu
