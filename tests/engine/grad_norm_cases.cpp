// Gradient-check entries for layer_norm, rms_norm and group_norm (engine/autograd/ops_norm.h).
#include "engine/autograd/ops_norm.h"
#include "tests/engine/gradcheck.h"

namespace wick::testing {
namespace {

using Inputs = std::vector<Tensor>;
using Outputs = std::vector<Tensor>;

// Activations with a non-zero mean, so centring matters.
GradInput activations(Shape shape) { return {.shape = std::move(shape), .low = -2.0, .high = 3.0}; }

std::vector<GradCase> norm_grad_cases() {
  return {
      {.name = "layer_norm_affine", .inputs = {activations({3, 8}), {.shape = {8}}, {.shape = {8}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::layer_norm(x[0], {8}, x[1], x[2])}; }},
      {.name = "layer_norm_plain", .inputs = {activations({2, 3, 5})},
       .fn = [](const Inputs& x) { return Outputs{autograd::layer_norm(x[0], {5})}; }},
      {.name = "layer_norm_weight_only", .inputs = {activations({4, 6}), {.shape = {6}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::layer_norm(x[0], {6}, x[1])}; }},
      {.name = "layer_norm_bias_only", .inputs = {activations({4, 6}), {.shape = {6}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::layer_norm(x[0], {6}, Tensor(), x[1])}; }},
      {.name = "layer_norm_two_axes", .inputs = {activations({2, 3, 4}), {.shape = {3, 4}}, {.shape = {3, 4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::layer_norm(x[0], {3, 4}, x[1], x[2])}; }},
      {.name = "layer_norm_constant_x", .inputs = {{.shape = {3, 5}, .differentiable = false}, {.shape = {5}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::layer_norm(x[0], {5}, x[1])}; }},
      {.name = "rms_norm_weight", .inputs = {activations({3, 6}), {.shape = {6}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::rms_norm(x[0], x[1])}; }},
      {.name = "rms_norm_plain", .inputs = {activations({2, 2, 7})},
       .fn = [](const Inputs& x) { return Outputs{autograd::rms_norm(x[0])}; }},
      {.name = "group_norm_spatial", .inputs = {activations({2, 4, 3, 3}), {.shape = {4}}, {.shape = {4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::group_norm(x[0], 2, x[1], x[2])}; }},
      {.name = "group_norm_plain", .inputs = {activations({2, 6, 5})},
       .fn = [](const Inputs& x) { return Outputs{autograd::group_norm(x[0], 3)}; }},
      {.name = "group_norm_no_spatial", .inputs = {activations({3, 4}), {.shape = {4}}, {.shape = {4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::group_norm(x[0], 2, x[1], x[2])}; }},
      {.name = "group_norm_instance_3d", .inputs = {activations({1, 3, 2, 2, 3}), {.shape = {3}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::group_norm(x[0], 3, x[1])}; }},
  };
}
WICK_REGISTER_GRAD_CASES(norm_grad_cases);

}  // namespace
}  // namespace wick::testing
