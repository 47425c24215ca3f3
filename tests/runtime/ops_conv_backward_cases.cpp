// Op-harness entries for conv2d_backward_input and conv2d_backward_weight, against naive float64
// scatter loops over the forward's taps (the adjoints of the seven-loop convolution).
#include <array>

#include "runtime/ops/conv.h"
#include "runtime/ops/conv_geometry.h"
#include "tests/runtime/op_harness.h"

namespace wick::testing {
namespace {

struct ConvParams {
  std::array<int64_t, 2> stride = {1, 1}, padding = {0, 0}, dilation = {1, 1};
  int64_t groups = 1;
};

// Calls visit(x_index, w_index, y_index) for every tap of the forward convolution.
template <typename Visit>
void for_each_tap(const Shape& x, const Shape& w, const ConvParams& p, Visit visit) {
  int64_t n = x[0], c = x[1], h = x[2], wd = x[3];
  int64_t o = w[0], cg = w[1], kh = w[2], kw = w[3], og = o / p.groups;
  int64_t ho = (h + 2 * p.padding[0] - p.dilation[0] * (kh - 1) - 1) / p.stride[0] + 1;
  int64_t wo = (wd + 2 * p.padding[1] - p.dilation[1] * (kw - 1) - 1) / p.stride[1] + 1;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t oh = 0; oh < ho; ++oh)
        for (int64_t ow = 0; ow < wo; ++ow)
          for (int64_t ic = 0; ic < cg; ++ic)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                int64_t ih = oh * p.stride[0] - p.padding[0] + i * p.dilation[0];
                int64_t iw = ow * p.stride[1] - p.padding[1] + j * p.dilation[1];
                if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
                int64_t channel = (oc / og) * cg + ic;
                visit(((b * c + channel) * h + ih) * wd + iw, ((oc * cg + ic) * kh + i) * kw + j,
                      ((b * o + oc) * ho + oh) * wo + ow);
              }
}

Shape output_shape(const Shape& x, const Shape& w, const ConvParams& p) {
  return {x[0], w[0], conv_output_extent(x[2], w[2], p.stride[0], p.padding[0], p.dilation[0]),
          conv_output_extent(x[3], w[3], p.stride[1], p.padding[1], p.dilation[1])};
}

InputSpec spec(Shape shape, bool non_contiguous = false) {
  InputSpec input;
  input.shape = std::move(shape);
  input.non_contiguous = non_contiguous;
  return input;
}

// Sums of up to a few hundred products of values in [-1, 1).
const std::vector<std::pair<DType, Tolerance>> cpu_tolerance = {
    {DType::F32, {5e-5, 5e-5}}, {DType::BF16, {6e-2, 3e-2}}, {DType::F16, {1e-2, 5e-3}}};
// cuDNN's backward algorithms sum in other orders; the GEMM fallback rounds 16-bit weight
// gradients between batch items.
const std::vector<std::pair<DType, Tolerance>> cuda_tolerance = {
    {DType::F32, {2e-4, 2e-4}}, {DType::F64, {1e-10, 1e-10}}, {DType::BF16, {6e-2, 3e-2}}, {DType::F16, {1e-2, 5e-3}}};

const std::vector<DType> all_float = {DType::F32, DType::F64, DType::BF16, DType::F16};

OpCase input_case(std::string name, Shape x, Shape w, ConvParams p, bool non_contiguous = false) {
  OpCase op_case;
  op_case.name = std::move(name);
  op_case.inputs = {spec(output_shape(x, w, p), non_contiguous), spec(w)};
  op_case.run = [=](const Inputs& in) {
    return Outputs{conv2d_backward_input(in[0], in[1], x, p.stride, p.padding, p.dilation, p.groups)};
  };
  op_case.reference = [=](const RefInputs& in) {
    RefTensor grad_x = ref_like(x);
    for_each_tap(x, w, p, [&](int64_t xi, int64_t wi, int64_t yi) { grad_x.at(xi) += in[0].at(yi) * in[1].at(wi); });
    return RefOutputs{grad_x};
  };
  op_case.dtypes = all_float;
  op_case.cpu_tolerance = cpu_tolerance;
  op_case.cuda_tolerance = cuda_tolerance;
  return op_case;
}

OpCase weight_case(std::string name, Shape x, Shape w, ConvParams p, bool non_contiguous = false) {
  OpCase op_case;
  op_case.name = std::move(name);
  op_case.inputs = {spec(output_shape(x, w, p)), spec(x, non_contiguous)};
  op_case.run = [=](const Inputs& in) {
    return Outputs{conv2d_backward_weight(in[0], in[1], w, p.stride, p.padding, p.dilation, p.groups)};
  };
  op_case.reference = [=](const RefInputs& in) {
    RefTensor grad_w = ref_like(w);
    for_each_tap(x, w, p, [&](int64_t xi, int64_t wi, int64_t yi) { grad_w.at(wi) += in[0].at(yi) * in[1].at(xi); });
    return RefOutputs{grad_w};
  };
  op_case.dtypes = all_float;
  op_case.cpu_tolerance = cpu_tolerance;
  op_case.cuda_tolerance = cuda_tolerance;
  return op_case;
}

std::vector<OpCase> conv_backward_cases() {
  std::vector<OpCase> cases;
  struct Geometry {
    const char* name;
    Shape x, w;
    ConvParams p;
  };
  const std::vector<Geometry> geometries = {
      {"3x3", {2, 3, 7, 7}, {4, 3, 3, 3}, {}},
      {"3x3_pad", {2, 3, 6, 6}, {5, 3, 3, 3}, {.padding = {1, 1}}},
      {"stride2", {1, 4, 9, 10}, {6, 4, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}}},
      {"stride2_dropped_rows", {2, 2, 8, 8}, {3, 2, 3, 3}, {.stride = {2, 2}}},
      {"dilation2", {2, 2, 11, 9}, {3, 2, 3, 3}, {.padding = {2, 2}, .dilation = {2, 2}}},
      {"groups2", {2, 4, 6, 6}, {6, 2, 3, 3}, {.padding = {1, 1}, .groups = 2}},
      {"depthwise", {2, 5, 7, 7}, {5, 1, 3, 3}, {.padding = {1, 1}, .groups = 5}},
      {"1x1", {3, 8, 5, 5}, {4, 8, 1, 1}, {}},
      {"1x1_stride2", {1, 6, 7, 7}, {3, 6, 1, 1}, {.stride = {2, 2}}},
      {"rect_kernel", {1, 3, 6, 9}, {2, 3, 2, 5}, {.stride = {1, 2}, .padding = {1, 0}}},
      {"wide", {2, 16, 20, 20}, {32, 16, 3, 3}, {.padding = {1, 1}}},
  };
  for (const Geometry& g : geometries) {
    cases.push_back(input_case(std::string("conv2d_backward_input_") + g.name, g.x, g.w, g.p));
    cases.push_back(weight_case(std::string("conv2d_backward_weight_") + g.name, g.x, g.w, g.p));
  }
  cases.push_back(input_case("conv2d_backward_input_strided", {2, 3, 6, 5}, {4, 3, 3, 3}, {.padding = {1, 1}}, true));
  cases.push_back(weight_case("conv2d_backward_weight_strided", {2, 3, 6, 5}, {4, 3, 3, 3}, {.padding = {1, 1}}, true));
  return cases;
}

}  // namespace

WICK_REGISTER_OP_CASES(conv_backward_cases);

}  // namespace wick::testing
