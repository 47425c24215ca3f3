// Gradient-check entries for conv2d (engine/autograd/ops_conv.h).
#include <array>

#include "engine/autograd/ops_conv.h"
#include "tests/engine/gradcheck.h"

namespace wick::testing {
namespace {

using Inputs = std::vector<Tensor>;
using Outputs = std::vector<Tensor>;

struct ConvParams {
  std::array<int64_t, 2> stride = {1, 1}, padding = {0, 0}, dilation = {1, 1};
  int64_t groups = 1;
};

GradCase conv_case(std::string name, Shape x, Shape w, bool with_bias, ConvParams p) {
  GradCase c;
  c.name = std::move(name);
  c.inputs = {{.shape = std::move(x)}, {.shape = w}};
  if (with_bias) c.inputs.push_back({.shape = {w[0]}});
  c.fn = [=](const Inputs& in) {
    Tensor bias = in.size() > 2 ? in[2] : Tensor();
    return Outputs{autograd::conv2d(in[0], in[1], bias, p.stride, p.padding, p.dilation, p.groups)};
  };
  return c;
}

std::vector<GradCase> conv_grad_cases() {
  return {
      conv_case("conv2d_3x3_bias", {2, 3, 6, 6}, {4, 3, 3, 3}, true, {}),
      conv_case("conv2d_3x3_no_bias", {1, 2, 5, 6}, {3, 2, 3, 3}, false, {}),
      conv_case("conv2d_stride2_padding", {2, 2, 7, 6}, {3, 2, 3, 3}, true, {.stride = {2, 2}, .padding = {1, 1}}),
      conv_case("conv2d_dilation2", {1, 2, 8, 7}, {2, 2, 3, 3}, true, {.padding = {2, 1}, .dilation = {2, 2}}),
      conv_case("conv2d_groups2", {2, 4, 5, 5}, {6, 2, 3, 3}, true, {.padding = {1, 1}, .groups = 2}),
      conv_case("conv2d_depthwise", {2, 3, 6, 5}, {3, 1, 3, 3}, false, {.stride = {1, 2}, .padding = {1, 1}, .groups = 3}),
      conv_case("conv2d_pointwise", {2, 4, 3, 3}, {5, 4, 1, 1}, true, {}),
      conv_case("conv2d_asymmetric", {1, 2, 9, 8}, {2, 2, 2, 3}, false, {.stride = {3, 2}, .padding = {0, 1}}),
  };
}
WICK_REGISTER_GRAD_CASES(conv_grad_cases);

}  // namespace
}  // namespace wick::testing
