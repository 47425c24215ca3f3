// Gradient-check entries for the layout family (engine/autograd/ops_layout.h).
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_layout.h"
#include "engine/autograd/ops_view.h"
#include "tests/engine/gradcheck.h"

namespace wick::testing {
namespace {

using Inputs = std::vector<Tensor>;
using Outputs = std::vector<Tensor>;

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
