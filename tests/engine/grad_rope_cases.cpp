// Gradient-check entries for rotary position embedding (engine/autograd/ops_rope.h). The tables
// are constants: either real tables from rope_frequencies or arbitrary values (the op is linear in
// x for any cos/sin, so the check does not need them to be a rotation).
#include <gtest/gtest.h>

#include <string>

#include "engine/autograd/node.h"
#include "engine/autograd/ops_layout.h"
#include "engine/autograd/ops_rope.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/rope.h"
#include "tests/engine/gradcheck.h"

namespace wick::testing {
namespace {

using Inputs = std::vector<Tensor>;
using Outputs = std::vector<Tensor>;

RopeTables flux_like_tables(int64_t length, DType dtype) {
  // Positions [L, 3]: (0, row, column) on a 2-wide grid, axes dims {2, 2, 4} -> D = 8.
  std::vector<double> ids;
  for (int64_t l = 0; l < length; ++l) ids.insert(ids.end(), {0.0, double(l / 2), double(l % 2)});
  return rope_frequencies(Tensor::from_vector<double>(ids, {length, 3}), {2, 2, 4}, 10000.0, dtype);
}

std::vector<GradCase> rope_grad_cases() {
  return {
      {.name = "apply_rope_flux_tables", .inputs = {{.shape = {2, 3, 5, 8}}},
       .fn = [](const Inputs& x) {
         RopeTables t = flux_like_tables(5, x[0].dtype());
         return Outputs{autograd::apply_rope(x[0], t.cos.to(x[0].device()), t.sin.to(x[0].device()))};
       }},
      {.name = "apply_rope_arbitrary_tables_broadcast",  // [B, 1, L, D/2] tables for x [B, H, L, D]
       .inputs = {{.shape = {2, 2, 3, 6}},
                  {.shape = {2, 1, 3, 3}, .differentiable = false},
                  {.shape = {2, 1, 3, 3}, .differentiable = false}},
       .fn = [](const Inputs& x) { return Outputs{autograd::apply_rope(x[0], x[1], x[2])}; }},
      {.name = "apply_rope_of_transposed",  // x [B, L, H, D] transposed to [B, H, L, D]: strided
       .inputs = {{.shape = {1, 4, 2, 4}}, {.shape = {4, 2}, .differentiable = false},
                  {.shape = {4, 2}, .differentiable = false}},
       .fn = [](const Inputs& x) {
         return Outputs{autograd::apply_rope(autograd::transpose(x[0], 1, 2), x[1], x[2])};
       }},
  };
}
WICK_REGISTER_GRAD_CASES(rope_grad_cases);

TEST(GradRope, TablesThatRequireAGradientAreRejected) {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  Tensor cos = Tensor::from_vector<float>({1, 1}, {2, 1}), sin = Tensor::from_vector<float>({0, 0}, {2, 1});
  autograd::set_requires_grad(sin, true);
  try {
    autograd::apply_rope(x, cos, sin);
    ADD_FAILURE() << "expected a WickError";
  } catch (const WickError& e) {
    EXPECT_NE(std::string(e.what()).find("apply_rope"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace wick::testing
