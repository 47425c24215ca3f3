// Gradient-check entries for the join family (engine/autograd/ops_join.h).
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_join.h"
#include "engine/autograd/ops_layout.h"
#include "tests/engine/gradcheck.h"

namespace wick::testing {
namespace {

using Inputs = std::vector<Tensor>;
using Outputs = std::vector<Tensor>;

std::vector<GradCase> join_grad_cases() {
  return {
      {.name = "concat_three", .inputs = {{.shape = {2, 3}}, {.shape = {2, 1}}, {.shape = {2, 4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::concat({x[0], x[1], x[2]}, -1)}; }},
      {.name = "concat_constant_and_transposed",  // a constant piece and a non-contiguous one
       .inputs = {{.shape = {3, 2}}, {.shape = {2, 2}, .differentiable = false}},
       .fn = [](const Inputs& x) { return Outputs{autograd::concat({autograd::transpose(x[0], 0, 1), x[1]}, 1)}; }},
      {.name = "concat_same_input_twice", .inputs = {{.shape = {2, 2}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::concat({x[0], x[0]}, 0)}; }},
      {.name = "stack_middle", .inputs = {{.shape = {2, 3}}, {.shape = {2, 3}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::stack({x[0], x[1]}, 1)}; }},
      {.name = "stack_last", .inputs = {{.shape = {4}}, {.shape = {4}}, {.shape = {4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::stack({x[0], x[1], x[2]}, -1)}; }},
      {.name = "split_sizes_all_outputs", .inputs = {{.shape = {3, 7}}},
       .fn = [](const Inputs& x) { return autograd::split(x[0], std::vector<int64_t>{2, 4, 1}, 1); }},
      {.name = "split_size_uneven", .inputs = {{.shape = {5, 2}}},
       .fn = [](const Inputs& x) { return autograd::split(x[0], 2, 0); }},
      {.name = "split_some_outputs_unused",  // the middle piece gets no gradient: zeros
       .inputs = {{.shape = {6, 2}}},
       .fn = [](const Inputs& x) {
         std::vector<Tensor> parts = autograd::split(x[0], 2, 0);
         return Outputs{autograd::mul(parts[0], parts[2])};
       }},
      {.name = "chunk_qkv", .inputs = {{.shape = {2, 9}}},
       .fn = [](const Inputs& x) {
         std::vector<Tensor> qkv = autograd::chunk(x[0], 3, -1);
         return Outputs{autograd::add(autograd::mul(qkv[0], qkv[1]), qkv[2]), qkv[1]};
       }},
      {.name = "pad_constant", .inputs = {{.shape = {2, 3, 4}}},
       .fn = [](const Inputs& x) {
         return Outputs{autograd::pad(x[0], {1, 2, 0, 1}, PadMode::Constant, 0.5)};
       }},
      {.name = "pad_reflect_2d", .inputs = {{.shape = {2, 4, 5}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::pad(x[0], {2, 3, 3, 1}, PadMode::Reflect)}; }},
      {.name = "pad_reflect_one_sided", .inputs = {{.shape = {3, 4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::pad(x[0], {0, 2}, PadMode::Reflect)}; }},
      {.name = "pad_replicate_2d", .inputs = {{.shape = {2, 3, 4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::pad(x[0], {3, 1, 0, 2}, PadMode::Replicate)}; }},
      {.name = "pad_replicate_extent_one", .inputs = {{.shape = {2, 1}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::pad(x[0], {2, 2}, PadMode::Replicate)}; }},
      {.name = "pad_reflect_transposed", .inputs = {{.shape = {5, 3}}},
       .fn = [](const Inputs& x) {
         return Outputs{autograd::pad(autograd::transpose(x[0], 0, 1), {1, 1, 1, 1}, PadMode::Reflect)};
       }},
  };
}
WICK_REGISTER_GRAD_CASES(join_grad_cases);

}  // namespace
}  // namespace wick::testing
