// Gradient-check entries for the index family (engine/autograd/ops_index.h). Index inputs are
// constants: integer I64 values in [0, extent), never differentiated.
#include <gtest/gtest.h>

#include "engine/autograd/backward.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_index.h"
#include "engine/autograd/ops_layout.h"
#include "runtime/ops/creation.h"
#include "tests/engine/gradcheck.h"

namespace wick::testing {
namespace {

using Inputs = std::vector<Tensor>;
using Outputs = std::vector<Tensor>;

GradInput indices(Shape shape, int64_t extent) {
  return {.shape = std::move(shape), .low = 0, .high = static_cast<double>(extent), .differentiable = false,
          .integer = true, .dtype = DType::I64};
}

std::vector<GradCase> index_grad_cases() {
  return {
      // 12 ids over 5 rows: repeated ids sum their rows' gradients, some rows get none.
      {.name = "embedding_repeated_ids", .inputs = {{.shape = {5, 3}}, indices({3, 4}, 5)},
       .fn = [](const Inputs& x) { return Outputs{autograd::embedding(x[0], x[1])}; }},
      {.name = "embedding_i32_ids", .inputs = {{.shape = {4, 2}}, indices({6}, 4)},
       .fn = [](const Inputs& x) { return Outputs{autograd::embedding(x[0], x[1].to(DType::I32))}; }},
      {.name = "index_select_axis0_repeats", .inputs = {{.shape = {4, 3}}, indices({7}, 4)},
       .fn = [](const Inputs& x) { return Outputs{autograd::index_select(x[0], 0, x[1])}; }},
      {.name = "index_select_middle_axis", .inputs = {{.shape = {2, 5, 3}}, indices({4}, 5)},
       .fn = [](const Inputs& x) { return Outputs{autograd::index_select(x[0], -2, x[1])}; }},
      {.name = "index_select_of_transposed", .inputs = {{.shape = {3, 4}}, indices({5}, 3)},
       .fn = [](const Inputs& x) {
         return Outputs{autograd::index_select(autograd::transpose(x[0], 0, 1), 1, x[1])};
       }},
      {.name = "gather_axis1", .inputs = {{.shape = {3, 5}}, indices({3, 6}, 5)},
       .fn = [](const Inputs& x) { return Outputs{autograd::gather(x[0], 1, x[1])}; }},
      {.name = "gather_smaller_index", .inputs = {{.shape = {4, 3, 2}}, indices({2, 3, 2}, 4)},
       .fn = [](const Inputs& x) { return Outputs{autograd::gather(x[0], 0, x[1])}; }},
      {.name = "scatter_add_x_and_src",
       .inputs = {{.shape = {4, 3}}, indices({5, 3}, 4), {.shape = {5, 3}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::scatter_add(x[0], 0, x[1], x[2])}; }},
      {.name = "scatter_add_src_larger_than_index",  // src elements beyond the index get zero
       .inputs = {{.shape = {3, 4}}, indices({2, 3}, 4), {.shape = {3, 5}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::scatter_add(x[0], 1, x[1], x[2])}; }},
      {.name = "scatter_add_src_only",
       .inputs = {{.shape = {3, 4}, .differentiable = false}, indices({3, 4}, 3), {.shape = {3, 4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::scatter_add(x[0], 0, x[1], x[2])}; }},
  };
}
WICK_REGISTER_GRAD_CASES(index_grad_cases);

TEST(GradIndex, BF16EmbeddingGradientIsSummedInF32) {
  // 301 rows of 1/256 summed into one: 301/256 = 1 + 45/256 needs 8 fraction bits, so the result
  // is exact only if no step (accumulation or the returned gradient) is rounded to bf16.
  Tensor weight = wick::zeros({2, 3}, DType::BF16);
  autograd::set_requires_grad(weight, true);
  Tensor ids = wick::zeros({301}, DType::I64);
  Tensor out = autograd::embedding(weight, ids);
  Tensor grad = autograd::backward(out, wick::full({301, 3}, 1.0 / 256, DType::BF16)).get(weight);
  ASSERT_EQ(grad.dtype(), DType::F32);
  std::vector<float> g = grad.to_vector<float>();
  for (int c = 0; c < 3; ++c) {
    EXPECT_FLOAT_EQ(g[static_cast<size_t>(c)], 301.0f / 256.0f);
    EXPECT_EQ(g[static_cast<size_t>(3 + c)], 0.0f);
  }
}

}  // namespace
}  // namespace wick::testing
