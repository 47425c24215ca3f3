#include "runtime/cpu/conv.h"

#include <algorithm>
#include <vector>

#include "runtime/cpu/conv_columns.h"
#include "runtime/cpu/matmul.h"
#include "runtime/cpu/parallel.h"

namespace wick::cpu {
namespace {

template <typename T>
void conv2d_typed(const Conv2dGeometry& g, const T* x, const T* weight, const T* bias, T* y) {
  int64_t n_columns = g.ho * g.wo, og = g.outputs_per_group(), kg = g.patch_size();
  bool pointwise = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
  auto run_item = [&](int64_t item, std::vector<T>& columns) {
    const T* x_item = x + item * g.c * g.h * g.w;
    T* y_item = y + item * g.o * n_columns;
    if (bias) {
      for (int64_t channel = 0; channel < g.o; ++channel)
        std::fill(y_item + channel * n_columns, y_item + (channel + 1) * n_columns, bias[channel]);
    }
    const T* patches = x_item;  // a 1x1 stride-1 convolution reads x as its own column matrix
    if (!pointwise) {
      columns.resize(static_cast<size_t>(g.c * g.kh * g.kw * n_columns));
      im2col(g, x_item, columns.data());
      patches = columns.data();
    }
    // Per group: y_g [og, ho*wo] (+)= weight_g [og, kg] @ columns_g [kg, ho*wo].
    GemmProblem p;
    p.dtype = dtype_of<T>::value;
    p.m = og;
    p.n = n_columns;
    p.k = kg;
    p.a = weight;
    p.lda = kg;
    p.b = patches;
    p.ldb = n_columns;
    p.c = y_item;
    p.ldc = n_columns;
    p.accumulate = bias != nullptr;
    p.n_batch = g.groups;
    Shape groups{g.groups};
    p.a_batch = make_strided_view(groups, {og * kg}, "conv2d");
    p.b_batch = make_strided_view(groups, {kg * n_columns}, "conv2d");
    p.c_batch = make_strided_view(groups, {og * n_columns}, "conv2d");
    gemm(p);
  };
  if (g.n > 1 && og * n_columns * kg < small_gemm_flops) {
    parallel_for(g.n, [&](int64_t begin, int64_t end) {
      std::vector<T> columns;
      for (int64_t item = begin; item < end; ++item) run_item(item, columns);
    }, 1);
    return;
  }
  std::vector<T> columns;
  for (int64_t item = 0; item < g.n; ++item) run_item(item, columns);
}

}  // namespace

void conv2d(const Conv2dGeometry& geometry, DType dtype, const void* x, const void* weight, const void* bias,
            void* y) {
  if (geometry.n * geometry.o * geometry.ho * geometry.wo == 0) return;
  if (dtype == DType::F64)
    conv2d_typed(geometry, static_cast<const double*>(x), static_cast<const double*>(weight),
                 static_cast<const double*>(bias), static_cast<double*>(y));
  else
    conv2d_typed(geometry, static_cast<const float*>(x), static_cast<const float*>(weight),
                 static_cast<const float*>(bias), static_cast<float*>(y));
}

// ---- gradients ----

namespace {

bool is_pointwise(const Conv2dGeometry& g) {
  return g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
}

template <typename T>
void backward_input_typed(const Conv2dGeometry& g, const T* grad_y, const T* weight, T* grad_x) {
  int64_t n_columns = g.ho * g.wo, og = g.outputs_per_group(), kg = g.patch_size();
  bool pointwise = is_pointwise(g);
  auto run_item = [&](int64_t item, std::vector<T>& columns) {
    const T* grad_y_item = grad_y + item * g.o * n_columns;
    T* grad_x_item = grad_x + item * g.c * g.h * g.w;
    // A 1x1 stride-1 convolution's columns are x itself: the product lands in grad_x directly.
    T* out = grad_x_item;
    if (!pointwise) {
      columns.resize(static_cast<size_t>(g.c * g.kh * g.kw * n_columns));
      out = columns.data();
    }
    // Per group: columns_g [kg, ho*wo] = weight_g^T [kg, og] @ grad_y_g [og, ho*wo].
    GemmProblem p;
    p.dtype = dtype_of<T>::value;
    p.m = kg;
    p.n = n_columns;
    p.k = og;
    p.a = weight;
    p.a_transposed = true;  // weight_g is [og, kg] row-major, i.e. its transpose column-major
    p.lda = kg;
    p.b = grad_y_item;
    p.ldb = n_columns;
    p.c = out;
    p.ldc = n_columns;
    p.n_batch = g.groups;
    Shape groups{g.groups};
    p.a_batch = make_strided_view(groups, {og * kg}, "conv2d_backward_input");
    p.b_batch = make_strided_view(groups, {og * n_columns}, "conv2d_backward_input");
    p.c_batch = make_strided_view(groups, {kg * n_columns}, "conv2d_backward_input");
    gemm(p);
    if (!pointwise) col2im(g, columns.data(), grad_x_item);
  };
  if (g.n > 1 && og * n_columns * kg < small_gemm_flops) {
    parallel_for(g.n, [&](int64_t begin, int64_t end) {
      std::vector<T> columns;
      for (int64_t item = begin; item < end; ++item) run_item(item, columns);
    }, 1);
    return;
  }
  std::vector<T> columns;
  for (int64_t item = 0; item < g.n; ++item) run_item(item, columns);
}

template <typename T>
void backward_weight_typed(const Conv2dGeometry& g, const T* grad_y, const T* x, T* grad_weight) {
  int64_t n_columns = g.ho * g.wo, og = g.outputs_per_group(), kg = g.patch_size();
  bool pointwise = is_pointwise(g);
  std::vector<T> columns;
  for (int64_t item = 0; item < g.n; ++item) {
    const T* x_item = x + item * g.c * g.h * g.w;
    const T* patches = x_item;
    if (!pointwise) {
      columns.resize(static_cast<size_t>(g.c * g.kh * g.kw * n_columns));
      im2col(g, x_item, columns.data());
      patches = columns.data();
    }
    // Per group: grad_weight_g [og, kg] (+)= grad_y_g [og, ho*wo] @ columns_g^T [ho*wo, kg].
    GemmProblem p;
    p.dtype = dtype_of<T>::value;
    p.m = og;
    p.n = kg;
    p.k = n_columns;
    p.a = grad_y + item * g.o * n_columns;
    p.lda = n_columns;
    p.b = patches;
    p.b_transposed = true;  // columns_g is [kg, ho*wo] row-major
    p.ldb = n_columns;
    p.c = grad_weight;
    p.ldc = kg;
    p.accumulate = item > 0;
    p.n_batch = g.groups;
    Shape groups{g.groups};
    p.a_batch = make_strided_view(groups, {og * n_columns}, "conv2d_backward_weight");
    p.b_batch = make_strided_view(groups, {kg * n_columns}, "conv2d_backward_weight");
    p.c_batch = make_strided_view(groups, {og * kg}, "conv2d_backward_weight");
    gemm(p);
  }
}

}  // namespace

void conv2d_backward_input(const Conv2dGeometry& geometry, DType dtype, const void* grad_y, const void* weight,
                           void* grad_x) {
  if (geometry.n * geometry.c * geometry.h * geometry.w == 0) return;
  if (dtype == DType::F64)
    backward_input_typed(geometry, static_cast<const double*>(grad_y), static_cast<const double*>(weight),
                         static_cast<double*>(grad_x));
  else
    backward_input_typed(geometry, static_cast<const float*>(grad_y), static_cast<const float*>(weight),
                         static_cast<float*>(grad_x));
}

void conv2d_backward_weight(const Conv2dGeometry& geometry, DType dtype, const void* grad_y, const void* x,
                            void* grad_weight) {
  int64_t n_weight = geometry.o * geometry.patch_size();
  if (n_weight == 0) return;
  if (geometry.n == 0) {
    // No items: the gradient is zero.
    if (dtype == DType::F64)
      std::fill_n(static_cast<double*>(grad_weight), n_weight, 0.0);
    else
      std::fill_n(static_cast<float*>(grad_weight), n_weight, 0.0f);
    return;
  }
  if (dtype == DType::F64)
    backward_weight_typed(geometry, static_cast<const double*>(grad_y), static_cast<const double*>(x),
                          static_cast<double*>(grad_weight));
  else
    backward_weight_typed(geometry, static_cast<const float*>(grad_y), static_cast<const float*>(x),
                          static_cast<float*>(grad_weight));
}
}  // namespace wick::cpu
