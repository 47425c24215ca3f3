// Gradient-check entries for the layout family (engine/autograd/ops_layout.h): views, copies, and
// the layout changes between channels, space and tokens.
#include <gtest/gtest.h>

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_layout.h"
#include "tests/engine/gradcheck.h"

namespace wick::testing {
namespace {

using Inputs = std::vector<Tensor>;
using Outputs = std::vector<Tensor>;

std::vector<GradCase> view_grad_cases() {
  return {
      {.name = "reshape", .inputs = {{.shape = {2, 3, 4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::reshape(x[0], {4, -1})}; }},
      {.name = "reshape_of_transposed_copies",  // non-contiguous input: reshape has to copy
       .inputs = {{.shape = {3, 4, 2}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::reshape(autograd::transpose(x[0], 0, 1), {12, 2})}; }},
      {.name = "view", .inputs = {{.shape = {6, 2}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::view(x[0], {3, 2, 2})}; }},
      {.name = "flatten", .inputs = {{.shape = {2, 3, 2, 2}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::flatten(x[0], 1, 2)}; }},
      {.name = "permute", .inputs = {{.shape = {2, 3, 4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::permute(x[0], {2, 0, -2})}; }},
      {.name = "transpose_negative_axes", .inputs = {{.shape = {3, 5}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::transpose(x[0], -1, 0)}; }},
      {.name = "narrow", .inputs = {{.shape = {4, 7}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::narrow(x[0], 1, 2, 3)}; }},
      {.name = "narrow_of_permuted", .inputs = {{.shape = {4, 3, 5}}},
       .fn = [](const Inputs& x) {
         return Outputs{autograd::narrow(autograd::permute(x[0], {2, 0, 1}), 0, 1, 3)};
       }},
      {.name = "slice_step", .inputs = {{.shape = {3, 9}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::slice(x[0], -1, 1, -1, 3)}; }},
      {.name = "select_negative_index", .inputs = {{.shape = {3, 4, 2}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::select(x[0], 1, -1)}; }},
      {.name = "overlapping_windows",  // two views of one input: their gradients add up
       .inputs = {{.shape = {6}}},
       .fn = [](const Inputs& x) {
         return Outputs{autograd::mul(autograd::narrow(x[0], 0, 0, 4), autograd::narrow(x[0], 0, 2, 4))};
       }},
      {.name = "expand_lead_and_ones", .inputs = {{.shape = {3, 1, 2}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::expand(x[0], {4, 3, 5, -1})}; }},
      {.name = "squeeze_axis", .inputs = {{.shape = {3, 1, 2}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::squeeze(x[0], 1)}; }},
      {.name = "squeeze_not_one",  // returns x itself: the output still gets its own node
       .inputs = {{.shape = {3, 2}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::squeeze(x[0], 1), autograd::mul(x[0], 2.0)}; }},
      {.name = "squeeze_all", .inputs = {{.shape = {1, 3, 1, 2}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::squeeze(x[0])}; }},
      {.name = "unsqueeze", .inputs = {{.shape = {3, 2}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::unsqueeze(x[0], -1)}; }},
      {.name = "contiguous_of_transposed", .inputs = {{.shape = {3, 4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::contiguous(autograd::transpose(x[0], 0, 1))}; }},
      {.name = "contiguous_already", .inputs = {{.shape = {5}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::contiguous(x[0])}; }},
      {.name = "to_dtype_round_trip",  // f64 -> f32 -> f64: gradient cast back at each step
       .inputs = {{.shape = {4}}},
       .fn = [](const Inputs& x) {
         Tensor low = autograd::to_dtype(x[0], DType::F32);
         return Outputs{autograd::to_dtype(autograd::mul(low, low), x[0].dtype())};
       },
       .eps = 1e-3, .atol = 2e-4, .rtol = 1e-4},  // f32 rounding: a larger step (exact for a square)
      {.name = "to_device_round_trip", .inputs = {{.shape = {2, 3}}},
       .fn = [](const Inputs& x) {
         return Outputs{autograd::to_device(autograd::to_device(x[0], Device::cpu()), x[0].device())};
       }},
  };
}
WICK_REGISTER_GRAD_CASES(view_grad_cases);

TEST(GradView, ViewsShareStorageButHaveTheirOwnAutogradState) {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  autograd::set_requires_grad(x, true);
  Tensor t = autograd::transpose(x, 0, 1);
  Tensor same = autograd::squeeze(x, 0);  // extent 2: the runtime returns x itself
  for (const Tensor& v : {t, same}) {
    EXPECT_EQ(v.storage().get(), x.storage().get());
    EXPECT_TRUE(autograd::requires_grad(v));
    EXPECT_FALSE(autograd::is_leaf(v));
  }
  EXPECT_FALSE(same.same(x));
  EXPECT_TRUE(autograd::is_leaf(x));  // x's own state is untouched
  EXPECT_EQ(autograd::grad_fn(x), nullptr);
}

TEST(GradView, NothingIsRecordedWithoutGradMode) {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  autograd::set_requires_grad(x, true);
  autograd::NoGradGuard no_grad;
  EXPECT_FALSE(autograd::requires_grad(autograd::permute(x, {1, 0})));
  EXPECT_FALSE(autograd::requires_grad(autograd::to_dtype(x, DType::F64)));
}

std::vector<GradCase> layout_grad_cases() {
  return {
      {.name = "pixel_shuffle", .inputs = {{.shape = {2, 8, 2, 3}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::pixel_shuffle(x[0], 2)}; }},
      {.name = "pixel_shuffle_no_batch_r3", .inputs = {{.shape = {9, 2, 1}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::pixel_shuffle(x[0], 3)}; }},
      {.name = "pixel_unshuffle", .inputs = {{.shape = {1, 2, 4, 6}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::pixel_unshuffle(x[0], 2)}; }},
      {.name = "patchify", .inputs = {{.shape = {2, 3, 4, 6}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::patchify(x[0], 2)}; }},
      {.name = "patchify_of_permuted", .inputs = {{.shape = {2, 4, 4, 3}}},  // NHWC viewed as NCHW
       .fn = [](const Inputs& x) { return Outputs{autograd::patchify(autograd::permute(x[0], {0, 3, 1, 2}), 2)}; }},
      {.name = "unpatchify", .inputs = {{.shape = {2, 6, 12}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::unpatchify(x[0], 2, 4, 6)}; }},
      {.name = "shuffle_then_unshuffle_scaled", .inputs = {{.shape = {1, 4, 3, 3}}},
       .fn = [](const Inputs& x) {
         return Outputs{autograd::pixel_unshuffle(autograd::mul(autograd::pixel_shuffle(x[0], 2), x[0].size(3)), 2)};
       }},
  };
}
WICK_REGISTER_GRAD_CASES(layout_grad_cases);

}  // namespace
}  // namespace wick::testing
