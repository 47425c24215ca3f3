// Op-harness entries for conv2d, against a naive float64 seven-loop convolution.
#include <array>

#include "runtime/ops/conv.h"
#include "tests/runtime/op_harness.h"

namespace wick::testing {
namespace {

struct ConvParams {
  std::array<int64_t, 2> stride = {1, 1}, padding = {0, 0}, dilation = {1, 1};
  int64_t groups = 1;
};

RefTensor ref_conv2d(const RefTensor& x, const RefTensor& w, const RefTensor* bias, const ConvParams& p) {
  int64_t n = x.shape[0], c = x.shape[1], h = x.shape[2], wd = x.shape[3];
  int64_t o = w.shape[0], cg = w.shape[1], kh = w.shape[2], kw = w.shape[3];
  int64_t og = o / p.groups;
  int64_t ho = (h + 2 * p.padding[0] - p.dilation[0] * (kh - 1) - 1) / p.stride[0] + 1;
  int64_t wo = (wd + 2 * p.padding[1] - p.dilation[1] * (kw - 1) - 1) / p.stride[1] + 1;
  RefTensor y = ref_like({n, o, ho, wo});
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t oh = 0; oh < ho; ++oh)
        for (int64_t ow = 0; ow < wo; ++ow) {
          double sum = bias ? bias->at(oc) : 0.0;
          int64_t group = oc / og;
          for (int64_t ic = 0; ic < cg; ++ic)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                int64_t ih = oh * p.stride[0] - p.padding[0] + i * p.dilation[0];
                int64_t iw = ow * p.stride[1] - p.padding[1] + j * p.dilation[1];
                if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
                int64_t channel = group * cg + ic;
                sum += x.at(((b * c + channel) * h + ih) * wd + iw) * w.at(((oc * cg + ic) * kh + i) * kw + j);
              }
          y.at(((b * o + oc) * ho + oh) * wo + ow) = sum;
        }
  (void)c;
  return y;
}

InputSpec spec(Shape shape, bool non_contiguous = false) {
  InputSpec input;
  input.shape = std::move(shape);
  input.non_contiguous = non_contiguous;
  return input;
}

// Sums of up to 144 products of values in [-1, 1).
const std::vector<std::pair<DType, Tolerance>> conv_cpu_tolerance = {
    {DType::F32, {2e-5, 2e-5}}, {DType::BF16, {3e-2, 2e-2}}, {DType::F16, {5e-3, 4e-3}}};
// cuDNN may pick Winograd or FFT algorithms, whose f32 rounding differs from a direct sum.
const std::vector<std::pair<DType, Tolerance>> conv_cuda_tolerance = {
    {DType::F32, {1e-4, 1e-4}}, {DType::F64, {1e-10, 1e-10}}, {DType::BF16, {3e-2, 2e-2}}, {DType::F16, {5e-3, 4e-3}}};

OpCase conv_case(std::string name, Shape x, Shape w, bool with_bias, ConvParams p, bool non_contiguous = false) {
  OpCase op_case;
  op_case.name = std::move(name);
  op_case.inputs = {spec(x, non_contiguous), spec(w)};
  if (with_bias) op_case.inputs.push_back(spec({w[0]}));
  op_case.run = [p](const Inputs& in) {
    Tensor bias = in.size() > 2 ? in[2] : Tensor();
    return Outputs{conv2d(in[0], in[1], bias, p.stride, p.padding, p.dilation, p.groups)};
  };
  op_case.reference = [p](const RefInputs& in) {
    return RefOutputs{ref_conv2d(in[0], in[1], in.size() > 2 ? &in[2] : nullptr, p)};
  };
  op_case.dtypes = {DType::F32, DType::F64, DType::BF16, DType::F16};
  op_case.cpu_tolerance = conv_cpu_tolerance;
  op_case.cuda_tolerance = conv_cuda_tolerance;
  return op_case;
}

std::vector<OpCase> conv_cases() {
  return {
      conv_case("conv2d_3x3", {2, 3, 7, 7}, {4, 3, 3, 3}, false, {}),
      conv_case("conv2d_3x3_pad_bias", {2, 3, 8, 8}, {5, 3, 3, 3}, true, {.padding = {1, 1}}),
      conv_case("conv2d_stride2", {1, 4, 9, 10}, {6, 4, 3, 3}, true, {.stride = {2, 2}, .padding = {1, 1}}),
      conv_case("conv2d_dilation2", {2, 2, 11, 9}, {3, 2, 3, 3}, false, {.padding = {2, 2}, .dilation = {2, 2}}),
      conv_case("conv2d_groups2", {2, 4, 6, 6}, {6, 2, 3, 3}, true, {.padding = {1, 1}, .groups = 2}),
      conv_case("conv2d_depthwise", {2, 5, 7, 7}, {5, 1, 3, 3}, true, {.padding = {1, 1}, .groups = 5}),
      conv_case("conv2d_1x1_bias", {3, 8, 5, 5}, {4, 8, 1, 1}, true, {}),
      conv_case("conv2d_1x1_stride2", {1, 6, 7, 7}, {3, 6, 1, 1}, false, {.stride = {2, 2}}),
      conv_case("conv2d_rect_kernel", {1, 3, 6, 9}, {2, 3, 2, 5}, true, {.stride = {1, 2}, .padding = {1, 0}}),
      conv_case("conv2d_strided_input", {2, 3, 6, 5}, {4, 3, 3, 3}, true, {.padding = {1, 1}}, true),
      // Large enough per item that batch items run one after another with threaded GEMMs.
      conv_case("conv2d_wide", {2, 16, 20, 20}, {32, 16, 3, 3}, true, {.padding = {1, 1}}),
  };
}

}  // namespace

WICK_REGISTER_OP_CASES(conv_cases);

}  // namespace wick::testing
