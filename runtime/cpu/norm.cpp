#include "runtime/cpu/norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

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

// ---- gradients ----

namespace {

template <typename T>
double load(const T* data, int64_t i) {
  return static_cast<double>(static_cast<compute_t<T>>(data[i]));
}

// grad_x = rstd * (g w - mean(g w) - xhat * mean(g w xhat)) per row (no mean(g w) term for RMS).
template <typename T, typename S>
void grad_x_rows(const NormProblem& p, const T* grad_y, const T* x, const S* mean, const S* rstd, const S* weight,
                 T* grad_x) {
  int64_t d = p.row_size;
  int64_t grain = std::max<int64_t>(1, default_grain / std::max<int64_t>(1, d));
  parallel_for(p.rows, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const T* g = grad_y + row * d;
      const T* in = x + row * d;
      double row_mean = mean ? static_cast<double>(mean[row]) : 0.0, row_rstd = static_cast<double>(rstd[row]);
      double sum_gw = 0, sum_gw_xhat = 0;
      if (weight == nullptr) {  // the common unweighted case as loops GCC vectorizes
        sum_gw = lane_sum(d, [&](int64_t j) { return load(g, j); });
        sum_gw_xhat = lane_sum(d, [&](int64_t j) { return load(g, j) * (load(in, j) - row_mean) * row_rstd; });
      } else {
        auto gw_at = [&](int64_t j) { return load(g, j) * static_cast<double>(weight[p.channel_of(row, j)]); };
        sum_gw = lane_sum(d, gw_at);
        sum_gw_xhat = lane_sum(d, [&](int64_t j) { return gw_at(j) * (load(in, j) - row_mean) * row_rstd; });
      }
      double mean_gw = p.subtract_mean ? sum_gw / static_cast<double>(d) : 0.0;
      double mean_gw_xhat = sum_gw_xhat / static_cast<double>(d);
      T* out = grad_x + row * d;
      for (int64_t j = 0; j < d; ++j) {
        double gw = load(g, j) * (weight ? static_cast<double>(weight[p.channel_of(row, j)]) : 1.0);
        double xhat = (load(in, j) - row_mean) * row_rstd;
        out[j] = convert<T>(static_cast<compute_t<T>>(row_rstd * (gw - mean_gw - xhat * mean_gw_xhat)));
      }
    }
  }, grain);
}

// Layer/RMS norm: the channel of element j is j, so grad_weight[j] = sum over rows of g * xhat.
// Column ranges run in parallel, each walking the rows in order.
template <typename T, typename S>
void affine_grads_columns(const NormProblem& p, const T* grad_y, const T* x, const S* mean, const S* rstd,
                          S* grad_weight, S* grad_bias) {
  int64_t d = p.row_size;
  int64_t grain = std::max<int64_t>(1, default_grain / std::max<int64_t>(1, p.rows));
  parallel_for(d, [&](int64_t begin, int64_t end) {
    std::vector<double> sum_w(static_cast<size_t>(end - begin), 0.0), sum_b(static_cast<size_t>(end - begin), 0.0);
    for (int64_t row = 0; row < p.rows; ++row) {
      double row_mean = mean ? static_cast<double>(mean[row]) : 0.0, row_rstd = static_cast<double>(rstd[row]);
      const T* g = grad_y + row * d;
      const T* in = x + row * d;
      for (int64_t j = begin; j < end; ++j) {
        double gj = load(g, j);
        sum_w[static_cast<size_t>(j - begin)] += gj * (load(in, j) - row_mean) * row_rstd;
        sum_b[static_cast<size_t>(j - begin)] += gj;
      }
    }
    for (int64_t j = begin; j < end; ++j) {
      if (grad_weight) grad_weight[j] = static_cast<S>(sum_w[static_cast<size_t>(j - begin)]);
      if (grad_bias) grad_bias[j] = static_cast<S>(sum_b[static_cast<size_t>(j - begin)]);
    }
  }, grain);
}

// Group norm: channel c covers, in every sample, `inner` consecutive elements of row
// sample * groups + c / channels_per_group. Channels run in parallel.
template <typename T, typename S>
void affine_grads_groups(const NormProblem& p, const T* grad_y, const T* x, const S* mean, const S* rstd,
                         S* grad_weight, S* grad_bias) {
  int64_t n_channels = p.groups * p.channels_per_group, n_samples = p.rows / p.groups;
  int64_t grain = std::max<int64_t>(1, default_grain / std::max<int64_t>(1, n_samples * p.inner));
  parallel_for(n_channels, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      int64_t group = c / p.channels_per_group, first = (c % p.channels_per_group) * p.inner;
      double sum_w = 0, sum_b = 0;
      for (int64_t sample = 0; sample < n_samples; ++sample) {
        int64_t row = sample * p.groups + group;
        double row_mean = static_cast<double>(mean[row]), row_rstd = static_cast<double>(rstd[row]);
        const T* g = grad_y + row * p.row_size + first;
        const T* in = x + row * p.row_size + first;
        for (int64_t i = 0; i < p.inner; ++i) {
          double gi = load(g, i);
          sum_w += gi * (load(in, i) - row_mean) * row_rstd;
          sum_b += gi;
        }
      }
      if (grad_weight) grad_weight[c] = static_cast<S>(sum_w);
      if (grad_bias) grad_bias[c] = static_cast<S>(sum_b);
    }
  }, grain);
}

template <typename T, typename S>
void backward_typed(const NormProblem& p, const void* grad_y, const void* x, const void* mean, const void* rstd,
                    const void* weight, void* grad_x, void* grad_weight, void* grad_bias) {
  auto g = static_cast<const T*>(grad_y);
  auto in = static_cast<const T*>(x);
  auto m = static_cast<const S*>(mean);
  auto r = static_cast<const S*>(rstd);
  if (grad_x) grad_x_rows<T, S>(p, g, in, m, r, static_cast<const S*>(weight), static_cast<T*>(grad_x));
  if (!grad_weight && !grad_bias) return;
  if (p.channels_per_group == 0)
    affine_grads_columns<T, S>(p, g, in, m, r, static_cast<S*>(grad_weight), static_cast<S*>(grad_bias));
  else
    affine_grads_groups<T, S>(p, g, in, m, r, static_cast<S*>(grad_weight), static_cast<S*>(grad_bias));
}

}  // namespace

void normalize_rows_backward(const NormProblem& problem, DType dtype, const void* grad_y, const void* x,
                             const void* mean, const void* rstd, const void* weight, void* grad_x, void* grad_weight,
                             void* grad_bias) {
  switch (dtype) {
    case DType::F64:
      backward_typed<double, double>(problem, grad_y, x, mean, rstd, weight, grad_x, grad_weight, grad_bias);
      break;
    case DType::BF16:
      backward_typed<bf16, float>(problem, grad_y, x, mean, rstd, weight, grad_x, grad_weight, grad_bias);
      break;
    case DType::F16:
      backward_typed<f16, float>(problem, grad_y, x, mean, rstd, weight, grad_x, grad_weight, grad_bias);
      break;
    default:
      backward_typed<float, float>(problem, grad_y, x, mean, rstd, weight, grad_x, grad_weight, grad_bias);
      break;
  }
}
}  // namespace wick::cpu
