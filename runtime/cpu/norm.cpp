#include "runtime/cpu/norm.h"

#include <cmath>

#include "runtime/cpu/parallel.h"
#include "runtime/cpu/row_reduce.h"
#include "runtime/kernel_args.h"

namespace wick::cpu {
namespace {

template <typename T, typename S>
void normalize_typed(const NormProblem& p, const T* x, const S* weight, const S* bias, T* y, S* mean_out,
                     S* rstd_out) {
  int64_t d = p.row_size;
  int64_t grain = std::max<int64_t>(1, default_grain / std::max<int64_t>(1, d));
  parallel_for(p.rows, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const T* in = x + row * d;
      T* out = y + row * d;
      auto value_at = [&](int64_t j) { return static_cast<double>(static_cast<compute_t<T>>(in[j])); };
      double mean = p.subtract_mean ? lane_sum(d, value_at) / static_cast<double>(d) : 0.0;
      double squares = lane_sum(d, [&](int64_t j) {
        double centered = value_at(j) - mean;
        return centered * centered;
      });
      S row_mean = static_cast<S>(mean);
      S row_rstd = static_cast<S>(1.0 / std::sqrt(squares / static_cast<double>(d) + p.eps));
      if (mean_out) mean_out[row] = row_mean;
      rstd_out[row] = row_rstd;
      for (int64_t j = 0; j < d; ++j) {
        S value = (static_cast<S>(static_cast<compute_t<T>>(in[j])) - row_mean) * row_rstd;
        if (weight || bias) {
          int64_t channel = p.channel_of(row, j);
          if (weight) value *= weight[channel];
          if (bias) value += bias[channel];
        }
        out[j] = convert<T>(value);
      }
    }
  }, grain);
}

}  // namespace

void normalize_rows(const NormProblem& problem, DType dtype, const void* x, const void* weight, const void* bias,
                    void* y, void* mean, void* rstd) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, double>) {
      normalize_typed<double, double>(problem, static_cast<const double*>(x), static_cast<const double*>(weight),
                                      static_cast<const double*>(bias), static_cast<double*>(y),
                                      static_cast<double*>(mean), static_cast<double*>(rstd));
    } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bf16> || std::is_same_v<T, f16>) {
      normalize_typed<T, float>(problem, static_cast<const T*>(x), static_cast<const float*>(weight),
                                static_cast<const float*>(bias), static_cast<T*>(y), static_cast<float*>(mean),
                                static_cast<float*>(rstd));
    }
  });
}

}  // namespace wick::cpu
