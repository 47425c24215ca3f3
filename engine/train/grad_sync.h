// Data-parallel gradient averaging: after backward every rank holds the gradients of its own
// micro-batches; average_gradients packs them into one flat f32 buffer, all-reduces it (sum) and
// scales by 1/world, so every rank steps its optimizer with the same gradients.
//
//   autograd::GradientStore grads = ...;                      // this rank's
//   average_gradients(*group, model->trainable_parameters(), grads);
//   optimizer->step(grads, lr);                                // identical on every rank
//
// A parameter without a gradient on this rank contributes zeros. With a CPU group (MPI) and CUDA
// parameters the buffer is staged through host memory. One collective per call (gradient buckets
// overlapping backward are a later refinement).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "comm/process_group.h"
#include "engine/autograd/backward.h"
#include "runtime/tensor.h"

namespace wick {

void average_gradients(comm::ProcessGroup& group, const std::vector<std::pair<std::string, Tensor>>& parameters,
                       autograd::GradientStore& grads);

// Sums `values` over the ranks (f64, one collective) and returns the sums; world size 1 returns them unchanged.
std::vector<double> all_reduce_sum(comm::ProcessGroup& group, const std::vector<double>& values);

}  // namespace wick
