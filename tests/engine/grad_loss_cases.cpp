// Gradient-check entries for the loss family (engine/autograd/ops_loss.h): every reduction,
// class-index and probability targets, label smoothing, spatial cross-entropy, pos_weight.
#include "engine/autograd/ops_loss.h"
#include "tests/engine/gradcheck.h"

namespace wick::testing {
namespace {

using Inputs = std::vector<Tensor>;
using Outputs = std::vector<Tensor>;
using autograd::Reduction;

// Class indices in [0, n_classes) as a constant I64 input.
GradInput labels(Shape shape, int64_t n_classes) {
  return {.shape = std::move(shape), .low = 0, .high = static_cast<double>(n_classes), .differentiable = false,
          .integer = true, .dtype = DType::I64};
}

std::vector<GradCase> loss_grad_cases() {
  return {
      {.name = "mse_mean", .inputs = {{.shape = {3, 4}}, {.shape = {3, 4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::mse_loss(x[0], x[1])}; }},
      {.name = "mse_sum_none", .inputs = {{.shape = {5}}, {.shape = {5}}},
       .fn = [](const Inputs& x) {
         return Outputs{autograd::mse_loss(x[0], x[1], Reduction::Sum),
                        autograd::mse_loss(x[0], x[1], Reduction::None)};
       }},
      {.name = "mse_constant_target", .inputs = {{.shape = {2, 3}}, {.shape = {2, 3}, .differentiable = false}},
       .fn = [](const Inputs& x) { return Outputs{autograd::mse_loss(x[0], x[1])}; }},
      {.name = "cross_entropy_mean", .inputs = {{.shape = {4, 5}, .low = -2.0, .high = 2.0}, labels({4}, 5)},
       .fn = [](const Inputs& x) { return Outputs{autograd::cross_entropy_with_logits(x[0], x[1])}; }},
      {.name = "cross_entropy_sum_none", .inputs = {{.shape = {3, 4}, .low = -2.0, .high = 2.0}, labels({3}, 4)},
       .fn = [](const Inputs& x) {
         return Outputs{autograd::cross_entropy_with_logits(x[0], x[1], Reduction::Sum),
                        autograd::cross_entropy_with_logits(x[0], x[1], Reduction::None)};
       }},
      {.name = "cross_entropy_label_smoothing",
       .inputs = {{.shape = {4, 3}, .low = -2.0, .high = 2.0}, labels({4}, 3)},
       .fn = [](const Inputs& x) {
         return Outputs{autograd::cross_entropy_with_logits(x[0], x[1], Reduction::Mean, 0.2)};
       }},
      {.name = "cross_entropy_spatial",
       .inputs = {{.shape = {2, 3, 2, 2}, .low = -2.0, .high = 2.0}, labels({2, 2, 2}, 3)},
       .fn = [](const Inputs& x) {
         return Outputs{autograd::cross_entropy_with_logits(x[0], x[1]),
                        autograd::cross_entropy_with_logits(x[0], x[1], Reduction::None, 0.1)};
       }},
      {.name = "cross_entropy_probabilities", .inputs = {{.shape = {3, 4}, .low = -2.0, .high = 2.0},
                                                        {.shape = {3, 4}, .low = 0.0, .high = 1.0}},
       .fn = [](const Inputs& x) {
         return Outputs{autograd::cross_entropy_with_logits(x[0], x[1]),
                        autograd::cross_entropy_with_logits(x[0], x[1], Reduction::None, 0.3)};
       }},
      {.name = "bce_mean",
       .inputs = {{.shape = {3, 4}, .low = -4.0, .high = 4.0}, {.shape = {3, 4}, .low = 0.0, .high = 1.0}},
       .fn = [](const Inputs& x) { return Outputs{autograd::bce_with_logits(x[0], x[1])}; }},
      {.name = "bce_sum_none",
       .inputs = {{.shape = {6}, .low = -4.0, .high = 4.0}, {.shape = {6}, .low = 0.0, .high = 1.0}},
       .fn = [](const Inputs& x) {
         return Outputs{autograd::bce_with_logits(x[0], x[1], Reduction::Sum),
                        autograd::bce_with_logits(x[0], x[1], Reduction::None)};
       }},
      {.name = "bce_pos_weight",
       .inputs = {{.shape = {3, 4}, .low = -4.0, .high = 4.0}, {.shape = {3, 4}, .low = 0.0, .high = 1.0},
                  {.shape = {4}, .low = 0.5, .high = 3.0, .differentiable = false}},
       .fn = [](const Inputs& x) {
         return Outputs{autograd::bce_with_logits(x[0], x[1], Reduction::Mean, x[2]),
                        autograd::bce_with_logits(x[0], x[1], Reduction::None, x[2])};
       }},
  };
}
WICK_REGISTER_GRAD_CASES(loss_grad_cases);

}  // namespace
}  // namespace wick::testing
